"""A mark's background readings (spark/runtime/background.py): the thread runs from ``start`` on,
so its owner holds its jobs before the thread's first line asks them whether it is still open.

The CI run of 2026-11-29 met the race this closes: the range cache's read-ahead thread asked
``self._jobs.open()`` before the owner's constructor had assigned ``self._jobs`` (the thread was
started by ``BackgroundJobs``' constructor), and died of an ``AttributeError``. The tests run each
owner's whole reading inside ``start``, before it returns: the most adversarial schedule there is.

A reading's jobs run in a fair-scheduler pool of their own, so that a one-task job gets the next
free core rather than waiting for every task of the jobs submitted before it (FIFO).
"""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.sql import SparkSession

from lakefs_gc.spark.mark.range_cache.ahead import RangeCacheReadAhead
from lakefs_gc.spark.mark.sources.prefetch import CandidatePrefetch
from lakefs_gc.spark.runtime.background import BackgroundJobs
from tests.spark.mark.test_candidate_prefetch import FrameSource


def _run_within_start(jobs: BackgroundJobs) -> None:
    """``BackgroundJobs.start`` that runs the thread's body to its end before returning."""
    jobs._body()
    done = threading.Thread(target=lambda: None)
    done.start()
    done.join()
    jobs._thread = done  # type: ignore[assignment]  # joined by the owner as the thread would be


def test_nothing_runs_before_start(spark: SparkSession) -> None:
    ran = threading.Event()
    jobs = BackgroundJobs(spark, ran.set, name="test")
    assert not ran.wait(0.3), "the thread ran before start()"
    jobs.start()
    jobs.join()
    assert ran.is_set()
    jobs.close()


def test_the_candidates_reading_finds_its_jobs_at_once(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(BackgroundJobs, "start", _run_within_start)
    frame = spark.createDataFrame([("data/a", 1, None)], "address string, size long, last_modified timestamp")
    found = CandidatePrefetch(spark, FrameSource(frame), parallelism=2, say=lambda _: None)
    try:
        assert [r["address"] for r in found.result().objects.collect()] == ["data/a"]
    finally:
        found.close()


class _FailingGraph:
    def commit_graph(self, repository: str, seeds: Any) -> Any:
        raise OSError("lakeFS is away")


def test_the_read_ahead_finds_its_jobs_at_once(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Its failure is the logged, ignored one of the module's design, not an ``AttributeError``."""
    from datetime import datetime, timezone

    monkeypatch.setattr(BackgroundJobs, "start", _run_within_start)
    said: list[str] = []
    with caplog.at_level(logging.WARNING, logger="lakefs_gc"):
        ahead = RangeCacheReadAhead(
            spark,
            cache=SimpleNamespace(),  # type: ignore[arg-type]  # not reached: the graph fails first
            reader=SimpleNamespace(repository="repo"),  # type: ignore[arg-type]
            graph=_FailingGraph(),
            now=datetime.now(timezone.utc),
            heads=False,
            parallelism=2,
            say=said.append,
        )
        assert ahead.wait() == {}
    ahead.close()
    assert any("lakeFS is away" in m for m in said), said
    assert any("read-ahead failed" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("name", ["candidates", "range read-ahead"])
def test_each_reading_of_a_mark_has_its_pool_configured(spark: SparkSession, name: str) -> None:
    """The session runs the fair scheduler with lakefs-gc's allocation file, which configures the
    pool of each reading a mark starts during lakeFS's dump (no pool made up with a warning)."""
    jobs = BackgroundJobs(spark, lambda: None, name=name)
    assert spark.sparkContext.getConf().get("spark.scheduler.mode") == "FAIR"
    assert spark.sparkContext._jsc.sc().getPoolForName(jobs.pool).isDefined(), jobs.pool


def test_a_reading_gets_the_next_free_core_not_the_last(spark: SparkSession) -> None:
    """A reading's one-task job runs as soon as a core frees, while a job submitted before it
    still has tasks to start. In Spark's FIFO order it ran only once every task of the earlier
    job had started: the range cache's read-ahead queued behind each stage of the candidates'."""

    def slow(row: int) -> int:
        import time as in_worker

        in_worker.sleep(0.3)
        return row

    ended: dict[str, float] = {}

    def earlier_job() -> None:  # 20 tasks of 0.3 s: every core of the session for 1.5-3 s
        spark.sparkContext.parallelize(range(20), 20).map(slow).count()
        ended["earlier"] = time.monotonic()

    def reading() -> None:
        spark.sparkContext.parallelize([1], 1).count()
        ended["reading"] = time.monotonic()

    earlier = threading.Thread(target=earlier_job)
    earlier.start()
    time.sleep(0.5)  # the earlier job's tasks are running
    jobs = BackgroundJobs(spark, reading, name="candidates")
    jobs.start()
    jobs.join()
    earlier.join()
    assert ended["reading"] < ended["earlier"] - 0.5, ended
