"""The namespace listing on Spark: what it lists, and what it never lists
(docs/invariants.md, invariant 3)."""

from __future__ import annotations

import os
from pathlib import Path

from pyspark.sql import SparkSession

from lakefs_gc.spark.mark.sources.listing import listed_objects, plan_listing
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_storage_namespace

LISTED = {
    "data/gq1/a": 1,  # lakeFS's layout
    "data/gq1/b,sig_nature": 2,  # linked address with its signature
    "data/!ab/c/bpel26/xid": 3,  # sharded layout, any depth
    "data/gq2/sub/deeper/x y#z?%20": 4,  # keys are keys: spaces, #, ?, %
    "0123456789abcdef0123456789abcdef": 5,  # legacy object at the root
}
NEVER = [
    "_lakefs/dummy",
    "_lakefs/0f1e2d3c",
    "_lakefs/retention/gc/unified/m/deleted/part-0",
    "dummy",  # legacy marker
    "data/loose-file",  # directly under data/: lakeFS never really deletes those
    "other/dir/file",  # root-level directories other than data/
]


def test_lists_only_what_a_gc_may_consider(spark: SparkSession, tmp_path: Path) -> None:
    root = tmp_path / "ns"
    for key, size in LISTED.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(b"x" * size)
    for key in NEVER:
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(b"never")
    os.utime(root / "data/gq1/a", (1_600_000_000, 1_600_000_000))
    namespace = parse_storage_namespace(f"file://{root}/")
    plan = plan_listing(namespace, StorageOptions())
    assert plan.prefixes == ("data/!ab/", "data/gq1/", "data/gq2/", "")  # one task per slice + the root
    assert plan.first_slice == "!ab" and plan.files_directly_under_data == 1

    rows = listed_objects(spark, namespace, StorageOptions(), plan, parallelism=3).collect()
    assert {r["address"]: r["size"] for r in rows} == LISTED
    mtime = {r["address"]: r["last_modified"] for r in rows}["data/gq1/a"]
    assert int(mtime.timestamp()) == 1_600_000_000


def test_missing_data_directory_lists_the_root_only(spark: SparkSession, tmp_path: Path) -> None:
    (tmp_path / "legacy").write_bytes(b"1")
    namespace = parse_storage_namespace(f"file://{tmp_path}/")
    plan = plan_listing(namespace, StorageOptions())
    assert plan.prefixes == ("",) and plan.first_slice == ""
    assert [
        r["address"]
        for r in listed_objects(spark, namespace, StorageOptions(), plan, parallelism=2).collect()
    ] == ["legacy"]
