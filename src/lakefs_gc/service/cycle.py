"""One repository's periodic GC: the ``foreachBatch`` body of its scheduler query.

The scheduler is a Structured Streaming query over Spark's ``rate-micro-batch`` source with a
processing-time trigger (``service.tick``): every tick is a micro-batch with a durable batch id,
and the body decides by the clock what is due. The rows themselves mean nothing.

Per micro-batch, in this order:

1. **sweep** the newest successful mark whose ``sweep_delay`` has passed (older unswept marks are
   superseded: the newer mark proposes whatever garbage of theirs still exists). The sweep is the
   batch sweep, with its revalidation, guards and resumption;
2. **mark** when the last mark started ``interval`` ago (``retry_delay`` after a failure), with
   the candidate set as the candidates and the range cache; with ``sweep_delay`` 0 its sweep
   follows at once.

Every step is recorded (:mod:`lakefs_gc.service.records`) before the next starts, so a replay of
the batch after a crash continues where it stopped: a killed mark is marked again, a killed sweep
resumes from its ``swept/`` parts. Errors of a cycle are recorded, logged and counted; they do not
stop the service (a lakeFS outage must not need a restart), and the next attempt waits
``retry_delay``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from lakefs_gc.errors import GcError
from lakefs_gc.gc.guards import SweepRefusedError
from lakefs_gc.service.records import BatchRecord, CycleRecords, MarkRecord

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lakefs_gc.service.metrics import Metrics
    from lakefs_gc.service.settings import RepositorySchedule
    from lakefs_gc.spark.mark.result import MarkResult
    from lakefs_gc.spark.sweep.job import SweepResult

_log = logging.getLogger(__name__)

#: the error of a mark whose process was killed and whose batch Spark will not replay
INTERRUPTED = "interrupted: the service stopped or was killed during this mark"


@dataclass(frozen=True)
class CyclePorts:
    """What a cycle calls: the batch mark and sweep, bound to the session and settings."""

    mark: Callable[[str], MarkResult]  # repository -> a finished mark (raises GcError on failure)
    sweep: Callable[[str, str], SweepResult]  # (repository, mark_id) -> the sweep's outcome
    clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)
    #: compaction and retentions (service.maintenance), before a mark so that it reads compacted state
    maintain: Callable[[], None] = lambda: None


class GcCycle:
    """The scheduler query's ``foreachBatch`` body for one repository."""

    def __init__(
        self,
        schedule: RepositorySchedule,
        records: CycleRecords,
        ports: CyclePorts,
        metrics: Metrics,
        *,
        retry_delay: timedelta,
        stopping: threading.Event,
    ) -> None:
        self.schedule, self.records, self.ports, self.metrics = schedule, records, ports, metrics
        self.retry_delay, self.stopping = retry_delay, stopping
        self.repository = schedule.name
        self.busy = threading.Lock()  # held while a batch works: shutdown waits for it
        self.attempts = 0  # batches of this process that attempted a mark (for `serve --cycles`)
        self.max_attempts: int | None = None  # `serve --cycles N`: no batch starts after N attempts
        last = records.last_success(sweeps=bool(schedule.sweep))
        if last is not None:  # a restart keeps the "last success" alert's clock (not "never")
            metrics.last_success.labels(self.repository).set(last.timestamp())

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        if self.stopping.is_set() or (self.max_attempts is not None and self.attempts >= self.max_attempts):
            return  # shutting down: what is due now is still due after the restart
        with self.busy:
            self.ports.maintain()  # first: a mark's recorded start is when it really starts
            now = self.ports.clock()
            record = self.records.get(batch_id, now)
            if record.finished is not None:
                _log.info(
                    "%s: GC batch %d was completed before; skipping its replay", self.repository, batch_id
                )
                return
            self._settle_killed_marks(record, now)
            self._sweep_due(record, now)
            self._mark_if_due(record, now)
            if record.marks or record.swept:
                record.finished = self.ports.clock().isoformat()
                self.records.save(record)
            if record.marks:
                self.attempts += 1

    # ---- marking --------------------------------------------------------------------------------

    def _settle_killed_marks(self, current: BatchRecord, now: datetime) -> None:
        """A started mark with no outcome was killed: no mark of this process can be running here
        (marks run inside a batch, one batch at a time).

        In ``current``, the batch Spark replays, it is dropped and this batch marks again. In any
        other batch it is recorded as failed: that batch will never be replayed (Spark replays only
        the newest uncommitted batch, and a replay that arrives while the service stops returns at
        once, above, and is committed). Left open it would stay "started" for ever; failed, the next
        mark waits ``retry_delay`` after its start, as after any failure.
        """
        for batch, mark in self.records.marks():
            if mark.success is not None:
                continue
            if batch is current:
                _log.warning("%s: the mark started in GC batch %d was interrupted; marking again",
                             self.repository, batch.batch_id)  # fmt: skip
                batch.marks.remove(mark)
                continue
            _log.warning("%s: the mark started in GC batch %d was interrupted and its batch is done; "
                         "recording it as failed", self.repository, batch.batch_id)  # fmt: skip
            mark.success, mark.ended, mark.error = False, now.isoformat(), INTERRUPTED
            self.records.save(batch)

    def mark_due(self, now: datetime) -> bool:
        last = self.records.last_mark_start()
        if last is None:
            return True
        wait = self.schedule.interval if last.success else self.retry_delay
        assert wait is not None
        return now - datetime.fromisoformat(last.started) >= wait

    def _mark_if_due(self, record: BatchRecord, now: datetime) -> None:
        if record.marks or not self.mark_due(now):
            return
        mark = MarkRecord(started=now.isoformat())
        record.marks.append(mark)
        self.records.save(record)  # a replay knows a mark was started (and killed)
        started = time.monotonic()
        try:
            result = self.ports.mark(self.repository)
        except Exception as e:  # recorded and counted; the next attempt waits retry_delay
            self._mark_failed(record, mark, e)
            return
        finally:
            self.metrics.mark_duration.labels(self.repository).observe(time.monotonic() - started)
        self._mark_succeeded(record, mark, result)
        if self.schedule.sweep_delay == timedelta(0):
            self._sweep_due(record, self.ports.clock())

    def _mark_succeeded(self, record: BatchRecord, mark: MarkRecord, result: MarkResult) -> None:
        mark.mark_id, mark.success, mark.ended = result.mark_id, True, self.ports.clock().isoformat()
        mark.marked = result.marked
        mark.marked_bytes = result.marked_bytes
        mark.candidates = result.listed
        self.records.save(record)
        m, repo = self.metrics, self.repository
        m.objects_marked.labels(repo).inc(mark.marked)
        m.bytes_marked.labels(repo).inc(mark.marked_bytes)
        if mark.candidates is not None:
            m.candidate_set_objects.labels(repo).set(int(mark.candidates))
        for reason, kept in (result.summary.get("kept") or {}).items():
            m.objects_kept.labels(repo, reason).set(int(kept.get("objects", 0)))
        saving = (result.summary.get("cost") or {}).get("monthly_saving_exact")
        if saving is not None:
            m.marked_monthly_saving.labels(repo).set(float(saving))
        if not self.schedule.sweep:
            self._cycle_succeeded()

    def _mark_failed(self, record: BatchRecord, mark: MarkRecord, error: Exception) -> None:
        mark.success, mark.ended, mark.error = False, self.ports.clock().isoformat(), _describe(error)
        self.records.save(record)
        self.metrics.cycle_failures.labels(self.repository, "mark").inc()
        _log.error(
            "%s: mark failed: %s", self.repository, mark.error, exc_info=not isinstance(error, GcError)
        )

    # ---- sweeping -------------------------------------------------------------------------------

    def _sweep_due(self, record: BatchRecord, now: datetime) -> None:
        pending = self.records.pending_sweeps()
        if not pending:
            return
        *older, (owner, newest) = pending
        for batch, mark in older:
            mark.sweep = "superseded"
            self.records.save(batch)
        if not self.schedule.sweep:
            newest.sweep = "skipped"
            self.records.save(owner)
            return
        assert newest.ended is not None and self.schedule.sweep_delay is not None
        if now - datetime.fromisoformat(newest.ended) < self.schedule.sweep_delay:
            return
        self._sweep(owner, newest, record)

    def _sweep(self, owner: BatchRecord, mark: MarkRecord, record: BatchRecord) -> None:
        assert mark.mark_id is not None
        started = time.monotonic()
        try:
            result = self.ports.sweep(self.repository, mark.mark_id)
        except SweepRefusedError as e:  # the guards said no: never retried, the next mark will tell
            mark.sweep, mark.sweep_error = "refused", str(e)
            self._sweep_failed(owner, mark, e)
            return
        except Exception as e:  # retried by the next mark's sweep
            mark.sweep, mark.sweep_error = "failed", _describe(e)
            self._sweep_failed(owner, mark, e)
            return
        finally:
            self.metrics.sweep_duration.labels(self.repository).observe(time.monotonic() - started)
        mark.sweep, mark.swept, mark.deleted = "done", self.ports.clock().isoformat(), result.deleted
        mark.failed = result.failed
        record.swept.append(mark.mark_id)
        self.records.save(owner)
        if owner is not record:
            self.records.save(record)
        self._count_sweep(mark, result)
        if result.failed == 0:
            self._cycle_succeeded()

    def _count_sweep(self, mark: MarkRecord, result: SweepResult) -> None:
        m, repo = self.metrics, self.repository
        m.objects_deleted.labels(repo).inc(result.deleted)
        if mark.marked:  # the report has sizes of marked objects, not of each deleted one
            m.bytes_deleted.labels(repo).inc(round(mark.marked_bytes * result.deleted / mark.marked))
        m.objects_delete_failed.labels(repo).inc(result.failed)
        m.objects_saved.labels(repo).inc(result.saved)
        m.delete_throttled.labels(repo).inc(result.throttled)
        m.delete_retries.labels(repo).inc(result.retries)
        if result.failed:
            m.cycle_failures.labels(repo, "sweep").inc()

    def _sweep_failed(self, owner: BatchRecord, mark: MarkRecord, error: Exception) -> None:
        self.records.save(owner)
        self.metrics.cycle_failures.labels(self.repository, "sweep").inc()
        _log.error("%s: sweep of mark %s: %s", self.repository, mark.mark_id, mark.sweep_error,
                   exc_info=not isinstance(error, GcError))  # fmt: skip

    def _cycle_succeeded(self) -> None:
        self.metrics.cycles.labels(self.repository).inc()
        self.metrics.last_success.labels(self.repository).set(self.ports.clock().timestamp())

    def status(self) -> dict[str, Any]:
        return {"repository": self.repository, **self.records.summary()}


def _describe(error: BaseException) -> str:
    return str(error) if isinstance(error, GcError) else f"{type(error).__name__}: {error}"
