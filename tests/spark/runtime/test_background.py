"""A mark's background readings (spark/runtime/background.py): the thread runs from ``start`` on,
so its owner holds its jobs before the thread's first line asks them whether it is still open.

The CI run of 2026-11-29 met the race this closes: the range cache's read-ahead thread asked
``self._jobs.open()`` before the owner's constructor had assigned ``self._jobs`` (the thread was
started by ``BackgroundJobs``' constructor), and died of an ``AttributeError``. The tests run each
owner's whole reading inside ``start``, before it returns: the most adversarial schedule there is.
"""

from __future__ import annotations

import logging
import threading
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
