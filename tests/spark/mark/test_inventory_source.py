"""An inventory delivery read on Spark as a repository's listing (both flavours)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from pyspark.sql import SparkSession

from lakefs_gc.inventory import azure, s3
from lakefs_gc.inventory.delivery import INVENTORY_SCHEMA
from lakefs_gc.inventory.mapping import NamespaceRoute
from lakefs_gc.spark.mark.sources.inventory import inventory_objects
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_location, parse_storage_namespace

SNAPSHOT = datetime(2026, 11, 20, 6, 0, tzinfo=timezone.utc)
OLD = datetime(2026, 10, 1, tzinfo=timezone.utc)
KEYS = {
    "repos/a/data/s1/x": True,
    "repos/a/data/s1/with space+plus%20#hash ü": True,
    "repos/a/data/!ab/c/s2/deep": True,
    "repos/a/00112233445566778899aabbccddeeff": True,
    "repos/a/_lakefs/0f1e": False,  # metadata
    "repos/a/data/loose": False,  # directly under data/
    "repos/b/data/s1/x": False,  # another repository
}


def rows(container: str) -> pa.Table:
    keys = list(KEYS)
    n = len(keys)
    stamps = [OLD + timedelta(minutes=i) for i in range(n)]
    return pa.table(
        {
            "bucket": [container] * n,
            "key": keys,
            "size": list(range(n)),
            "last_modified": stamps,
            "etag": ["e"] * n,
            "encryption": [None] * n,
        },
        schema=INVENTORY_SCHEMA,
    )


@pytest.mark.parametrize("flavour", ["s3-csv", "s3-parquet", "s3-orc", "azure-csv", "azure-parquet"])
def test_delivery_as_listing(spark: SparkSession, tmp_path: Path, flavour: str) -> None:
    kind, fmt = flavour.split("-")
    fs = pafs.LocalFileSystem()
    dest = str(tmp_path / "inventory")
    if kind == "s3":
        s3.write_delivery(fs, dest, "bkt", "daily", SNAPSHOT, rows("bkt"), format=fmt, rows_per_file=3)  # type: ignore[arg-type]
        found = s3.discover(fs, dest)
    else:
        azure.write_delivery(fs, dest, "daily", SNAPSHOT, rows("bkt"), format=fmt, rows_per_file=3)  # type: ignore[arg-type]
        found = azure.discover(fs, dest)
    assert not found.rejected and not found.pending
    (delivery,) = found.complete
    assert len(delivery.files) == 3 and delivery.snapshot_time == SNAPSHOT

    route = NamespaceRoute.of("a", parse_storage_namespace("s3://bkt/repos/a"))
    listed = inventory_objects(
        spark, delivery, inventory=parse_location(dest), route=route, options=StorageOptions(), parallelism=2
    ).collect()
    expected = {k.removeprefix("repos/a/") for k, keep in KEYS.items() if keep}
    assert {r["address"] for r in listed} == expected
    assert min(r["last_modified"] for r in listed) >= OLD.replace(tzinfo=None)  # Spark hands back naive UTC


@pytest.mark.parametrize("proven", [True, False])
def test_content_evidence_only_when_the_mark_may_use_it(
    spark: SparkSession, tmp_path: Path, proven: bool
) -> None:
    """With ``gc.trust_checksums`` (``proven``) each object carries the MD5 its single-part ETag under
    SSE-S3 proves; without it the ETags are not even parsed, and the column is left out, as a
    listing's (the mark then has no content evidence: twin_evidence.marked_with_evidence)."""
    fs = pafs.LocalFileSystem()
    dest = str(tmp_path / "inventory")
    md5 = "0123456789abcdef0123456789abcdef"
    table = rows("bkt").set_column(4, "etag", pa.array([f'"{md5}"'] * len(KEYS)))
    table = table.set_column(5, "encryption", pa.array(["SSE-S3"] * len(KEYS)))
    s3.write_delivery(fs, dest, "bkt", "daily", SNAPSHOT, table, format="parquet", rows_per_file=3)
    (delivery,) = s3.discover(fs, dest).complete
    route = NamespaceRoute.of("a", parse_storage_namespace("s3://bkt/repos/a"))
    listed = inventory_objects(
        spark, delivery, inventory=parse_location(dest), route=route, options=StorageOptions(),
        parallelism=2, proven=proven,
    )  # fmt: skip
    assert listed.columns == ["address", "size", "last_modified", *(["md5"] if proven else [])]
    got = listed.collect()
    assert len(got) == sum(KEYS.values())
    if proven:
        assert {r["md5"] for r in got} == {md5}
