"""Azure Blob inventory deliveries on local disk: round trips, completion, and rejected deliveries."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from lakefs_gc.inventory.azure import discover, load_manifest, read_data_file, write_delivery
from lakefs_gc.inventory.delivery import INVENTORY_SCHEMA, Delivery, InventoryError
from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
from lakefs_gc.storage.locations import parse_location
from tests.support.object_stores import azure_options
from tests.support.servers import AzuriteServer

T0 = datetime(2026, 5, 26, 13, 25, 36, tzinfo=timezone.utc)
KEYS = [
    "a/plain.parquet",
    "with space/x y",
    "plus+sign",
    "pct%20lit",
    "hash#tag",
    "ünïcødé/ファイル",
    "k" * 1024,
]


def rows(keys: list[str] = KEYS) -> pa.Table:
    n = len(keys)
    return pa.table(
        {
            "bucket": ["data"] * n,
            "key": keys,
            "size": list(range(n)),
            "last_modified": [datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)] * n,
            "etag": [f"0x8D9{i:04X}" for i in range(n)],
            "encryption": [None] * n,
        },
        schema=INVENTORY_SCHEMA,
    )


def read_all(fs: pafs.FileSystem, delivery: Delivery) -> pa.Table:
    batches = [b for f in delivery.files for b in read_data_file(fs, delivery, f)]
    return pa.Table.from_batches(batches, schema=INVENTORY_SCHEMA).sort_by([("key", "ascending")])


def rewrite_manifest(path: str, **changes: object) -> None:
    manifest = json.loads(Path(path).read_text())
    manifest.update(changes)
    body = json.dumps(manifest).encode()
    Path(path).write_bytes(body)
    Path(path.removesuffix(".json") + ".checksum").write_text(hashlib.md5(body).hexdigest())


@pytest.fixture
def fs() -> pafs.FileSystem:
    return pafs.LocalFileSystem()


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_round_trip(fs: pafs.FileSystem, tmp_path: Path, fmt: str) -> None:
    dest = str(tmp_path / "inventory")
    manifest = write_delivery(fs, dest, "gcrule", T0, rows(), format=fmt, rows_per_file=3)  # type: ignore[arg-type]
    assert manifest == f"{dest}/2026/05/26/13-25-36/gcrule/gcrule-manifest.json"
    found = discover(fs, dest)
    assert (found.pending, found.rejected) == ([], [])
    [delivery] = found.complete
    assert delivery == load_manifest(fs, manifest)
    assert (delivery.flavour, delivery.snapshot_time, delivery.source) == ("azure", T0, "devstoreaccount1")
    assert len(delivery.files) == 3 and all(f.format == fmt for f in delivery.files)
    assert read_all(fs, delivery).equals(rows().sort_by([("key", "ascending")]))
    # without etags (no gc.trust_checksums) the ETag is left null, as the S3 reader leaves it
    batches = [b for f in delivery.files for b in read_data_file(fs, delivery, f, etags=False)]
    plain = pa.Table.from_batches(batches, schema=INVENTORY_SCHEMA).sort_by([("key", "ascending")])
    assert plain.equals(rows().set_column(4, "etag", pa.nulls(len(KEYS), pa.string())).sort_by("key"))


def test_pending_status_and_missing_checksum_are_pending(fs: pafs.FileSystem, tmp_path: Path) -> None:
    dest = str(tmp_path)
    good = write_delivery(fs, dest, "r", T0, rows())
    pending = write_delivery(fs, dest, "r", T0.replace(day=27), rows())
    rewrite_manifest(pending, status="Pending")
    unfinished = write_delivery(fs, dest, "r", T0.replace(day=28), rows())
    Path(unfinished.removesuffix(".json") + ".checksum").unlink()
    found = discover(fs, dest)
    assert [d.manifest_path for d in found.complete] == [good]
    assert found.pending == [pending, unfinished]
    assert found.rejected == []
    with pytest.raises(InventoryError, match="pending"):
        load_manifest(fs, pending)
    with pytest.raises(InventoryError, match=r"checksum.*not complete"):
        load_manifest(fs, unfinished)


def write_csv_delivery(tmp_path: Path, lines: list[str], fields: list[str], day: int = 26) -> str:
    run = f"2026/05/{day:02d}/13-25-36/r"
    (tmp_path / run).mkdir(parents=True)
    data = "\n".join(lines) + "\n"
    (tmp_path / run / "r.csv").write_text(data)
    manifest = {
        "destinationContainer": tmp_path.name,
        "endpoint": "https://acct.blob.core.windows.net",
        "files": [{"blob": f"{run}/r.csv", "size": len(data.encode())}],
        "inventoryCompletionTime": "2026-05-26T13:35:56Z",
        "ruleDefinition": {"format": "csv", "objectType": "blob", "schemaFields": fields},
        "ruleName": "r",
        "status": "Succeeded",
    }
    path = str(tmp_path / run / "r-manifest.json")
    Path(path).write_text("{}")
    rewrite_manifest(path, **manifest)
    return path


FIELDS = ["Name", "Last-Modified", "Content-Length", "ETag", "VersionId", "IsCurrentVersion", "Deleted"]


def test_duplicates_versions_and_deleted_rows(fs: pafs.FileSystem, tmp_path: Path) -> None:
    manifest = write_csv_delivery(
        tmp_path,
        [
            ",".join(FIELDS),
            'c/a,2026-01-01T00:00:00.1234567Z,5,"0x1",v1,true,false',
            'c/a,2026-01-01T00:00:00.1234567Z,5,"0x1",v1,true,false',
            "c/a,2025-01-01T00:00:00Z,4,0x0,v0,false,false",
            "c/gone,2026-01-01T00:00:00Z,4,0x2,v2,true,true",
            "c/dir/b c,2026-01-01T00:00:00+02:00,7,0x3,,,",
        ],
        FIELDS,
    )
    delivery = load_manifest(fs, manifest)
    assert delivery.versioned and delivery.source == "acct"
    got = read_all(fs, delivery).to_pylist()
    assert [(r["bucket"], r["key"], r["size"], r["etag"]) for r in got] == [
        ("c", "a", 5, "0x1"),
        ("c", "dir/b c", 7, "0x3"),
    ]
    assert got[0]["last_modified"] == datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=timezone.utc)
    assert got[1]["last_modified"] == datetime(2025, 12, 31, 22, tzinfo=timezone.utc)


def test_bad_deliveries_rejected_beside_good_one(fs: pafs.FileSystem, tmp_path: Path) -> None:
    good = write_delivery(fs, str(tmp_path), "r", T0.replace(month=1), rows())
    write_csv_delivery(tmp_path, ["Name,Content-Length", "c/a,1"], FIELDS, day=1)
    missing = write_delivery(fs, str(tmp_path), "r", T0.replace(day=2), rows())
    Path(load_manifest(fs, missing).files[0].path).unlink()
    unknown = write_delivery(fs, str(tmp_path), "r", T0.replace(day=3), rows())
    rewrite_manifest(unknown, ruleDefinition={"format": "orc", "schemaFields": ["Name"]})
    corrupt = write_delivery(fs, str(tmp_path), "r", T0.replace(day=4), rows())
    Path(corrupt.removesuffix(".json") + ".checksum").write_text("0" * 32)
    found = discover(fs, str(tmp_path))
    assert [d.manifest_path for d in found.complete] == [good]
    assert found.pending == []
    reasons = sorted(str(e) for e in found.rejected)
    assert len(reasons) == 4
    assert any("r.csv: columns" in r and "do not match the schemaFields" in r for r in reasons)
    assert any("r-1.csv: data file listed in" in r and "is missing" in r for r in reasons)
    assert any(unknown in r and "unknown format 'orc'" in r for r in reasons)
    assert any("r-manifest.checksum: does not match the MD5" in r for r in reasons)
    assert all(e.exit_code == 7 for e in found.rejected)


@pytest.mark.parametrize(
    ("bad_line", "reason"),
    [
        ("c/a,yesterday,1,0x1,,,", "row 2: unparsable Last-Modified 'yesterday'"),
        ("c/a,2026-01-01T00:00:00Z,-1,0x1,,,", "row 2: unparsable Content-Length"),
        ("noslash,2026-01-01T00:00:00Z,1,0x1,,,", "row 2: unparsable Name"),
    ],
)
def test_unparsable_row_names_file_and_row(
    fs: pafs.FileSystem, tmp_path: Path, bad_line: str, reason: str
) -> None:
    manifest = write_csv_delivery(
        tmp_path, [",".join(FIELDS), "c/ok,2026-01-01T00:00:00Z,1,0x1,,,", bad_line], FIELDS
    )
    [delivery] = discover(fs, str(tmp_path)).complete
    assert delivery.manifest_path == manifest
    with pytest.raises(InventoryError, match=rf"r\.csv: {reason}"):
        read_all(fs, delivery)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_round_trip_on_azurite(azurite: AzuriteServer, azure_container: str, fmt: str) -> None:
    location = parse_location(f"https://devstoreaccount1.blob.core.windows.net/{azure_container}/inv")
    fs, dest = filesystem_for(location, StorageOptions(azure=azure_options(azurite)))
    write_delivery(fs, dest, "gcrule", T0, rows(), format=fmt, rows_per_file=4)  # type: ignore[arg-type]
    found = discover(fs, dest)
    assert (found.pending, found.rejected) == ([], [])
    [delivery] = found.complete
    assert read_all(fs, delivery).equals(rows().sort_by([("key", "ascending")]))


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_each_data_file_is_read_from_the_store_once(
    azurite: AzuriteServer, azure_container: str, fmt: str
) -> None:
    """One download per data file, in large reads, parsed from its local copy (a CSV was opened
    twice before: for its header, then for its rows, 1 MiB per request)."""
    from tests.support.filesystems import CountedReads

    location = parse_location(f"https://devstoreaccount1.blob.core.windows.net/{azure_container}/once")
    azure, dest = filesystem_for(location, StorageOptions(azure=azure_options(azurite)))
    write_delivery(azure, dest, "gcrule", T0, rows(), format=fmt, rows_per_file=4)  # type: ignore[arg-type]
    [delivery] = discover(azure, dest).complete
    counted = CountedReads(azure)

    assert read_all(counted.filesystem(), delivery).equals(rows().sort_by([("key", "ascending")]))
    assert dict(counted.opens) == {f.path: 1 for f in delivery.files}
