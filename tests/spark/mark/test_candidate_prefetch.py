"""The candidates read while lakeFS prepares the dump (spark/mark/sources/prefetch.py): the same
candidates, kept as the classification's joins want them; an error raised in the mark (invariant
4); nothing left behind by a mark that ends before it asks for them."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from lakefs_gc.gc import reasons
from lakefs_gc.gc.cutoff import Cutoff
from lakefs_gc.spark.mark.algebra import classify
from lakefs_gc.spark.mark.sources.base import Candidates, Progress
from lakefs_gc.spark.mark.sources.listing import ListingSource
from lakefs_gc.spark.mark.sources.prefetch import CandidatePrefetch, kept_partitions
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_storage_namespace

KEYS = [f"data/gq{i % 3}/obj{i:03d}" for i in range(40)]


def persisted(spark: SparkSession) -> set[int]:
    return {int(k) for k in spark.sparkContext._jsc.getPersistentRDDs().keySet()}


def listing(tmp_path: Path) -> ListingSource:
    root = tmp_path / "ns"
    for key in KEYS:
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(b"x")
    return ListingSource(parse_storage_namespace(f"file://{root}/"), StorageOptions())


@dataclass(frozen=True)
class FrameSource:
    """A candidate source of a given frame (the prefetch is what is tested, not a source)."""

    frame: DataFrame

    @property
    def summary(self) -> dict[str, Any]:
        return {"source": "test"}

    def candidates(self, spark: SparkSession, *, parallelism: int, say: Progress) -> Candidates:
        return Candidates(self.frame, None)


def test_the_classification_joins_the_kept_candidates_as_they_are(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The kept candidates are the source's; the joins with the references neither shuffle nor
    sort them again (the point of keeping them partitioned and sorted by address)."""
    source, said = listing(tmp_path), list[str]()
    found = CandidatePrefetch(spark, source, parallelism=2, say=said.append)
    try:
        objects = found.result().objects
        direct = source.candidates(spark, parallelism=2, say=said.append).objects
        assert sorted(objects.collect()) == sorted(direct.collect())
        committed = spark.createDataFrame([(k,) for k in KEYS[:10]], "address string")
        staged = spark.createDataFrame([(k,) for k in KEYS[10:15]], "address string")
        cutoff = Cutoff(datetime.now(timezone.utc) + timedelta(days=1), timedelta(0), "test")
        classified = classify(
            objects, committed=committed, uncommitted=staged, cutoff=cutoff, committed_unique=True
        )
        counts = Counter(r["reason"] for r in classified.collect())
        assert counts == {reasons.COMMITTED: 10, reasons.UNCOMMITTED: 5, reasons.GARBAGE: 25}
        plan = classified._jdf.queryExecution().executedPlan().toString().splitlines()
        scan = next(i for i, line in enumerate(plan) if "InMemoryTableScan" in line)
        assert "isFinalPlan=true" in plan[0]
        join = max(i for i in range(scan) if "SortMergeJoin" in plan[i])
        between = plan[join + 1 : scan]  # the join's candidate side, down to the kept candidates
        assert not any("Exchange" in line or "Sort [" in line for line in between), "\n".join(plan)
    finally:
        found.close()
    assert any("kept for the classification: 40" in m for m in said)


def test_an_error_of_the_reading_is_raised_in_the_mark(spark: SparkSession, tmp_path: Path) -> None:
    """Fail closed: a candidate file that cannot be read is the mark's error, never "no candidates"."""
    broken = tmp_path / "candidates.parquet"
    broken.write_bytes(b"PAR1 not a parquet file")
    frame = spark.read.schema("address string, size long, last_modified timestamp").parquet(str(broken))
    found = CandidatePrefetch(spark, FrameSource(frame), parallelism=2, say=lambda _: None)
    try:
        with pytest.raises(Exception, match=r"candidates\.parquet"):
            found.result()
    finally:
        found.close()


def _slow(value: Any) -> Any:
    time.sleep(0.05)
    return value


def test_a_mark_that_ends_first_cancels_the_reading_and_keeps_nothing(spark: SparkSession) -> None:
    """A dump refused while the candidates are read: the reading is cancelled, and what it kept
    is dropped."""
    from pyspark.sql import functions as F

    before = persisted(spark)
    frame = spark.range(0, 100_000, numPartitions=2).select(
        F.concat(F.lit("data/x/"), F.col("id").cast("string")).alias("address"),
        F.udf(lambda v: _slow(v), "long")("id").alias("size"),
        F.current_timestamp().alias("last_modified"),
    )
    found = CandidatePrefetch(spark, FrameSource(frame), parallelism=2, say=lambda _: None)
    time.sleep(2)  # the reading is under way
    started = time.monotonic()
    found.close()
    assert time.monotonic() - started < 30  # cancelled, not read to the end (100,000 x 50 ms)
    assert persisted(spark) == before


def test_the_kept_partition_count_is_a_power_of_two() -> None:
    """It divides the range cache's bucket count (256 by default) or is a multiple of it."""
    assert [kept_partitions(n) for n in (1, 2, 3, 4, 5, 200, 256, 257)] == [1, 2, 4, 4, 8, 256, 256, 512]
