"""S3 Inventory deliveries: layout discovery, manifest/data verification, CSV/Parquet/ORC reading."""

from __future__ import annotations

import gzip
import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from lakefs_gc.inventory.delivery import INVENTORY_SCHEMA, Delivery, FileFormat, InventoryError
from lakefs_gc.inventory.s3 import (
    CHECKSUM,
    discover,
    load_manifest,
    read_data_file,
    write_delivery,
)

if TYPE_CHECKING:
    from tests.support.servers import MotoServer

SNAPSHOT = datetime(2026, 3, 1, 6, 30, tzinfo=timezone.utc)
MODIFIED = datetime(2026, 2, 1, 12, 0, 0, 123000, tzinfo=timezone.utc)
FORMATS: list[FileFormat] = ["csv", "parquet", "orc"]
TRICKY_KEYS = [
    "data/plain.txt",
    "data/with space.txt",
    "data/a+b.txt",
    "data/100%.txt",
    "data/%20literal",
    "data/hash#tag",
    "data/ünïcödé/日本語.bin",
    "data/" + "x" * 1019,  # 1 KiB name
]


def rows(keys: list[str], bucket: str = "src") -> pa.Table:
    n = len(keys)
    return pa.table(
        {
            "bucket": [bucket] * n,
            "key": keys,
            "size": list(range(n)),
            "last_modified": [MODIFIED] * n,
            "etag": [f"etag{i}" for i in range(n)],
            "encryption": [None] * n,
        },
        schema=INVENTORY_SCHEMA,
    )


def read_all(fs: pafs.FileSystem, delivery: Delivery) -> pa.Table:
    batches = [b for f in delivery.files for b in read_data_file(fs, delivery, f)]
    return pa.Table.from_batches(batches, schema=INVENTORY_SCHEMA)


def write(
    tmp_path: Path,
    fmt: FileFormat = "csv",
    keys: list[str] | None = None,
    *,
    table: pa.Table | None = None,
    snapshot_time: datetime = SNAPSHOT,
    rows_per_file: int = 100_000,
) -> str:
    return write_delivery(
        pafs.LocalFileSystem(),
        str(tmp_path / "dest-bucket" / "inv"),
        "src",
        "gc-daily",
        snapshot_time,
        table if table is not None else rows(keys or TRICKY_KEYS),
        format=fmt,
        rows_per_file=rows_per_file,
        bucket_root=str(tmp_path / "dest-bucket"),
    )


def dest(tmp_path: Path) -> str:
    return str(tmp_path / "dest-bucket" / "inv")


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_with_tricky_keys(tmp_path: Path, fmt: FileFormat) -> None:
    fs = pafs.LocalFileSystem()
    manifest = write(tmp_path, fmt, rows_per_file=3)
    assert manifest.endswith("/inv/src/gc-daily/2026-03-01T06-30Z/manifest.json")

    found = discover(fs, dest(tmp_path), verify_data=True)

    assert (found.pending, found.rejected) == ([], [])
    [delivery] = found.complete
    assert delivery.id == manifest
    assert delivery.snapshot_time == SNAPSHOT
    assert delivery.source == "src"
    assert not delivery.versioned
    assert len(delivery.files) == 3
    assert read_all(fs, delivery).sort_by("size").equals(rows(TRICKY_KEYS))


@pytest.mark.parametrize("fmt", FORMATS)
def test_without_etags_the_content_columns_are_null_and_the_file_still_verified(
    tmp_path: Path, fmt: FileFormat
) -> None:
    """``etags=False`` (a mark or an ingest without ``gc.trust_checksums``) parses neither the ETag
    nor the EncryptionStatus, and every other column as before; the MD5 is checked all the same."""
    fs = pafs.LocalFileSystem()
    table = rows(TRICKY_KEYS).set_column(5, "encryption", pa.array(["SSE-S3"] * len(TRICKY_KEYS)))
    write(tmp_path, fmt, table=table)
    [delivery] = discover(fs, dest(tmp_path)).complete
    got = pa.Table.from_batches(
        [b for f in delivery.files for b in read_data_file(fs, delivery, f, etags=False)],
        schema=INVENTORY_SCHEMA,
    ).sort_by("size")
    nulls = pa.nulls(len(TRICKY_KEYS), pa.string())
    assert got.equals(table.set_column(4, "etag", nulls).set_column(5, "encryption", nulls))
    assert read_all(fs, delivery).sort_by("size").equals(table)  # the default reads them

    _corrupt_data_md5(tmp_path, delivery.id)
    with pytest.raises(InventoryError, match="MD5"):
        list(read_data_file(fs, delivery, delivery.files[0], etags=False))


def test_manifest_keys_are_bucket_relative_and_mapped_without_bucket_root(tmp_path: Path) -> None:
    manifest = write(tmp_path)
    doc = json.loads(Path(manifest).read_bytes())
    assert doc["destinationBucket"] == "arn:aws:s3:::dest-bucket"
    assert doc["files"][0]["key"].startswith("inv/src/gc-daily/data/")
    assert doc["fileSchema"] == "Bucket, Key, Size, LastModifiedDate, ETag"

    delivery = load_manifest(pafs.LocalFileSystem(), manifest)

    assert delivery.files[0].path == str(tmp_path / "dest-bucket") + "/" + doc["files"][0]["key"]


def test_csv_keys_are_form_encoded_as_s3_writes_them(tmp_path: Path) -> None:
    manifest = write(tmp_path, keys=["a b+c%d#e/ü"])
    delivery = load_manifest(pafs.LocalFileSystem(), manifest)
    text = gzip.decompress(Path(delivery.files[0].path).read_bytes()).decode()
    assert text.startswith('"src","a+b%2Bc%25d%23e/%C3%BC","0","2026-02-01T12:00:00.123Z","etag0"')


@pytest.mark.parametrize(
    ("written", "key"),
    [
        ("repos/r1/data/s0/a+b", "repos/r1/data/s0/a b"),  # S3's own spelling of a space
        ("repos/r1/data/s0/a%20b", "repos/r1/data/s0/a b"),  # the percent spelling still decodes
        ("repos/r1/data/s0/a%2Bb", "repos/r1/data/s0/a+b"),  # a literal plus
        ("x+y%20z%2Bw%25", "x y z+w%"),
        ("plain/key", "plain/key"),
    ],
)
def test_csv_keys_are_decoded_with_form_rules(tmp_path: Path, written: str, key: str) -> None:
    manifest = write(tmp_path)
    body = f'"src","{written}","1","2026-02-01T12:00:00.000Z","e"\n'
    _rewrite_data(tmp_path, manifest, gzip.compress(body.encode()))
    table = read_all(pafs.LocalFileSystem(), load_manifest(pafs.LocalFileSystem(), manifest))
    assert table.column("key").to_pylist() == [key]


def versioned_rows() -> pa.Table:
    base = rows(["k/current", "k/old", "k/deleted", "k/deleted"])
    return (
        base.append_column("version_id", pa.array(["v1", "v0", "v2", "v3"]))
        .append_column("is_latest", pa.array([True, False, True, False]))
        .append_column("is_delete_marker", pa.array([False, False, True, False]))
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_versioned_keeps_only_latest_non_delete_markers(tmp_path: Path, fmt: FileFormat) -> None:
    fs = pafs.LocalFileSystem()
    write(tmp_path, fmt, table=versioned_rows())

    [delivery] = discover(fs, dest(tmp_path)).complete

    assert delivery.versioned
    assert read_all(fs, delivery).column("key").to_pylist() == ["k/current"]


def test_csv_columns_come_from_file_schema_not_positions(tmp_path: Path) -> None:
    fs = pafs.LocalFileSystem()
    manifest = write(tmp_path, keys=["a"])
    schema = "Bucket, Key, StorageClass, ETag, LastModifiedDate, Size, IsMultipartUploaded"
    body = '"src","a","STANDARD","e1","2026-02-01T12:00:00.000Z","42","false"\n\n'
    _rewrite_data(tmp_path, manifest, gzip.compress(body.encode()), fileSchema=schema)

    table = read_all(fs, load_manifest(fs, manifest))

    assert table.to_pylist() == [
        {
            "bucket": "src",
            "key": "a",
            "size": 42,
            "last_modified": datetime(2026, 2, 1, 12, tzinfo=timezone.utc),
            "etag": "e1",
            "encryption": None,
        }
    ]


def test_parquet_with_int64_millis_and_naive_timestamps(tmp_path: Path) -> None:
    fs = pafs.LocalFileSystem()
    manifest = write(tmp_path, "parquet", keys=["a"])
    millis = int(MODIFIED.timestamp() * 1000)
    for typ, value in [(pa.int64(), millis), (pa.timestamp("ms"), MODIFIED.replace(tzinfo=None))]:
        table = pa.table(
            {
                "bucket": ["src"],
                "key": ["a"],
                "size": pa.array([7], pa.int32()),
                "last_modified_date": pa.array([value], typ),
                "e_tag": ["e"],
            }
        )
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        _rewrite_data(tmp_path, manifest, sink.getvalue().to_pybytes())

        [row] = read_all(fs, load_manifest(fs, manifest)).to_pylist()

        assert row["last_modified"] == MODIFIED
        assert row["size"] == 7


def test_incomplete_delivery_is_pending(tmp_path: Path) -> None:
    fs = pafs.LocalFileSystem()
    good = write(tmp_path, keys=["a"])
    late = write(tmp_path, keys=["b"], snapshot_time=datetime(2026, 3, 2, tzinfo=timezone.utc))
    Path(late).with_name(CHECKSUM).unlink()

    found = discover(fs, dest(tmp_path))

    assert [d.id for d in found.complete] == [good]
    assert found.pending == [late]
    assert found.rejected == []


def _rewrite_data(tmp_path: Path, manifest: str, payload: bytes, **changes: object) -> None:
    """Replace the delivery's single data file and re-sign the manifest (a consistent delivery)."""
    doc = json.loads(Path(manifest).read_bytes())
    [entry] = doc["files"]
    path = tmp_path / "dest-bucket" / entry["key"]
    path.write_bytes(payload)
    entry.update(size=len(payload), MD5checksum=hashlib.md5(payload).hexdigest())
    doc.update(changes)
    _sign(manifest, doc)


def _sign(manifest: str, doc: dict[str, object]) -> None:
    raw = json.dumps(doc).encode()
    Path(manifest).write_bytes(raw)
    Path(manifest).with_name(CHECKSUM).write_text(hashlib.md5(raw).hexdigest())


def _corrupt_manifest_checksum(tmp_path: Path, manifest: str) -> None:
    Path(manifest).with_name(CHECKSUM).write_text("0" * 32 + "\n")


def _corrupt_data_md5(tmp_path: Path, manifest: str) -> None:
    doc = json.loads(Path(manifest).read_bytes())
    path = tmp_path / "dest-bucket" / doc["files"][0]["key"]
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # same size, different bytes
    path.write_bytes(bytes(data))


def _remove_data_file(tmp_path: Path, manifest: str) -> None:
    doc = json.loads(Path(manifest).read_bytes())
    (tmp_path / "dest-bucket" / doc["files"][0]["key"]).unlink()


def _bad_csv_row(tmp_path: Path, manifest: str) -> None:
    body = (
        '"src","a","1","2026-02-01T12:00:00.000Z","e"\n'
        '"src","b","notanumber","2026-02-01T12:00:00.000Z","e"\n'
    )
    _rewrite_data(tmp_path, manifest, gzip.compress(body.encode()))


def _short_csv_row(tmp_path: Path, manifest: str) -> None:
    body = '"src","a","1","2026-02-01T12:00:00.000Z","e"\n"src","b"\n'
    _rewrite_data(tmp_path, manifest, gzip.compress(body.encode()))


def _schema_mismatch(tmp_path: Path, manifest: str) -> None:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"bucket": ["src"], "path": ["a"], "mtime": [1]}), sink)
    schema = (
        "message s3.inventory { required binary bucket (UTF8); required binary key (UTF8); "
        "optional int64 size; optional int64 last_modified_date (TIMESTAMP_MILLIS); "
        "optional binary e_tag (UTF8);}"
    )
    payload = sink.getvalue().to_pybytes()
    _rewrite_data(tmp_path, manifest, payload, fileFormat="Parquet", fileSchema=schema)


def _unknown_format(tmp_path: Path, manifest: str) -> None:
    doc = json.loads(Path(manifest).read_bytes())
    _sign(manifest, {**doc, "fileFormat": "Avro"})


def _missing_key_column(tmp_path: Path, manifest: str) -> None:
    doc = json.loads(Path(manifest).read_bytes())
    _sign(manifest, {**doc, "fileSchema": "Bucket, Size, LastModifiedDate"})


def _invalid_json(tmp_path: Path, manifest: str) -> None:
    Path(manifest).write_bytes(b'{"sourceBucket": "src",')
    Path(manifest).with_name(CHECKSUM).write_text(hashlib.md5(Path(manifest).read_bytes()).hexdigest())


CORRUPTIONS = {
    "manifest checksum": (_corrupt_manifest_checksum, "manifest.json", "does not match"),
    "data md5": (_corrupt_data_md5, ".csv.gz", "MD5"),
    "missing data file": (_remove_data_file, ".csv.gz", "missing"),
    "unparsable csv value": (_bad_csv_row, ".csv.gz", "row 2: unparsable size 'notanumber'"),
    "short csv row": (_short_csv_row, ".csv.gz", "unparsable CSV"),
    "schema mismatch": (_schema_mismatch, ".csv.gz", "schema mismatch"),
    "unknown format": (_unknown_format, "manifest.json", "unknown fileFormat 'Avro'"),
    "missing key column": (_missing_key_column, "manifest.json", "lacks required columns ['key']"),
    "invalid json": (_invalid_json, "manifest.json", "malformed manifest"),
}


@pytest.mark.parametrize("case", CORRUPTIONS)
def test_bad_delivery_is_rejected_beside_a_good_one(tmp_path: Path, case: str) -> None:
    fs = pafs.LocalFileSystem()
    corrupt, names, reason = CORRUPTIONS[case]
    good = write(tmp_path, keys=["a"])
    bad = write(tmp_path, keys=["a", "b"], snapshot_time=datetime(2026, 3, 2, tzinfo=timezone.utc))
    corrupt(tmp_path, bad)

    found = discover(fs, dest(tmp_path), verify_data=True)

    assert [d.id for d in found.complete] == [good]
    assert found.pending == []
    [error] = found.rejected
    message = str(error)
    assert reason in message
    named = message.split(":", 1)[0]
    assert named.endswith(names)
    assert named.startswith(str(tmp_path))
    assert error.exit_code == 7


@pytest.mark.parametrize("case", ["data md5", "unparsable csv value", "schema mismatch"])
def test_read_data_file_fails_before_yielding_bad_rows(tmp_path: Path, case: str) -> None:
    fs = pafs.LocalFileSystem()
    corrupt, _, reason = CORRUPTIONS[case]
    manifest = write(tmp_path, keys=["a", "b"])
    corrupt(tmp_path, manifest)
    delivery = load_manifest(fs, manifest)

    assert discover(fs, dest(tmp_path)).complete == [delivery]  # cheap checks pass
    with pytest.raises(InventoryError, match=reason.replace("(", r"\(")) as raised:
        read_all(fs, delivery)
    assert str(raised.value).startswith(delivery.files[0].path + ":")


def test_data_keys_outside_the_destination_prefix_are_rejected(tmp_path: Path) -> None:
    manifest = write(tmp_path, keys=["a"])
    doc = json.loads(Path(manifest).read_bytes())
    doc["files"][0]["key"] = "elsewhere/other/data/x.csv.gz"
    _sign(manifest, doc)

    [error] = discover(pafs.LocalFileSystem(), dest(tmp_path)).rejected

    assert "not under the destination prefix" in str(error)


def test_empty_destination_finds_nothing(tmp_path: Path) -> None:
    found = discover(pafs.LocalFileSystem(), str(tmp_path / "nothing"))
    assert (found.complete, found.pending, found.rejected) == ([], [], [])


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_on_moto(moto: MotoServer, s3_bucket: str, fmt: FileFormat) -> None:
    from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
    from lakefs_gc.storage.locations import parse_location
    from tests.support.object_stores import s3_options

    options = StorageOptions(s3=s3_options(moto))
    fs, root = filesystem_for(parse_location(f"s3://{s3_bucket}"), options)
    manifest = write_delivery(
        fs, f"{root}/inv", "src", "cfg", SNAPSHOT, rows(TRICKY_KEYS), format=fmt, rows_per_file=5
    )
    assert manifest == f"{s3_bucket}/inv/src/cfg/2026-03-01T06-30Z/manifest.json"

    found = discover(fs, f"{root}/inv", verify_data=True)

    assert (found.pending, found.rejected) == ([], [])
    [delivery] = found.complete
    assert delivery.files[0].path.startswith(f"{s3_bucket}/inv/src/cfg/data/")
    assert read_all(fs, delivery).sort_by("size").equals(rows(TRICKY_KEYS))


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_data_file_is_read_from_the_store_once_and_parsed_as_verified(
    moto: MotoServer, s3_bucket: str, fmt: FileFormat
) -> None:
    """The MD5 is checked on the bytes that are parsed, fetched once: an object replaced after
    that one read (here: right before any second read would open it) changes nothing."""
    from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
    from lakefs_gc.storage.locations import parse_location
    from tests.support.filesystems import CountedReads
    from tests.support.object_stores import s3_options

    s3, root = filesystem_for(parse_location(f"s3://{s3_bucket}"), StorageOptions(s3=s3_options(moto)))
    manifest = write_delivery(s3, f"{root}/inv", "src", "cfg", SNAPSHOT, rows(TRICKY_KEYS), format=fmt)
    other = write_delivery(s3, f"{root}/other", "src", "cfg", SNAPSHOT, rows(["data/other"]), format=fmt)
    [replacement] = load_manifest(s3, other).files
    delivery = load_manifest(s3, manifest)

    def replace_before_a_second_read(path: str, n: int) -> None:
        if n == 2:
            s3.copy_file(replacement.path, path)

    counted = CountedReads(s3, replace_before_a_second_read)
    read = read_all(counted.filesystem(), delivery)

    assert read.sort_by("size").equals(rows(TRICKY_KEYS))
    assert dict(counted.opens) == {delivery.files[0].path: 1}


def test_a_delivery_read_through_throttled_gets_is_complete_not_rejected(
    moto: MotoServer, s3_bucket: str
) -> None:
    """Every object's first 2 GETs answered 503 SlowDown: the manifest, its 32-byte checksum and
    the small gzipped data file (answers the AWS SDK cannot retry itself for objects smaller than
    the error: ``storage.filesystems.is_misread``) are read after retries, and the delivery is
    found complete and read whole, where one SlowDown used to reject it."""
    from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
    from lakefs_gc.storage.locations import parse_location
    from tests.support.object_stores import s3_options
    from tests.support.throttling import S3FailingGets, moto_behind

    s3, root = filesystem_for(parse_location(f"s3://{s3_bucket}"), StorageOptions(s3=s3_options(moto)))
    manifest = write_delivery(s3, f"{root}/slow", "src", "cfg", SNAPSHOT, rows(TRICKY_KEYS))
    checksum = manifest.rsplit("/", 1)[0] + "/manifest.checksum"
    assert s3.get_file_info(checksum).size < 100
    with moto_behind(lambda app: S3FailingGets(app, failures=2)) as (server, hook):
        flaky, _ = filesystem_for(parse_location(f"s3://{s3_bucket}"), StorageOptions(s3=s3_options(server)))
        found = discover(flaky, f"{root}/slow", verify_data=True)
        assert found.rejected == []
        [delivery] = found.complete
        assert read_all(flaky, delivery).sort_by("size").equals(rows(TRICKY_KEYS))
    assert hook.gets[f"/{checksum}"] == 3  # 2 SlowDowns, then the read
    assert all(n >= 3 for n in hook.gets.values()), hook.gets


def test_a_worker_without_scratch_space_fails_without_rejecting_the_delivery(
    moto: MotoServer, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the copy cannot go is this worker's fault, not the file's: the error says so and is
    not an InventoryError (which would drop a good delivery); Spark retries the task."""
    from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
    from lakefs_gc.storage.locations import parse_location
    from lakefs_gc.storage.reads import ScratchSpaceError
    from tests.support.object_stores import s3_options

    s3, root = filesystem_for(parse_location(f"s3://{s3_bucket}"), StorageOptions(s3=s3_options(moto)))
    delivery = load_manifest(s3, write_delivery(s3, f"{root}/inv", "src", "cfg", SNAPSHOT, rows(["data/a"])))
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path / "gone"))

    with pytest.raises(ScratchSpaceError, match=r"cannot create a scratch file in .*gone") as raised:
        read_all(s3, delivery)
    assert not isinstance(raised.value, InventoryError)
    assert str(raised.value).startswith(delivery.files[0].path + ":")


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_inventory_reads_as_no_rows(tmp_path: Path, fmt: FileFormat) -> None:
    fs = pafs.LocalFileSystem()
    write(tmp_path, fmt, table=INVENTORY_SCHEMA.empty_table())

    [delivery] = discover(fs, dest(tmp_path), verify_data=True).complete

    assert read_all(fs, delivery).num_rows == 0


def test_unparsable_csv_boolean_names_row(tmp_path: Path) -> None:
    fs = pafs.LocalFileSystem()
    manifest = write(tmp_path, table=versioned_rows())
    schema = "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag"
    body = '"src","a","v1","yes","false","1","2026-02-01T12:00:00.000Z","e"\n'
    _rewrite_data(tmp_path, manifest, gzip.compress(body.encode()), fileSchema=schema)

    with pytest.raises(InventoryError, match="row 1: unparsable is_latest 'yes'"):
        read_all(fs, load_manifest(fs, manifest))


def test_a_destination_prefix_named_like_the_source_bucket_maps_data_files(tmp_path: Path) -> None:
    # s3://dest-bucket/src for source bucket "src": keys read src/src/gc-daily/data/..., and the
    # first "src" is the destination prefix, not the source bucket's directory
    manifest = write_delivery(
        pafs.LocalFileSystem(), str(tmp_path / "dest-bucket" / "src"), "src", "gc-daily", SNAPSHOT,
        rows(["a/b"]), format="csv", bucket_root=str(tmp_path / "dest-bucket"),
    )  # fmt: skip
    delivery = load_manifest(pafs.LocalFileSystem(), manifest)
    assert Path(delivery.files[0].path).is_file()
    assert read_all(pafs.LocalFileSystem(), delivery).column("key").to_pylist() == ["a/b"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_encryption_status_is_read_when_the_inventory_has_it(tmp_path: Path, fmt: FileFormat) -> None:
    """S3's optional EncryptionStatus field (``encryption_status`` in Parquet and ORC) tells whether
    an ETag can be the MD5 of the bytes; an inventory configured without it reads as null."""
    table = rows(["a", "b", "c"])
    statuses = ["SSE-S3", "SSE-KMS", None]
    table = table.set_column(table.schema.get_field_index("encryption"), "encryption", pa.array(statuses))
    manifest = write(tmp_path, fmt, table=table)
    schema = json.loads(Path(manifest).read_bytes())["fileSchema"]
    assert ("EncryptionStatus" if fmt == "csv" else "encryption_status") in schema
    [delivery] = discover(pafs.LocalFileSystem(), dest(tmp_path), verify_data=True).complete
    assert (
        read_all(pafs.LocalFileSystem(), delivery).sort_by("key").column("encryption").to_pylist() == statuses
    )


def test_an_inventory_without_encryption_status_leaves_it_out(tmp_path: Path) -> None:
    manifest = write(tmp_path, "csv", keys=["a"])
    assert "EncryptionStatus" not in json.loads(Path(manifest).read_bytes())["fileSchema"]
