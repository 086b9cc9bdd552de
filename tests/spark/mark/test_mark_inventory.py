"""``mark --inventory``: the newest complete inventory snapshot as the mark's candidate listing.

The must-show: over lakeFS's TestUnifiedGC history, a mark from an inventory snapshot marks exactly
what a mark from listing marks, on local disk (S3 flavour, Parquet), moto S3 (S3 flavour, CSV gz) and
Azurite (Azure flavour, Parquet, with rows repeated across data files). Then fail closed: no delivery,
only a pending one, a too old one, one of another bucket, a corrupt data file: each refuses the mark
(exit 7, naming the destination or the file) and deletes nothing. Deliveries are written by
:func:`lakefs_gc.inventory.generate.generate_delivery` (a listing in the real layout).
"""

from __future__ import annotations

import gzip
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from lakefs_gc.inventory import s3
from lakefs_gc.inventory.delivery import INVENTORY_SCHEMA, Delivery, DiscoveryResult, InventoryError
from lakefs_gc.inventory.discovery import newer_unusable
from lakefs_gc.inventory.generate import generate_delivery, list_namespace, write_inventory
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_location, parse_storage_namespace
from tests.support.gc_env import GcEnv, gc_env, run_cli
from tests.support.object_stores import blob_service
from tests.support.servers import AzuriteServer
from tests.testing.unified_gc import EXPECTED_SURVIVORS, UnifiedGcScenario, build_unified_gc

pytestmark = pytest.mark.usefixtures("spark")

REPO = "unified"
Capsys = pytest.CaptureFixture[str]


@dataclass
class Case:
    """A repository with the TestUnifiedGC history, and how to mark it and read its reports."""

    env: GcEnv
    scenario: UnifiedGcScenario
    namespace: str

    @property
    def garbage(self) -> set[str]:
        return {self.scenario.relative(n) for n, survives in EXPECTED_SURVIVORS.items() if not survives}

    def mark(self, capsys: Capsys, *extra: str, command: str = "mark") -> tuple[int, dict[str, Any], str]:
        argv = [command, "--repo", REPO, "--unsafe-min-age", "0s", "--output", "json"]
        if command == "run":
            argv.append("--yes")
        code, lines, err = run_cli(capsys, *argv, *self.env.args(), *extra)
        return code, (lines[0] if lines else {}), err

    def marked(self, mark_id: str) -> list[str]:
        """The addresses in a mark's ``deleted/`` (duplicates kept, to be noticed)."""
        store = self.env.store(self.namespace)
        selector = pafs.FileSelector(f"{store.base}/_lakefs/retention/gc/unified/{mark_id}/deleted")
        parts = [i.path for i in store.fs.get_file_info(selector) if i.base_name.endswith(".parquet")]
        assert parts, f"mark {mark_id} has no deleted/ part files"
        tables = [pq.read_table(store.fs.open_input_file(p)) for p in sorted(parts)]
        return [str(a) for t in tables for a in t.column("address").to_pylist()]

    def summaries(self) -> list[dict[str, Any]]:
        store = self.env.store(self.namespace)
        reports = f"{store.base}/_lakefs/retention/gc/unified"
        found = store.fs.get_file_info(pafs.FileSelector(reports, allow_not_found=True))
        return [json.loads(store.get(f"_lakefs/retention/gc/unified/{i.base_name}/summary.json") or b"{}")
                for i in found if i.type == pafs.FileType.Directory]  # fmt: skip

    def objects_exist(self) -> dict[str, bool]:
        store = self.env.store(self.namespace)
        return {name: store.exists(self.scenario.relative(name)) for name in self.scenario.address}


def build_case(env: GcEnv, namespace: str) -> Case:
    return Case(env, build_unified_gc(env.lakefs, REPO, namespace), namespace)


def generate(case: Case, destination: str, **kwargs: object) -> str:
    namespace = parse_storage_namespace(case.namespace, local_root=str(case.env.storage_root))
    return generate_delivery(namespace, case.env.options, parse_location(destination), **kwargs)  # type: ignore[arg-type]


def same_marks(case: Case, capsys: Capsys, destination: str) -> dict[str, Any]:
    """Marks from listing and from ``destination``'s snapshot mark the same, non-empty set (its summary)."""
    code, listing, err = case.mark(capsys)
    assert code == 0, err
    code, inventory, err = case.mark(capsys, "--inventory", destination)
    assert code == 0, err
    by_listing = case.marked(str(listing["mark_id"]))
    by_inventory = case.marked(str(inventory["mark_id"]))
    assert len(by_inventory) == len(set(by_inventory)), "duplicate addresses in deleted/"
    assert set(by_inventory) == set(by_listing) and case.garbage <= set(by_inventory)
    summaries = (listing["summary"], inventory["summary"])
    assert [s["num_listed_objects"] for s in summaries] == [len(by_listing) + 4] * 2  # + 4 kept (referenced)
    assert summaries[0]["candidates"] == {"source": "listing"}
    summary: dict[str, Any] = inventory["summary"]
    return summary


# ---------------------------------------------------------------------------------------------------
# local disk: one repository for the whole module


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Case]:
    for env in gc_env(tmp_path_factory.mktemp("mark-inventory"), StorageOptions(), ("local",), []):
        yield build_case(env, f"local://{REPO}")


@pytest.fixture
def destination(local: Case, request: pytest.FixtureRequest) -> str:
    """A fresh inventory destination beside (never inside) the namespace."""
    path = local.env.storage_root.parent / "inventory" / request.node.name
    path.mkdir(parents=True)
    return str(path)


def test_inventory_mark_equals_listing_mark_local(local: Case, capsys: Capsys, destination: str) -> None:
    manifest = generate(local, destination, flavour="s3", format="parquet", rows_per_file=3)
    summary = same_marks(local, capsys, destination)
    delivery = s3.load_manifest(pafs.LocalFileSystem(), manifest)
    assert len(delivery.files) > 1
    assert summary["candidates"] == {
        "source": "inventory",
        "destination": destination,
        "delivery": manifest,
        "snapshot_time": delivery.snapshot_time.isoformat().replace("+00:00", "Z"),
        "flavour": "s3",
        "data_files": len(delivery.files),
    }
    assert summary["first_slice"] and "files_directly_under_data" not in summary
    assert all(local.objects_exist().values()), "a mark deletes nothing"


def test_objects_after_the_snapshot_are_not_candidates(local: Case, capsys: Capsys, destination: str) -> None:
    generate(local, destination, flavour="s3", format="parquet")
    late = local.env.lakefs.upload(REPO, "main", "late", b"late").physical_address
    local.env.lakefs.delete(REPO, "main", "late")  # garbage now, but not in the snapshot
    late = late[late.index("/data/") + 1 :]
    code, listing, err = local.mark(capsys)
    assert code == 0, err
    code, inventory, err = local.mark(capsys, "--inventory", destination)
    assert code == 0, err
    by_listing, by_inventory = local.marked(str(listing["mark_id"])), local.marked(str(inventory["mark_id"]))
    assert late in by_listing and late not in by_inventory
    assert set(by_listing) - set(by_inventory) == {late}


def _no_delivery(case: Case, destination: str) -> str:
    return "no complete inventory delivery"


def _pending_only(case: Case, destination: str) -> str:
    manifest = generate(case, destination)
    Path(manifest).with_name("manifest.checksum").unlink()
    return f"1 pending, the newest {manifest}"


def _too_old(case: Case, destination: str) -> str:
    manifest = generate(case, destination, snapshot_time=datetime.now(timezone.utc) - timedelta(days=9))
    return f"{manifest}: the newest complete inventory snapshot is from"


def _older_than_the_flag(case: Case, destination: str) -> str:
    manifest = generate(case, destination, snapshot_time=datetime.now(timezone.utc) - timedelta(hours=3))
    return f"{manifest}: the newest complete inventory snapshot is from"


def _another_bucket(case: Case, destination: str) -> str:
    rows = pa.table(
        {"bucket": ["other"], "key": ["data/s/x"], "size": [1], "last_modified": [datetime.now(timezone.utc)],
         "etag": ["e"], "encryption": [None]}, schema=INVENTORY_SCHEMA,
    )  # fmt: skip
    s3.write_delivery(pafs.LocalFileSystem(), destination, "other", "cfg", datetime.now(timezone.utc), rows)
    return "no complete inventory delivery of bucket local (1 complete for other sources: s3 other)"


@pytest.mark.parametrize(
    ("prepare", "flags"),
    [
        pytest.param(_no_delivery, [], id="no-delivery"),
        pytest.param(_pending_only, [], id="pending-only"),
        pytest.param(_too_old, [], id="older-than-8-days"),
        pytest.param(_older_than_the_flag, ["--max-inventory-age", "2h"], id="older-than-flag"),
        pytest.param(_another_bucket, [], id="another-bucket-only"),
    ],
)
def test_unusable_inventory_refuses_the_mark(
    local: Case, capsys: Capsys, destination: str, prepare: object, flags: list[str]
) -> None:
    message = prepare(local, destination)  # type: ignore[operator]
    before = len(local.summaries())
    code, _, err = local.mark(capsys, "--inventory", destination, *flags, command="run")
    assert code == 7, err
    assert destination in err and message in err
    assert len(local.summaries()) == before, "refused before lakeFS started a mark"
    assert all(local.objects_exist().values())


def test_corrupt_data_file_fails_the_mark(local: Case, capsys: Capsys, destination: str) -> None:
    manifest = generate(local, destination, rows_per_file=4)
    data_file = s3.load_manifest(pafs.LocalFileSystem(), manifest).files[-1].path
    data = bytearray(Path(data_file).read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: discovery passes, the executor's MD5 check does not
    Path(data_file).write_bytes(bytes(data))
    before = local.objects_exist()

    code, _, err = local.mark(capsys, "--inventory", destination, command="run")
    assert code == 7, err
    assert f"{data_file}: MD5" in err and "does not match manifest" in err
    assert local.objects_exist() == before, "a failed mark deleted something"
    (failed,) = [s for s in local.summaries() if s["candidates"].get("delivery") == manifest]
    assert failed["success"] is False and failed["num_deleted_objects"] == 0 and "MD5" in str(failed["error"])
    mark_id = str(failed["run_id"])
    code, _, err = run_cli(capsys, "sweep", "--repo", REPO, "--mark-id", mark_id, *local.env.args())
    assert code != 0 and f"Provided mark ({mark_id}) is of a failed run" in err
    assert local.objects_exist() == before


def test_rejected_newer_delivery_is_reported(local: Case, capsys: Capsys, destination: str) -> None:
    now = datetime.now(timezone.utc)
    older = generate(local, destination, snapshot_time=now - timedelta(hours=1))
    newest = generate(local, destination, snapshot_time=now - timedelta(minutes=5))
    Path(newest).with_name("manifest.checksum").write_text("0" * 32)
    code, mark, err = local.mark(capsys, "--inventory", destination)
    assert code == 0, err
    assert "WARNING" in err and f"rejected: {newest}: MD5" in err
    candidates = mark["summary"]["candidates"]
    assert candidates["delivery"] == older and len(candidates["newer_unusable"]) == 1
    assert newest in candidates["newer_unusable"][0]


def test_newer_unusable_deliveries_of_the_same_feed() -> None:
    """Pending or rejected deliveries started after the chosen one, of its bucket (any config)."""

    def chosen(path: str) -> Delivery:
        return Delivery(path, "s3", path, datetime(2026, 1, 2, tzinfo=timezone.utc), "b", (), ())

    s3_found = DiscoveryResult(
        pending=["i/b/c/2026-01-01T00-00Z/manifest.json", "i/b/c/2026-01-03T00-00Z/manifest.json",
                 "i/other/c/2026-01-03T00-00Z/manifest.json"],
        rejected=[InventoryError("bad").rejecting("i/b/c2/2026-01-04T00-00Z/manifest.json"),
                  InventoryError("where from?")],
    )  # fmt: skip
    assert newer_unusable(s3_found, chosen("i/b/c/2026-01-02T00-00Z/manifest.json")) == [
        "pending (not complete yet): i/b/c/2026-01-03T00-00Z/manifest.json",
        "rejected: bad",
        "rejected: where from?",
    ]
    azure_found = DiscoveryResult(pending=["c/2026/01/01/00-00-00/r/r-manifest.json",
                                           "c/2026/01/02/06-00-00/r/r-manifest.json"])  # fmt: skip
    assert newer_unusable(azure_found, chosen("c/2026/01/02/00-00-00/r/r-manifest.json")) == [
        "pending (not complete yet): c/2026/01/02/06-00-00/r/r-manifest.json"
    ]


# ---------------------------------------------------------------------------------------------------
# object stores


def test_inventory_mark_equals_listing_mark_s3(cloud_env: GcEnv, capsys: Capsys, s3_bucket: str) -> None:
    case = build_case(cloud_env, f"s3://{s3_bucket}/repos/{REPO}")
    destination = f"s3://{s3_bucket}/inventory"
    generate(case, destination, flavour="s3", format="csv", rows_per_file=5)
    summary = same_marks(case, capsys, destination)
    assert summary["candidates"]["flavour"] == "s3" and summary["candidates"]["data_files"] > 1


def test_inventory_mark_equals_listing_mark_azure(
    cloud_env: GcEnv, capsys: Capsys, azurite: AzuriteServer, azure_container: str
) -> None:
    account = f"https://{azurite.account_name}.blob.core.windows.net"
    case = build_case(cloud_env, f"{account}/{azure_container}/repos/{REPO}")
    inventory_container = f"inventory-{uuid.uuid4().hex[:12]}"
    blob_service(azurite).create_container(inventory_container)
    destination = f"{account}/{inventory_container}"
    namespace = parse_storage_namespace(case.namespace)
    # Azure repeats rows across a delivery's files: every row twice, the copies in other files
    rows = list_namespace(namespace, cloud_env.options)
    write_inventory(
        pa.concat_tables([rows, rows]), namespace, cloud_env.options, parse_location(destination),
        flavour="azure", format="parquet", snapshot_time=datetime.now(timezone.utc),
        rows_per_file=rows.num_rows,
    )  # fmt: skip
    summary = same_marks(case, capsys, destination)
    assert summary["candidates"]["flavour"] == "azure" and summary["candidates"]["data_files"] == 2


#: garbage written straight into the namespace, named the ways S3 Inventory CSV encoding can confuse
TRICKY_GARBAGE = ["data/s0/a b", "data/s0/a+b", "data/s0/a%2Bb", "data/s0/a%20b", "data/s0/ü +%#"]


def test_csv_inventory_keys_mark_the_exact_objects(local_env: GcEnv, capsys: Capsys, tmp_path: Path) -> None:
    """A space (`+` in S3 CSV), a plus (`%2B`), literal `%2B`/`%20` names: marked exactly as they are."""
    case = build_case(local_env, f"local://{REPO}")
    store = local_env.store(case.namespace)
    for key in TRICKY_GARBAGE:
        store.put(key, key.encode())
    destination = str(tmp_path / "inventory")
    manifest = generate(case, destination, flavour="s3", format="csv")
    data = s3.load_manifest(pafs.LocalFileSystem(), manifest).files
    assert any(b"data/s0/a+b" in gzip.decompress(Path(f.path).read_bytes()) for f in data)
    code, out, err = run_cli(capsys, "inventory", "show", destination, "--rows", "100", "--output", "json")
    assert code == 0, err
    shown = {r["key"].rsplit(f"/{REPO}/", 1)[-1] for r in out[0]["rows"]}  # keys under the local root
    assert set(TRICKY_GARBAGE) <= shown
    code, inventory, err = case.mark(capsys, "--inventory", destination)
    assert code == 0, err
    marked = set(case.marked(str(inventory["mark_id"])))
    assert set(TRICKY_GARBAGE) <= marked
    assert marked - set(TRICKY_GARBAGE) == case.garbage
