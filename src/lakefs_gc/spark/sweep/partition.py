"""One sweep task: delete its share of the marked addresses in bulk and record every outcome.

Runs on an executor, with one deleter from the sweep's :class:`~lakefs_gc.gc.ports.DeleterFactory`
(the store's, or the dry run's) and its own :class:`~lakefs_gc.storage.throttle.Throttle`:
retries with backoff, an adaptive limit of requests in flight, an optional share of
``max_deletes_per_second``. Outcomes go to ``swept/`` in small parts, each written whole
(:mod:`lakefs_gc.spark.report.swept`), so that a kill costs little (:mod:`.resume`); the task's
counts go back to the driver as one row, and to the progress accumulator.

A task whose executor is lost (``kill -9`` of a worker) is run again by Spark, in a new attempt
whose parts have names of their own (its task attempt id). Each task first reads what earlier
attempts of it flushed in this run (:func:`~lakefs_gc.spark.report.swept.earlier_attempts`):
those addresses are neither asked again nor recorded twice, and their outcomes count as the
task's, so ``swept/`` holds each address once and the summary counts every part.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakefs_gc.gc.params import SweepParams
from lakefs_gc.gc.ports import DeleteResult, DeleterFactory
from lakefs_gc.spark.report.layout import DRY_RUN, SWEPT, SWEPT_SCHEMA, ReportDir
from lakefs_gc.spark.report.read import address_chunks
from lakefs_gc.spark.report.swept import (
    earlier_attempts,
    read_part,
    swept_part_path,
    write_part,
)
from lakefs_gc.storage.throttle import RateLimit, Throttle

if TYPE_CHECKING:
    from pyspark import Accumulator

OUTCOMES = ("deleted", "missing", "failed")
#: What each task reports besides its outcomes (see :meth:`Throttle.stats`).
PACE = ("requests", "throttled", "retries", "concurrency_decreases", "lowest_concurrency")
#: A task writes a ``swept/`` part after this many outcomes, or this many seconds: what a kill
#: can cost (objects deleted again by the next run) against how many small parts ``swept/`` holds.
FLUSH_OUTCOMES = 20_000
FLUSH_INTERVAL_S = 10.0
#: how a dry run's parts name the outcomes of its deleter (``deleted`` there means "would be")
DRY_RUN_NAMES = {"deleted": "would_delete"}


class SweepPartition:
    """Delete one partition's addresses in bulk and record every outcome (runs on an executor).

    Object stores answer a bulk delete in tens to hundreds of milliseconds, mostly waiting: with
    one request per task the sweep would run at (task slots x one request) and lose to a plain
    loop. So each task keeps ``concurrency`` requests in flight on one thread-safe client, and
    records the outcomes on its own thread, in order, as they complete.
    """

    def __init__(
        self,
        report: ReportDir,
        tag: str,
        params: SweepParams,
        deleters: DeleterFactory,
        tasks_at_once: int,
        done: Accumulator[int],
    ) -> None:
        self.report = report
        self.tag = tag
        self.deleters = deleters
        self.concurrency = params.concurrency
        self.max_retries = params.max_retries
        #: this task's share of the ceiling (tasks that finish early leave their share unused)
        rate = params.max_deletes_per_second
        self.rate = rate / tasks_at_once if rate is not None else None
        self.done = done
        self.flush = (FLUSH_OUTCOMES, FLUSH_INTERVAL_S)
        self.cutoff: datetime | None = None  # the mark's cutoff: nothing modified since is deleted
        #: a dry run records what would be deleted in dry-run/, never in swept/
        self.directory, self.names = (DRY_RUN, DRY_RUN_NAMES) if deleters.dry_run else (SWEPT, {})

    def throttle(self) -> Throttle:
        rate = RateLimit(self.rate) if self.rate is not None else None
        return Throttle(max_concurrency=self.concurrency, max_retries=self.max_retries, rate=rate)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        fs, base = self.report.filesystem()
        earlier = earlier_attempts(fs, f"{base}/{self.directory}", partition, self.tag)
        tag = self.tag
        if earlier or (context is not None and context.attemptNumber() > 0):
            tag = f"{self.tag}.t{context.taskAttemptId() if context is not None else 0}"  # overwrites nothing
        recorder = _Recorder(
            fs, base, partition, tag, flush=self.flush, directory=self.directory, names=self.names
        )
        recorded = recorder.earlier(earlier)
        throttle = self.throttle()
        deleter = self.deleters(throttle=throttle, not_modified_since=self.cutoff)
        try:
            with ThreadPoolExecutor(self.concurrency, thread_name_prefix="sweep") as pool:
                in_flight: deque[tuple[list[str], Future[Sequence[DeleteResult]]]] = deque()
                for chunk in address_chunks(batches, deleter.max_batch):
                    if recorded:  # outcomes an earlier attempt of this task wrote: not again
                        chunk = [a for a in chunk if a not in recorded]
                        if not chunk:
                            continue
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


def _done(
    item: tuple[list[str], Future[Sequence[DeleteResult]]],
) -> tuple[list[str], Sequence[DeleteResult]]:
    addresses, future = item
    return addresses, future.result()


class _Recorder:
    """Counts outcomes and writes them to ``swept/`` in small parts, each one whole (see
    :mod:`~lakefs_gc.spark.sweep.resume`): a flush every ``flush_outcomes`` outcomes or
    ``flush_interval_s`` seconds, confirmed (``deleted``/``missing``) and ``failed`` outcomes in
    parts of their own. A kill loses only what was not flushed yet; the next run sweeps it again."""

    def __init__(
        self,
        fs: Any,
        base: str,
        partition: int,
        tag: str,
        *,
        flush: tuple[int, float],
        directory: str = SWEPT,
        names: Mapping[str, str] | None = None,
    ) -> None:
        self.fs, self.base, self.partition, self.tag = fs, base, partition, tag
        self.directory, self.names = directory, dict(names or {})
        self.flush_outcomes, self.flush_interval_s = flush
        self.counts = dict.fromkeys(OUTCOMES, 0)
        self.parts = 0
        self._confirmed: dict[str, list[Any]] = {c: [] for c in SWEPT_SCHEMA.names}
        self._failed: dict[str, list[Any]] = {c: [] for c in SWEPT_SCHEMA.names}
        self._flushed = time.monotonic()

    def earlier(self, parts: list[str]) -> frozenset[str]:
        """Count the outcomes that earlier attempts of this task wrote (their executor was lost
        after a flush) as this attempt's, and return their addresses: each address of the run gets
        one outcome in ``swept/``, and the task's counts cover every part it leaves behind."""
        outcome_of = {shown: outcome for outcome, shown in self.names.items()}
        recorded: set[str] = set()
        for path in parts:
            table = read_part(self.fs, path)
            if table is None:  # cut short: its addresses are swept (and recorded) again
                continue
            columns = (table.column(c).to_pylist() for c in ("address", "outcome"))
            for address, shown in zip(*columns, strict=True):
                if address not in recorded:
                    recorded.add(address)
                    self.counts[outcome_of.get(shown, shown)] += 1
        return frozenset(recorded)

    def record(self, addresses: list[str], outcomes: Sequence[DeleteResult]) -> None:
        if [o.address for o in outcomes] != addresses:
            raise RuntimeError(
                f"the deleter answered {len(outcomes)} outcomes for {len(addresses)} other addresses"
            )
        for outcome in outcomes:
            rows = self._failed if outcome.outcome == "failed" else self._confirmed
            rows["address"].append(outcome.address)
            rows["outcome"].append(self.names.get(outcome.outcome, outcome.outcome))
            rows["error"].append(outcome.error)
            self.counts[outcome.outcome] += 1
        pending = len(self._confirmed["address"]) + len(self._failed["address"])
        if pending >= self.flush_outcomes or time.monotonic() - self._flushed >= self.flush_interval_s:
            self.flush()

    def flush(self) -> None:
        for rows, failed in ((self._confirmed, False), (self._failed, True)):
            if rows["address"]:
                path = swept_part_path(
                    self.base, self.partition, self.tag, self.parts, failed=failed, directory=self.directory
                )
                write_part(self.fs, path, rows)
                self.parts += 1
                for column in rows.values():
                    column.clear()
        self._flushed = time.monotonic()

    def close(self) -> None:
        """Write what is not written yet."""
        self.flush()
