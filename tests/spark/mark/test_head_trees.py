"""The identity-twin guard's HEAD trees read from lakeFS: a branch whose HEAD tree holds no range
(every object deleted and committed) read in the same task as one that holds ranges."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakefs_gc.spark.mark.head_trees import LakeFSHeadTrees
from lakefs_gc.spark.mark.references import MetadataReader
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_storage_namespace
from tests.support.gc_env import GcEnv, gc_env

REPO = "trees"


@pytest.fixture
def env(tmp_path: Path) -> Iterator[GcEnv]:
    yield from gc_env(tmp_path, StorageOptions(), ("local",), [])


def test_an_empty_head_tree_beside_a_full_one_in_one_task(spark: SparkSession, env: GcEnv) -> None:
    """Both orders, one task: the empty tree adds no row (an untyped empty batch after a typed one
    was refused by the task's Arrow writer, failing the mark)."""
    env.lakefs.create_repo(REPO, f"local://{REPO}")
    env.lakefs.upload(REPO, "main", "a", b"a")
    full = env.lakefs.commit(REPO, "main", "a").meta_range_id
    env.lakefs.branch(REPO, "emptied", "main")
    env.lakefs.delete(REPO, "emptied", "a")
    empty = env.lakefs.commit(REPO, "emptied", "nothing left").meta_range_id
    assert full and empty and full != empty
    connection = env.server.connection()
    namespace = parse_storage_namespace(f"local://{REPO}", local_root=str(env.storage_root))
    trees = LakeFSHeadTrees(MetadataReader(connection, REPO, f"local://{REPO}", namespace, env.options))
    for order in ([full, empty], [empty, full]):
        rows = trees.tree(spark, order, parallelism=1).collect()
        assert rows and {r["metarange"] for r in rows} == {full}, order
