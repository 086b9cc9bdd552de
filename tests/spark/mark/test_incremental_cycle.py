"""Issue 17's must-show: an incremental cycle marks exactly what a from-scratch mark marks.

A service cycle marks with the repository's range cache and the candidate set (the newest
inventory snapshot, plus the store's events since). Here the snapshot is a listing of the
namespace taken at the first cycle, as an inventory delivery would describe it; then new commits
and objects arrive (a commit, an overwrite, a staged upload, and an upload dropped by a reset:
garbage that only an event announces), each with its ``created`` event. The second cycle, which
reads from lakeFS only the ranges it has not cached, must mark the same set as a mark with no
cache and a fresh listing of the same state.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from lakefs_gc import jobs
from lakefs_gc.events.model import EVENT_DDL
from lakefs_gc.spark.mark.range_cache import RangeCache
from lakefs_gc.spark.mark.result import MarkResult
from lakefs_gc.spark.mark.sources.base import LISTED_SCHEMA
from lakefs_gc.spark.mark.sources.candidate_set import CandidateSetSource, Snapshot
from lakefs_gc.spark.mark.sources.listing import ListingSource
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import StorageLocation, parse_storage_namespace
from tests.spark.mark.test_range_cache import REPO, env, grow, settings
from tests.support.gc_env import GcEnv
from tests.support.jobs import mark as jobs_mark

pytestmark = pytest.mark.usefixtures("spark")
__all__ = ["env"]  # the fixture, shared with the range cache's tests


def namespace(env: GcEnv) -> StorageLocation:
    return parse_storage_namespace(f"local://{REPO}", local_root=str(env.storage_root))


def listed(spark: SparkSession, env: GcEnv) -> list[tuple[Any, ...]]:
    """What the namespace holds now, as the mark's listing sees it (the snapshot's rows)."""
    source = ListingSource(namespace(env), StorageOptions(local_root=str(env.storage_root)))
    frame = source.candidates(spark, parallelism=2, say=lambda _m: None).objects
    return [tuple(r) for r in frame.select("address", "size", "last_modified").collect()]


def created_events(env: GcEnv, known: set[str], repository: str) -> list[tuple[Any, ...]]:
    """A ``created`` event for every object written since the snapshot (the store's notifications)."""
    root = env.storage_root / REPO
    rows = []
    for path in sorted((root / "data").rglob("*")):
        address = path.relative_to(root).as_posix()
        if path.is_file() and address not in known:
            stat = path.stat()
            when = datetime.fromtimestamp(stat.st_mtime, timezone.utc)
            rows.append((repository, address, "created", when, f"{stat.st_mtime_ns:020d}", stat.st_size,
                         None, None, f"m-{len(rows)}", when))  # fmt: skip
    return rows


def cycle_source(
    snapshot: list[tuple[Any, ...]], taken: datetime, events: list[tuple[Any, ...]], env: GcEnv
) -> CandidateSetSource:
    def objects(spark: SparkSession, _parallelism: int) -> DataFrame:
        return spark.createDataFrame(snapshot, LISTED_SCHEMA)

    def event_rows(spark: SparkSession, _parallelism: int) -> DataFrame:
        return spark.createDataFrame(events, EVENT_DDL)

    listing = ListingSource(namespace(env), StorageOptions(local_root=str(env.storage_root)))
    return CandidateSetSource(
        REPO, Snapshot("delivery-1", taken, objects), listing, events=event_rows, swept=lambda _s, _p: None
    )


def marked(spark: SparkSession, env: GcEnv, **options: Any) -> tuple[MarkResult, set[str]]:
    s = settings(env)
    result = jobs_mark(spark, s, REPO, **options)
    assert result.success
    table = jobs.report_table(s, result.storage_namespace, result.mark_id, "deleted")
    return result, set(table.column("address").to_pylist())


def test_incremental_cycle_marks_what_a_mark_from_scratch_marks(
    spark: SparkSession, env: GcEnv, tmp_path: Path
) -> None:
    cache = RangeCache.for_repository(tmp_path / "state", REPO, buckets=4)
    snapshot, taken = listed(spark, env), datetime.now(timezone.utc)
    first, _ = marked(spark, env, range_cache=cache, source=cycle_source(snapshot, taken, [], env))
    assert first.summary["range_cache"]["ranges_cached"] == 0

    grow(env, "main", "n1", 2)  # a commit of new objects
    env.lakefs.upload(REPO, "wide", "w1/f0", b"rewritten")  # an overwrite, committed
    env.lakefs.commit(REPO, "wide", "rewrite w1/f0")
    env.lakefs.upload(REPO, "wide", "staged/s0", b"staged")  # staged: kept
    dropped = env.lakefs.upload(REPO, "main", "dropped/d0", b"dropped")  # reset: garbage only events tell of
    env.lakefs.reset(REPO, "main")
    events = created_events(env, {r[0] for r in snapshot}, REPO)
    assert len(events) >= 5

    second, incremental = marked(
        spark, env, range_cache=cache, source=cycle_source(snapshot, taken, events, env)
    )
    _, scratch = marked(spark, env)
    assert incremental == scratch
    assert any(a.endswith(dropped.physical_address.rsplit("/", 1)[-1]) for a in scratch)
    stats = second.summary["range_cache"]
    assert (
        0
        < stats["ranges_read"]
        < second.summary["num_ranges"]
        == stats["ranges_cached"] + stats["ranges_read"]
    )
