"""``lakefs-gc inventory generate | show``, in-process: generated deliveries read back and route back.

The invariant every generated delivery must keep: its rows, read back through discovery and the
flavour's reader and routed to the namespace it lists, give exactly the namespace-relative
addresses of the objects there, minus what the GC must never consider (``_lakefs/``, ``dummy``,
files directly under ``data/``, other top-level directories).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pytest
import yaml

from lakefs_gc.cli.main import main
from lakefs_gc.inventory import azure
from lakefs_gc.inventory import generate as generate_module
from lakefs_gc.inventory.delivery import INVENTORY_SCHEMA
from lakefs_gc.inventory.discovery import discover, open_destination, read_rows
from lakefs_gc.inventory.generate import generate_delivery, list_namespace
from lakefs_gc.inventory.mapping import NamespaceRoute, route_rows
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import StorageLocation, parse_location, parse_storage_namespace
from tests.support.object_stores import azure_options, blob_service, s3_client, s3_options
from tests.support.servers import AzuriteServer, MotoServer

#: namespace-relative address -> whether routing keeps it (may the GC ever consider it)
OBJECTS = {
    "data/s1/plain": True,
    "data/s1/with space": True,
    "data/s1/a+b": True,
    "data/s1/100%.txt": True,
    "data/s1/%20literal": True,
    "data/s1/%2Bliteral": True,
    "data/s1/a b+c %2B d": True,
    "data/s1/hash#tag": True,
    "data/ünï/日本語.bin": True,
    "data/s2/sub/deep": True,
    "0123456789abcdef0123456789abcdef": True,  # a legacy object at the namespace root
    "_lakefs/0f1e2d3c": False,
    "_lakefs/retention/gc/rules.json": False,
    "data/loose": False,
    "dummy": False,
    "other/dir/file": False,
}
FLAVOUR_FORMATS = [("s3", "csv"), ("s3", "parquet"), ("s3", "orc"), ("azure", "csv"), ("azure", "parquet")]
T1 = datetime(2026, 3, 1, 6, 30, tzinfo=timezone.utc)


@dataclass
class Namespace:
    """A populated storage namespace and how the CLI and the library reach it."""

    uri: str
    location: StorageLocation
    options: StorageOptions
    args: list[str] = field(default_factory=list)
    objects: dict[str, bool] = field(default_factory=lambda: dict(OBJECTS))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    code, out, err = run(capsys, *argv, "--output", "json")
    return code, json.loads(out) if out.strip() else {}, err


def local_namespace(tmp_path: Path) -> Namespace:
    root = tmp_path / "storage"
    for i, address in enumerate(OBJECTS):
        path = root / "ns" / address
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * (i + 1))
    options = StorageOptions(local_root=str(root))
    location = parse_storage_namespace("local://ns", local_root=str(root))
    return Namespace("local://ns", location, options, ["--local-root", str(root)])


def long_address(prefix: str) -> str:
    """A 1 KiB key (S3's and Azure's limit) inside ``prefix``, as a data object."""
    return "data/s3/" + "L" * (1024 - len(prefix) - len("data/s3/"))


def moto_namespace(moto: MotoServer, bucket: str, tmp_path: Path) -> Namespace:
    # S3 keys come from a config file, as operators pass them (flags do not take secrets).
    config = tmp_path / "gc.yaml"
    creds = {"access_key_id": moto.access_key_id, "secret_access_key": moto.secret_access_key}
    config.write_text(yaml.safe_dump({"storage": {"s3": creds}}))
    ns = Namespace(
        f"s3://{bucket}/repos/a",
        parse_storage_namespace(f"s3://{bucket}/repos/a"),
        StorageOptions(s3=s3_options(moto)),
        ["--config", str(config), "--s3-endpoint", moto.endpoint_url, "--s3-region", moto.region],
    )
    ns.objects[long_address("repos/a/")] = True
    client = s3_client(moto)
    for i, address in enumerate(ns.objects):
        client.put_object(Bucket=bucket, Key="repos/a/" + address, Body=b"x" * (i + 1))
    return ns


def azurite_namespace(azurite: AzuriteServer, container: str) -> Namespace:
    uri = f"https://devstoreaccount1.blob.core.windows.net/{container}/repos/a"
    ns = Namespace(
        uri,
        parse_storage_namespace(uri),
        StorageOptions(azure=azure_options(azurite)),
        ["--azure-blob-endpoint", azurite.blob_endpoint, "--azure-account-key", azurite.account_key],
    )
    ns.objects[long_address("repos/a/")] = True
    blobs = blob_service(azurite).get_container_client(container)
    for i, address in enumerate(ns.objects):
        blobs.upload_blob("repos/a/" + address, b"x" * (i + 1))
    return ns


def read_back(uri: str, options: StorageOptions) -> tuple[pa.Table, Any]:
    """The only complete delivery under ``uri``, all its rows read through discovery."""
    fs, path, _ = open_destination(uri, options)
    found = discover(fs, path)
    assert (found.pending, found.rejected) == ([], [])
    [delivery] = found.complete
    batches = [b for f in delivery.files for b in read_rows(fs, delivery, f)]
    return pa.Table.from_batches(batches, schema=INVENTORY_SCHEMA), delivery


def check_routes_back(ns: Namespace, rows: pa.Table, delivery: Any) -> None:
    """The invariant: routed rows == the namespace's objects the GC may consider."""
    routed = route_rows(
        rows,
        [NamespaceRoute.of("repo", ns.location)],
        delivery_id=delivery.id,
        snapshot_time=delivery.snapshot_time,
    )
    assert sorted(routed.column("address").to_pylist()) == sorted(a for a, keep in ns.objects.items() if keep)
    assert set(routed.column("repository").to_pylist()) == {"repo"}


def check_rows_match_listing(ns: Namespace, rows: pa.Table, flavour: str, fmt: str) -> None:
    """Every object read back with its size; times as precise as the format stores them; no ETags."""
    listed = list_namespace(ns.location, ns.options).sort_by("key")
    got = rows.sort_by("key")
    assert got.column("bucket").to_pylist() == [ns.location.container] * len(ns.objects)
    assert got.column("key").to_pylist() == listed.column("key").to_pylist()
    assert got.column("size").equals(listed.column("size"))
    unit = "us" if (flavour, fmt) == ("azure", "csv") else "ms"  # S3 writes millis, Azure parquet too
    expected = pc.cast(listed.column("last_modified"), pa.timestamp(unit, tz="UTC"), safe=False)
    assert got.column("last_modified").equals(pc.cast(expected, pa.timestamp("us", tz="UTC")))
    assert set(got.column("etag").to_pylist()) <= {None, ""}  # pyarrow.fs listings carry no ETag


def generate(capsys: pytest.CaptureFixture[str], ns: Namespace, dest: str, *extra: str) -> dict[str, Any]:
    code, result, err = run_json(
        capsys, "inventory", "generate", "--namespace", ns.uri, "--to", dest, *ns.args, *extra
    )
    assert code == 0, err
    return result


def round_trip(capsys: pytest.CaptureFixture[str], ns: Namespace, dest: str, flavour: str, fmt: str) -> None:
    """generate, then show (destination and manifest), then read back and route.

    Every destination is reachable with the namespace's storage options (same store, or local disk).
    """
    result = generate(capsys, ns, dest, "--flavour", flavour, "--format", fmt, "--rows-per-file", "5")
    sizes = range(1, len(ns.objects) + 1)
    assert (result["flavour"], result["format"]) == (flavour, fmt)
    assert (result["objects"], result["bytes"]) == (len(ns.objects), sum(sizes))
    assert result["data_files"] == -(-len(ns.objects) // 5)

    code, shown, err = run_json(capsys, "inventory", "show", dest, "--rows", "7", *ns.args)
    assert code == 0, err
    assert [d["status"] for d in shown["deliveries"]] == ["complete"]
    assert shown["delivery"]["manifest"] == result["manifest"]
    assert (shown["delivery"]["flavour"], shown["delivery"]["format"]) == (flavour, fmt)
    assert shown["delivery"]["data_files"] == result["data_files"]
    assert len(shown["rows"]) == 7
    code, out, err = run(capsys, "inventory", "show", manifest_uri(dest, result["manifest"]), *ns.args)
    assert code == 0, err
    assert f"{flavour} ({fmt})" in out and "first 10 row(s):" in out

    rows, delivery = read_back(dest, ns.options)
    check_routes_back(ns, rows, delivery)
    check_rows_match_listing(ns, rows, flavour, fmt)


def manifest_uri(dest: str, manifest_path: str) -> str:
    """The manifest's URI, from its filesystem path under ``dest``."""
    location = parse_location(dest)
    if location.kind == "local":
        return manifest_path
    return dest.rstrip("/") + manifest_path[len(location.fs_path) :]


# --------------------------------------------------------------------------------------------
# round trips


@pytest.mark.parametrize(("flavour", "fmt"), FLAVOUR_FORMATS[:3])
def test_round_trip_local(capsys: pytest.CaptureFixture[str], tmp_path: Path, flavour: str, fmt: str) -> None:
    ns = local_namespace(tmp_path)
    round_trip(capsys, ns, str(tmp_path / "inventory"), flavour, fmt)


@pytest.mark.parametrize(("flavour", "fmt"), FLAVOUR_FORMATS[3:])
def test_round_trip_azurite_namespace_to_local_disk(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    azurite: AzuriteServer,
    azure_container: str,
    flavour: str,
    fmt: str,
) -> None:
    """Azure flavours need a container (a local namespace has none): the namespace is on Azurite."""
    ns = azurite_namespace(azurite, azure_container)
    round_trip(capsys, ns, str(tmp_path / "inventory"), flavour, fmt)


@pytest.mark.parametrize(
    ("flavour", "fmt"), [("s3", "csv"), ("s3", "parquet"), ("s3", "orc"), ("azure", "csv")]
)
def test_generate_on_moto(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    moto: MotoServer,
    s3_bucket: str,
    flavour: str,
    fmt: str,
) -> None:
    ns = moto_namespace(moto, s3_bucket, tmp_path)
    round_trip(capsys, ns, f"s3://{s3_bucket}/inventory", flavour, fmt)


@pytest.mark.parametrize(("flavour", "fmt"), [("azure", "csv"), ("azure", "parquet"), ("s3", "parquet")])
def test_generate_on_azurite(
    capsys: pytest.CaptureFixture[str], azurite: AzuriteServer, azure_container: str, flavour: str, fmt: str
) -> None:
    ns = azurite_namespace(azurite, azure_container)
    dest = f"https://devstoreaccount1.blob.core.windows.net/{azure_container}/inventory"
    round_trip(capsys, ns, dest, flavour, fmt)


def test_s3_manifest_keys_are_bucket_relative_on_s3(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, moto: MotoServer, s3_bucket: str
) -> None:
    """As S3 writes them: the destination prefix is part of each data file's key."""
    ns = moto_namespace(moto, s3_bucket, tmp_path)
    result = generate(capsys, ns, f"s3://{s3_bucket}/inv/daily", "--snapshot-time", "2026-03-01T06:30Z")
    assert (
        result["manifest"] == f"{s3_bucket}/inv/daily/{s3_bucket}/lakefs-gc/2026-03-01T06-30Z/manifest.json"
    )
    body = (
        s3_client(moto).get_object(Bucket=s3_bucket, Key=result["manifest"].split("/", 1)[1])["Body"].read()
    )
    manifest = json.loads(body)
    assert manifest["sourceBucket"] == s3_bucket
    assert manifest["destinationBucket"] == f"arn:aws:s3:::{s3_bucket}"
    assert manifest["files"][0]["key"].startswith(f"inv/daily/{s3_bucket}/lakefs-gc/data/")


# --------------------------------------------------------------------------------------------
# show


def _corrupt_checksum(manifest: str) -> None:
    Path(manifest).with_name("manifest.checksum").write_text(hashlib.md5(b"other").hexdigest())


def test_show_lists_complete_pending_and_rejected(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ns = local_namespace(tmp_path)
    dest = str(tmp_path / "inventory")
    listed = list_namespace(ns.location, ns.options)
    in_container = listed.set_column(0, "bucket", pa.array(["c"] * listed.num_rows, pa.string()))
    older_azure = azure.write_delivery(pafs.LocalFileSystem(), dest, "rule", T1.replace(hour=1), in_container)
    good = generate(capsys, ns, dest, "--snapshot-time", "2026-03-01T06:30Z")["manifest"]
    pending = generate(capsys, ns, dest, "--snapshot-time", "2026-03-02T06:30Z")["manifest"]
    Path(pending).with_name("manifest.checksum").unlink()
    rejected = generate(capsys, ns, dest, "--snapshot-time", "2026-03-03T06:30Z", "--format", "csv")[
        "manifest"
    ]
    _corrupt_checksum(rejected)

    code, shown, err = run_json(capsys, "inventory", "show", dest, *ns.args)

    assert code == 0, err
    assert [(d["status"], d["manifest"]) for d in shown["deliveries"]] == [
        ("complete", older_azure),
        ("complete", good),
        ("pending", pending),
        ("rejected", rejected),
    ]
    assert shown["deliveries"][1]["snapshot_time"] == "2026-03-01T06:30:00Z"
    assert "does not match" in shown["deliveries"][3]["reason"]
    assert shown["delivery"]["manifest"] == good  # the newest complete one
    assert len(shown["rows"]) == 10

    code, out, _ = run(capsys, "inventory", "show", dest, "--rows", "2", *ns.args)
    assert code == 0
    assert "2 complete, 1 pending, 1 rejected" in out
    assert f"pending   {pending}" in out and "rejected" in out and "does not match" in out
    assert "first 2 row(s):" in out

    code, shown, _ = run_json(capsys, "inventory", "show", dest, "--flavour", "azure", *ns.args)
    assert code == 0, _
    assert shown["delivery"]["manifest"] == older_azure


@pytest.mark.parametrize(
    ("which", "reason"), [("pending", "pending: no manifest.checksum"), ("rejected", "MD5")]
)
def test_show_of_an_unusable_manifest_fails(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, which: str, reason: str
) -> None:
    ns = local_namespace(tmp_path)
    manifest = generate(capsys, ns, str(tmp_path / "inventory"))["manifest"]
    if which == "pending":
        Path(manifest).with_name("manifest.checksum").unlink()
    else:
        _corrupt_checksum(manifest)
    code, out, err = run(capsys, "inventory", "show", manifest)
    assert code == 7
    assert out == ""
    assert err.startswith("lakefs-gc: error: ") and reason in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("state", ["missing", "empty", "only pending"])
def test_show_without_a_complete_delivery_fails(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, state: str
) -> None:
    dest = tmp_path / "inventory"
    if state == "empty":
        dest.mkdir()
    if state == "only pending":
        ns = local_namespace(tmp_path)
        manifest = generate(capsys, ns, str(dest))["manifest"]
        Path(manifest).with_name("manifest.checksum").unlink()
    code, shown, err = run_json(capsys, "inventory", "show", str(dest))
    assert code == 7
    assert f"no complete inventory delivery under {dest}" in err
    assert shown["delivery"] is None
    assert [d["status"] for d in shown["deliveries"]] == (["pending"] if state == "only pending" else [])
    if state == "only pending":
        assert "(1 pending)" in err


# --------------------------------------------------------------------------------------------
# generate: what it refuses, snapshot time, progress


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (
            ["--flavour", "azure", "--format", "orc"],
            "azure inventories are written as csv or parquet, not 'orc'",
        ),
        (["--flavour", "azure"], "local namespace has no container"),
        (["--rows-per-file", "0"], "rows per data file must be positive"),
    ],
)
def test_generate_refuses(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: list[str], reason: str
) -> None:
    ns = local_namespace(tmp_path)
    dest = tmp_path / "inventory"
    code, out, err = run(
        capsys, "inventory", "generate", "--namespace", ns.uri, "--to", str(dest), *ns.args, *extra
    )
    assert (code, out) == (7, "")
    assert reason in err
    assert not dest.exists()


@pytest.mark.parametrize("inside", ["", "data/inventory"])
def test_generate_refuses_a_destination_the_gc_could_collect(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, inside: str
) -> None:
    ns = local_namespace(tmp_path)
    dest = ns.location.join(inside).key if inside else ns.location.key
    code, _, err = run(capsys, "inventory", "generate", "--namespace", ns.uri, "--to", dest, *ns.args)
    assert code == 7 and "could delete the delivery's own files" in err


def test_generate_under_the_namespace_lakefs_dir_is_listed_but_never_routed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ns = local_namespace(tmp_path)
    dest = ns.location.join("_lakefs/inventory").key
    generate(capsys, ns, dest)
    result = generate(capsys, ns, dest)  # the second listing sees the first delivery's files
    assert result["objects"] > len(OBJECTS)


def test_library_snapshot_defaults_to_now_and_progress_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(generate_module, "PROGRESS_EVERY", 5)
    ns = local_namespace(tmp_path)
    messages: list[str] = []
    manifest = generate_delivery(
        ns.location, ns.options, parse_location(str(tmp_path / "inv")), now=T1, progress=messages.append
    )
    assert manifest == str(tmp_path / "inv/local/lakefs-gc/2026-03-01T06-30Z/manifest.json")
    # reported as listings complete (one directory at a time), so at the first count past each step
    counts = [int(m.split()[1]) for m in messages if m.startswith("listed")]
    assert len(counts) == len(OBJECTS) // 5 and [c // 5 for c in counts] == list(range(1, len(counts) + 1))
    assert counts[-1] <= len(OBJECTS)
    assert messages[-1].startswith(f"wrote {len(OBJECTS)} objects")
    _, delivery = read_back(str(tmp_path / "inv"), ns.options)
    assert delivery.snapshot_time == T1


def test_empty_namespace_gives_an_empty_complete_delivery(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, result, err = run_json(
        capsys,
        "inventory",
        "generate",
        "--namespace",
        str(tmp_path / "nothing"),
        "--to",
        str(tmp_path / "inv"),
    )
    assert code == 0 and result["objects"] == 0 and "no objects under" in err
    code, shown, _ = run_json(capsys, "inventory", "show", str(tmp_path / "inv"))
    assert code == 0 and shown["rows"] == []


# --------------------------------------------------------------------------------------------
# help


@pytest.mark.parametrize(
    ("argv", "phrases"),
    [
        (["inventory", "--help"], ["show", "generate", "S3 Inventory", "Azure inventory"]),
        (["inventory", "show", "--help"], ["--rows", "--flavour", "manifest.checksum", "rejected"]),
        (
            ["inventory", "generate", "--help"],
            ["For buckets without inventory", "for tests and the demo", "_lakefs/ included", "--s3-endpoint"],
        ),
    ],
)
def test_help(capsys: pytest.CaptureFixture[str], argv: list[str], phrases: list[str]) -> None:
    assert main(argv) == 0
    out = capsys.readouterr().out
    for phrase in phrases:
        assert phrase in out


def test_inventory_without_a_subcommand_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "inventory")
    assert code == 2 and out == "" and "generate" in err
