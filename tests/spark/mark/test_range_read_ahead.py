"""The range cache's read-ahead (read while lakeFS prepares the dump) only adds to the cache, and
a read-ahead that fails changes nothing of the mark: it reads what the read-ahead did not."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakefs_gc.spark.mark.range_cache import RangeCache
from lakefs_gc.spark.mark.range_cache.ahead import (
    ONE_TASK_METARANGES,
    read_ahead,
    read_ahead_tasks,
    with_read_ahead,
)
from lakefs_gc.spark.mark.references import MetadataReader
from lakefs_gc.storage.locations import parse_storage_namespace
from lakefs_gc.testing.faults import Fault
from tests.spark.mark.test_range_cache import (
    RANGE,
    REPO,
    cache_files,
    counting,
    env,
    grow,
    mark,
    record_path,
    recorded,
)
from tests.support.gc_env import GcEnv

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("spark")]

__all__ = ["env"]  # the fixture, imported for this module's tests


def test_a_failed_read_ahead_leaves_the_mark_as_it_was(
    spark: SparkSession, env: GcEnv, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The read-ahead's first getRange answers 404: its range job fails after it wrote metarange
    parts it never records. The mark still reads every new metarange and range itself, marks
    what an uncached mark marks, and its cache holds only what its record lists."""
    cache = RangeCache.for_repository(tmp_path / "state", REPO, buckets=4)
    first, _ = mark(spark, env, cache)
    grow(env, "wide", "w3", 2)
    grow(env, "main", "m1", 3)
    failed = env.server.faults.inject(Fault(path=RANGE, method="GET", status=404, times=1))
    meta_calls, _ = counting(env)
    with caplog.at_level(logging.WARNING, logger="lakefs_gc"):
        second, cached = mark(spark, env, cache)
    assert env.server.faults.hits(failed) == 1
    assert any("read-ahead failed" in r.getMessage() for r in caplog.records)
    stats = second.summary["range_cache"]
    assert "read_ahead" not in stats
    new_metaranges = recorded(env, second, "metaranges", "metarange_id") - recorded(
        env, first, "metaranges", "metarange_id"
    )
    new_ranges = recorded(env, second, "ranges", "range_id") - recorded(env, first, "ranges", "range_id")
    assert stats["metaranges_read"] == len(new_metaranges) > 0  # read by the mark, from lakeFS
    assert stats["ranges_read"] == len(new_ranges) > 0
    assert env.server.faults.hits(meta_calls) == 2 * len(new_metaranges)  # the read-ahead's, then the mark's
    env.server.faults.clear()
    assert cached == mark(spark, env, None)[1] and cached

    record = json.loads(record_path(cache, second).read_text())
    cache.open(REPO, second.storage_namespace)  # as the next mark opens it
    listed = {p["file"] for p in record["metaranges"]}
    listed |= {p["file"] for ps in (*record["ranges"].values(), *record["head_entries"].values()) for p in ps}
    committed = record["committed_addresses"]
    listed |= {committed["ranges"]["file"], *(p["file"] for p in committed["buckets"].values())}
    assert cache_files(cache) == listed | {str(record_path(cache, second).relative_to(cache.root))}


def test_a_read_ahead_only_adds(spark: SparkSession, env: GcEnv, tmp_path: Path) -> None:
    """Read ahead for one new commit only, so that a mark's update would evict most of the cache:
    nothing is evicted or rewritten, every part keeps its ``used``, the committed-address level is
    the same, and only what the cache lacked is read. Nothing new: nothing recorded."""
    cache = RangeCache.for_repository(tmp_path / "state", REPO, buckets=1)
    first, _ = mark(spark, env, cache)
    before = json.loads(record_path(cache, first).read_text())
    grow(env, "wide", "w3", 2)
    head = env.lakefs.branches.get_branch(REPO, "wide").commit_id
    metarange = env.lakefs.commits.get_commit(REPO, head).meta_range_id
    namespace = parse_storage_namespace(first.storage_namespace, local_root=str(env.storage_root))
    reader = MetadataReader(env.server.connection(), REPO, first.storage_namespace, namespace, env.options)
    read = read_ahead(spark, cache, reader, [metarange], [], 2)
    assert read["metaranges_read"] == 1 and 0 < read["ranges_read"] < first.summary["num_ranges"]
    assert read["tasks"] == 1  # a cycle's new commit: one task, the other cores left to lakeFS
    after = json.loads((cache.root / f"_gen/{before['generation'] + 1:08d}.json").read_text())
    assert after["committed_addresses"] == before["committed_addresses"]
    assert all(p in after["metaranges"] for p in before["metaranges"])
    for bucket, parts in before["ranges"].items():
        assert after["ranges"][bucket][: len(parts)] == parts  # as they were, the new part after them
    held = [p for ps in before["ranges"].values() for p in ps]
    added = [p for ps in after["ranges"].values() for p in ps if p not in held]
    assert [p["used"] for p in added] == [max(p["used"] for p in held)]  # the newest mark's (byte cap)
    assert read_ahead(spark, cache, reader, [metarange], [], 2) == {
        "metaranges_read": 0, "ranges_read": 0, "head_ranges_read": 0,
    }  # fmt: skip
    assert not (cache.root / f"_gen/{before['generation'] + 2:08d}.json").exists()


def test_the_mark_counts_what_was_read_ahead_as_read() -> None:
    stats = {"metaranges_read": 1, "metaranges_cached": 9, "ranges_read": 0, "ranges_cached": 50}
    ahead = {"metaranges_read": 3, "ranges_read": 20, "head_ranges_read": 2, "seconds": 1.5}
    merged = with_read_ahead(stats, ahead)
    assert merged["metaranges_read"] == 4 and merged["metaranges_cached"] == 6
    assert merged["ranges_read"] == 20 and merged["ranges_cached"] == 30
    assert merged["read_ahead"] == ahead and "head_ranges_read" not in merged
    assert with_read_ahead(stats, {}) == stats


@pytest.mark.parametrize(
    ("new", "held", "tasks"),
    [
        (1, 0, 4),  # an empty cache: a first cycle's history
        (515, 0, 4),  # 1M objects' first cycle (bench/README.md)
        (15, 515, 1),  # 1M objects' next cycle
        (300, 13_762, 1),  # the bottom line's next cycle
        (600, 500, 4),  # more new than held: a cache the byte cap emptied
        (ONE_TASK_METARANGES, 50_000, 1),
        (ONE_TASK_METARANGES + 1, 50_000, 4),  # many new commits: every task
    ],
)
def test_the_read_ahead_uses_one_task_only_for_a_few_new_commits(new: int, held: int, tasks: int) -> None:
    assert read_ahead_tasks(new, held, 4) == tasks
