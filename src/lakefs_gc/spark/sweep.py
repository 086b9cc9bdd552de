"""The sweep: delete what a successful, persisted mark listed, on the executors, and say what happened.

Only a mark whose ``summary.json`` exists and says ``success=true`` is swept (invariant 5) — ours
or lakeFS's Scala job's, the layout is the same. Each task deletes its share of ``deleted/`` with
one store client and bulk requests (S3 ``DeleteObjects`` ≤ 1000 keys, Azure blob batch ≤ 256,
local unlink), re-checks every key before deleting it, and writes the outcome of every key to
``swept/``: ``deleted``, ``missing`` or ``failed`` (with the error), in small parts written as it
goes, so that a killed sweep started again deletes only what no part confirms yet
(:mod:`~lakefs_gc.spark.sweep_resume`). The confirmed counts are then added to the summary.
Per-key failures are data, not exceptions.

Throttling is handled per task (:mod:`lakefs_gc.storage.throttle`): retries with backoff, an
adaptive limit of requests in flight, an optional share of ``max_deletes_per_second``. What it
cost is added to the summary (``sweep.throttled``, ``sweep.retries``, ...). While it runs, a driver
thread prints progress from an accumulator the tasks add their counts to when they finish; tasks
are kept to :data:`OBJECTS_PER_TASK` objects so that it moves.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakefs_gc.gc.reports import MarkReportError
from lakefs_gc.lakefs.client import LakeFSClient
from lakefs_gc.spark import sweep_resume
from lakefs_gc.spark.failures import is_spark_failure, job_failure
from lakefs_gc.spark.reports import (
    SWEPT,
    SWEPT_SCHEMA,
    ReportDir,
    address_chunks,
    marked_frame,
    read_summary,
    rewrite_summary,
)
from lakefs_gc.spark.sweep_guards import parse_instant, plan_sweep
from lakefs_gc.spark.sweep_resume import swept_part_path, write_part
from lakefs_gc.storage.deleters import deleter_for
from lakefs_gc.storage.locations import parse_storage_namespace
from lakefs_gc.storage.throttle import RateLimit, Throttle

if TYPE_CHECKING:
    from pyspark import Accumulator
    from pyspark.sql import SparkSession

    from lakefs_gc.settings import GcOptions, GcSettings

_log = logging.getLogger(__name__)

Progress = Callable[[str], None]
OUTCOMES = ("deleted", "missing", "failed")
#: What each task reports besides its outcomes (see :meth:`Throttle.stats`).
PACE = ("requests", "throttled", "retries", "concurrency_decreases", "lowest_concurrency")
#: At most this many objects per sweep task: progress moves when tasks finish.
OBJECTS_PER_TASK = 100_000
#: Seconds between two progress lines.
PROGRESS_INTERVAL_S = 10.0
#: A task writes a ``swept/`` part after this many outcomes, or this many seconds: what a kill
#: can cost (objects deleted again by the next run) against how many small parts ``swept/`` holds.
FLUSH_OUTCOMES = 20_000
FLUSH_INTERVAL_S = 10.0


@dataclass(frozen=True)
class SweepResult:
    repository: str
    mark_id: str
    deleted: int
    missing: int
    failed: int
    report_location: str
    throttled: int = 0
    retries: int = 0
    #: marked objects the revalidation found referenced again, not deleted
    saved: int = 0
    revalidated: bool = False

    @property
    def attempted(self) -> int:
        return self.deleted + self.missing + self.failed


def sweep_run(
    spark: SparkSession,
    settings: GcSettings,
    repository: str,
    mark_id: str,
    *,
    progress: Progress | None = None,
    force: bool = False,
) -> SweepResult:
    """Sweep mark ``mark_id`` of ``repository``; refuses a missing or failed mark, and what the
    guards of :mod:`~lakefs_gc.spark.sweep_guards` refuse (``force``: the delete-fraction guard's)."""
    say = progress or _log.info
    with LakeFSClient(settings.lakefs, source="sweep") as client:
        storage_namespace = client.get_repository(repository).storage_namespace
    namespace = parse_storage_namespace(storage_namespace, local_root=settings.storage.local_root)
    report = ReportDir(namespace, mark_id, settings.storage)
    summary = read_summary(report)
    if str(summary.get("run_id")) != mark_id:
        raise MarkReportError(
            f"{report}: summary.json belongs to mark {summary.get('run_id')!r}, not {mark_id!r}"
        )
    parallelism = settings.spark.parallelism or spark.sparkContext.defaultParallelism
    total = _int_or_none(summary.get("num_deleted_objects"))
    partitions = max(parallelism, math.ceil((total or 0) / OBJECTS_PER_TASK))
    say(f"{repository}: sweeping mark {mark_id} ({total} objects marked)")
    marked = marked_frame(spark, report, parallelism=parallelism)
    now = datetime.now(timezone.utc)
    plan = plan_sweep(spark, settings, repository, mark_id, summary, marked, force=force, now=now, say=say)
    resume = sweep_resume.confirmed(spark, report, parallelism=parallelism, say=say)
    marked = resume.pending(plan.addresses).repartition(partitions)
    done = spark.sparkContext.accumulator(0)
    running_at_once = max(1, min(partitions, spark.sparkContext.defaultParallelism))
    body = _SweepPartition(report, resume.tag, settings.gc, running_at_once, done)
    body.cutoff = parse_instant(summary.get("cutoff_time"))  # re-checked at delete time where stores can
    schema = ", ".join(f"{c} long" for c in (*OUTCOMES, *PACE))
    meter = _ProgressMeter(say, repository, total, _int_or_none(summary.get("num_deleted_bytes")), done)
    try:
        with meter:
            rows = marked.mapInArrow(body, schema).collect()
    except Exception as e:
        if not is_spark_failure(e):
            raise
        raise job_failure(e, f"sweep of mark {mark_id} of {repository}") from e
    finally:
        plan.release()
    counts = resume.totals({o: sum(int(r[o]) for r in rows) for o in OUTCOMES})
    pace = {p: sum(int(r[p]) for r in rows) for p in PACE if p != "lowest_concurrency"}
    pace["lowest_concurrency"] = min((int(r["lowest_concurrency"]) for r in rows), default=0)
    resume.finish()
    summary["revalidation"] = plan.revalidation
    summary["sweep"] = {
        **counts,
        "finish_time": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
        "duration_seconds": round(meter.elapsed(), 3),
        **pace,
    }
    rewrite_summary(report, summary)
    say(
        f"{repository}: swept mark {mark_id}: {counts['deleted']} deleted, {counts['missing']} missing, "
        f"{counts['failed']} failed in {meter.elapsed():.1f}s ({pace['throttled']} throttled answers, "
        f"{pace['retries']} retries); {plan.saved} kept, referenced again since the mark; "
        f"outcomes in {report.child(SWEPT)}"
    )
    return SweepResult(
        repository, mark_id, counts["deleted"], counts["missing"], counts["failed"], str(report),
        throttled=pace["throttled"], retries=pace["retries"], saved=plan.saved, revalidated=plan.revalidated,
    )  # fmt: skip


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


class _ProgressMeter:
    """Prints ``done/total objects (~bytes), rate, ETA`` every :data:`PROGRESS_INTERVAL_S` seconds
    from the driver, while the sweep job runs.

    ``done`` is the tasks' accumulator: Spark merges a task's additions when the task ends, so
    the count moves task by task. Bytes are estimated from the mark's average object size
    (lakeFS's ``deleted/`` has no sizes).
    """

    def __init__(
        self,
        say: Progress,
        repository: str,
        total: int | None,
        total_bytes: int | None,
        done: Accumulator[int],
    ) -> None:
        self.say, self.repository, self.total, self.total_bytes, self.done = (
            say, repository, total, total_bytes, done,
        )  # fmt: skip
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sweep-progress", daemon=True)

    def __enter__(self) -> _ProgressMeter:
        self.started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.finished = time.monotonic()

    def elapsed(self) -> float:
        return getattr(self, "finished", time.monotonic()) - self.started

    def _run(self) -> None:
        while not self._stop.wait(PROGRESS_INTERVAL_S):
            self.say(self.line(int(self.done.value), self.elapsed()))

    def line(self, done: int, elapsed: float) -> str:
        rate = done / elapsed if elapsed > 0 else 0.0
        text = f"{self.repository}: sweep {done}/{self.total if self.total is not None else '?'} objects"
        if self.total and self.total_bytes is not None:
            text += f" (~{_size(self.total_bytes * done / self.total)})"
        text += f", {rate:.0f} objects/s"
        if self.total is not None and rate > 0:
            text += f", ETA {max(0.0, (self.total - done) / rate):.0f}s"
        return text


class _SweepPartition:
    """Delete one partition's addresses in bulk and record every outcome (runs on an executor).

    Object stores answer a bulk delete in tens to hundreds of milliseconds, mostly waiting: with
    one request per task the sweep would run at (task slots x one request) and lose to a plain
    loop. So each task keeps ``concurrency`` requests in flight on one thread-safe client, and
    records the outcomes on its own thread, in order, as they complete.
    """

    def __init__(
        self, report: ReportDir, tag: str, options: GcOptions, tasks_at_once: int, done: Accumulator[int]
    ) -> None:
        self.report = report
        self.tag = tag
        self.concurrency = options.sweep_concurrency
        self.max_retries = options.sweep_max_retries
        #: this task's share of the ceiling (tasks that finish early leave their share unused)
        rate = options.max_deletes_per_second
        self.rate = rate / tasks_at_once if rate is not None else None
        self.done = done
        self.flush = (FLUSH_OUTCOMES, FLUSH_INTERVAL_S)
        self.cutoff: datetime | None = None  # the mark's cutoff: nothing modified since is deleted

    def throttle(self) -> Throttle:
        rate = RateLimit(self.rate) if self.rate is not None else None
        return Throttle(max_concurrency=self.concurrency, max_retries=self.max_retries, rate=rate)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        attempt = context.attemptNumber() if context is not None else 0
        fs, base = self.report.filesystem()
        tag = self.tag if attempt == 0 else f"{self.tag}.a{attempt}"  # a retried task overwrites nothing
        recorder = _Recorder(fs, base, partition, tag, flush=self.flush)
        throttle = self.throttle()
        deleter = deleter_for(
            self.report.namespace, self.report.options, throttle=throttle, not_modified_since=self.cutoff
        )
        try:
            with ThreadPoolExecutor(self.concurrency, thread_name_prefix="sweep") as pool:
                in_flight: deque[tuple[list[str], Future[list[Any]]]] = deque()
                for chunk in address_chunks(batches, deleter.max_batch):
                    in_flight.append((chunk, pool.submit(deleter.delete, chunk)))
                    while len(in_flight) > 2 * self.concurrency:
                        recorder.record(*_done(in_flight.popleft()))
                while in_flight:
                    recorder.record(*_done(in_flight.popleft()))
        finally:
            deleter.close()
            recorder.close()
        self.done.add(sum(recorder.counts.values()))
        stats = throttle.stats()
        yield pa.RecordBatch.from_pydict(
            {c: [recorder.counts[c] if c in OUTCOMES else stats[c]] for c in (*OUTCOMES, *PACE)}
        )


def _done(item: tuple[list[str], Future[list[Any]]]) -> tuple[list[str], list[Any]]:
    addresses, future = item
    return addresses, future.result()


class _Recorder:
    """Counts outcomes and writes them to ``swept/`` in small parts, each one whole (see
    :mod:`~lakefs_gc.spark.sweep_resume`): a flush every ``flush_outcomes`` outcomes or
    ``flush_interval_s`` seconds, confirmed (``deleted``/``missing``) and ``failed`` outcomes in
    parts of their own. A kill loses only what was not flushed yet; the next run sweeps it again."""

    def __init__(self, fs: Any, base: str, partition: int, tag: str, *, flush: tuple[int, float]) -> None:
        self.fs, self.base, self.partition, self.tag = fs, base, partition, tag
        self.flush_outcomes, self.flush_interval_s = flush
        self.counts = dict.fromkeys(OUTCOMES, 0)
        self.parts = 0
        self._confirmed: dict[str, list[Any]] = {c: [] for c in SWEPT_SCHEMA.names}
        self._failed: dict[str, list[Any]] = {c: [] for c in SWEPT_SCHEMA.names}
        self._flushed = time.monotonic()

    def record(self, addresses: list[str], outcomes: list[Any]) -> None:
        if [o.address for o in outcomes] != addresses:
            raise RuntimeError(
                f"the deleter answered {len(outcomes)} outcomes for {len(addresses)} other addresses"
            )
        for outcome in outcomes:
            rows = self._failed if outcome.outcome == "failed" else self._confirmed
            rows["address"].append(outcome.address)
            rows["outcome"].append(outcome.outcome)
            rows["error"].append(outcome.error)
            self.counts[outcome.outcome] += 1
        pending = len(self._confirmed["address"]) + len(self._failed["address"])
        if pending >= self.flush_outcomes or time.monotonic() - self._flushed >= self.flush_interval_s:
            self.flush()

    def flush(self) -> None:
        for rows, failed in ((self._confirmed, False), (self._failed, True)):
            if rows["address"]:
                path = swept_part_path(self.base, self.partition, self.tag, self.parts, failed=failed)
                write_part(self.fs, path, rows)
                self.parts += 1
                for column in rows.values():
                    column.clear()
        self._flushed = time.monotonic()

    def close(self) -> None:
        """Write what is not written yet."""
        self.flush()
