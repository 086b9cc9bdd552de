"""What keeps an always-on service's state bounded: compaction and retentions, run by the cycles.

Every GC micro-batch calls :meth:`Maintenance.run` before it marks (so the mark reads a compacted
table); what is not due costs a clock read. One repository's batch at a time does the shared work
(a lock; the others skip it), each repository's batch its own:

* **event table compaction** every ``service.compaction_interval``
  (:mod:`lakefs_gc.spark.ingest.events.compaction`): per repository, the watermark is its newest
  snapshot's time minus ``compaction_margin`` (with inventories configured, nothing is folded
  before a repository's first snapshot), or without inventories ``now - compaction_margin``;
* **candidate table**: the parts of inventory deliveries older than every repository's newest
  one, once they were already superseded at the previous run (a mark may be reading them);
* **range cache**: each repository's, down to ``service.range_cache_max_bytes`` before its mark
  (:mod:`lakefs_gc.spark.mark.range_cache.retention`);
* **dead letters**: the newest ``service.dead_letters_max_files`` files per source are kept;
* **mark reports** (with their ``swept/`` logs), the exports lakeFS wrote for those marks and
  their sweeps (uncommitted dumps, commits CSVs: the run ids their summaries name), and cycle
  records older than ``service.keep_reports``, except the newest successful mark and any sweep
  the candidate set still subtracts (one after the repository's snapshot).

A failure is logged and counted (``lakefs_gc_maintenance_failures_total``) and never fails the
cycle: the state it would have removed is still consistent, only larger.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from lakefs_gc.gc.reports import lakefs_exports
from lakefs_gc.service.candidates import CandidateSets
from lakefs_gc.service.metrics import Metrics
from lakefs_gc.service.records import CycleRecords, MarkRecord
from lakefs_gc.spark.ingest.events.compaction import Watermark, compact_event_table
from lakefs_gc.spark.ingest.events.generations import newest_generation
from lakefs_gc.spark.ingest.events.table import DEAD_LETTER, EventTable
from lakefs_gc.spark.ingest.inventory.table import ingested_deliveries
from lakefs_gc.spark.mark.range_cache import RangeCache
from lakefs_gc.spark.mark.range_cache.retention import trim_range_cache
from lakefs_gc.spark.mark.sources.candidate_set import Snapshot
from lakefs_gc.spark.report.layout import SUMMARY, ReportDir
from lakefs_gc.storage.directories import StoreDirectory
from lakefs_gc.storage.locations import StorageLocation
from lakefs_gc.storage.reads import read_whole

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakefs_gc.service.settings import ServiceOptions

_log = logging.getLogger(__name__)

#: state sub-directories by what they hold (the ``table`` label of lakefs_gc_state_bytes)
STATE_TABLES = ("events", "candidates", "range_cache", "cycles", "checkpoints", "spools", "other")


@dataclass
class Maintenance:
    """Compaction and retentions of one service (see the module docstring)."""

    spark: SparkSession
    options: ServiceOptions
    state_dir: StoreDirectory | Path  # the service's state location (any store)
    candidate_sets: CandidateSets
    event_table: EventTable | None
    repositories: tuple[str, ...]
    metrics: Metrics
    clock: Callable[[], datetime]
    lock: threading.Lock = field(default_factory=threading.Lock)
    superseded: set[str] = field(default_factory=set)  # delivery ids superseded at the last run
    compacted: datetime | None = None  # when this process last compacted (or found nothing to)

    def __post_init__(self) -> None:
        self.metrics.range_cache_max.set(self.options.range_cache_max_bytes)

    def run(self, repository: str, namespace: StorageLocation, records: CycleRecords) -> None:
        """The shared work if due and no other cycle does it, then ``repository``'s own."""
        try:
            if self.lock.acquire(blocking=False):
                try:
                    self._shared()
                finally:
                    self.lock.release()
            self._retire_reports(repository, namespace, records)
            self._trim_range_cache(repository)
        except Exception as e:  # counted; the state stays consistent, only larger
            self.metrics.maintenance_failures.inc()
            _log.error("state maintenance failed: %s", e, exc_info=True)

    def _shared(self) -> None:
        now = self.clock()
        if self.event_table is not None and self._compaction_due(now):
            self.compact(now)
            self._retire_dead_letters()
            self._retire_deliveries()
        self.metrics_state_sizes()

    # ---- the event table ------------------------------------------------------------------------

    def _compaction_due(self, now: datetime) -> bool:
        assert self.event_table is not None
        last = self.compacted
        if last is None:  # after a restart: the newest generation says when
            newest = newest_generation(self.event_table)
            last = datetime.fromisoformat(newest.created_at) if newest is not None else None
        return last is None or now - last >= self.options.compaction_interval

    def watermarks(self, now: datetime) -> list[Watermark]:
        """Per repository: fold at its snapshot time minus the margin (see the module docstring)."""
        margin = self.options.compaction_margin
        if self.candidate_sets.table is None:
            return [Watermark(r, now - margin) for r in self.repositories]
        marks = []
        for repository in self.repositories:
            snapshot = self.candidate_sets.newest_snapshot(repository)
            if snapshot is not None:
                marks.append(
                    Watermark(repository, snapshot.snapshot_time - margin, _listed(repository, snapshot))
                )
        return marks

    def compact(self, now: datetime) -> None:
        assert self.event_table is not None
        result = compact_event_table(self.spark, self.event_table, self.watermarks(now), self.clock)
        self.compacted = now
        m = self.metrics
        m.compaction_duration.observe(result.seconds)
        m.compaction_rows_retired.inc(result.rows_retired)
        if result.generation is not None:
            m.compaction_rows_folded.inc(max(0, result.rows_before - result.rows_after))
            m.event_table_rows.set(result.rows_after)

    def _retire_dead_letters(self) -> None:
        assert self.event_table is not None
        fs, base = self.event_table.filesystem()
        keep = self.options.dead_letters_max_files
        for source in fs.get_file_info(pafs.FileSelector(f"{base}/{DEAD_LETTER}", allow_not_found=True)):
            if source.type != pafs.FileType.Directory:
                continue
            files = [
                i for i in fs.get_file_info(pafs.FileSelector(source.path)) if i.type == pafs.FileType.File
            ]
            files.sort(key=lambda i: (i.mtime_ns or 0, i.path))
            for info in files[: max(0, len(files) - keep)]:
                fs.delete_file(info.path)
                self.metrics.state_files_retired.labels("dead_letters").inc()

    # ---- the candidate table --------------------------------------------------------------------

    def _retire_deliveries(self) -> None:
        table = self.candidate_sets.table
        if table is None:
            return
        deliveries = [d for d in ingested_deliveries(table) if d.status == "ingested" and d.snapshot_time]
        newest = [
            max(
                (d for d in deliveries if d.repositories.get(r)), key=lambda d: (d.snapshot_time or "", d.seq)
            )
            for r in self.repositories
            if any(d.repositories.get(r) for d in deliveries)
        ]
        if not newest:
            return
        oldest_used = min((d.snapshot_time or "", d.seq) for d in newest)
        superseded = {d.id for d in deliveries if (d.snapshot_time or "", d.seq) < oldest_used}
        fs, base = table.filesystem()
        for delivery in deliveries:
            if delivery.id in superseded and delivery.id in self.superseded:
                for part in delivery.parts:
                    try:
                        fs.delete_file(f"{base}/{part}")
                        self.metrics.state_files_retired.labels("candidates").inc()
                    except FileNotFoundError:
                        pass
        self.superseded = superseded

    # ---- reports and cycle records --------------------------------------------------------------

    def _retire_reports(self, repository: str, namespace: StorageLocation, records: CycleRecords) -> None:
        oldest = self.clock() - self.options.keep_reports
        marks = records.marks()
        successful = [m for _, m in marks if m.success]
        newest = successful[-1] if successful else None
        snapshot = self.candidate_sets.newest_snapshot(repository) if self.candidate_sets.table else None
        for batch in sorted(records.batches.values(), key=lambda b: b.batch_id):
            if not batch.marks or any(not _retirable(m, newest, oldest, snapshot) for m in batch.marks):
                continue
            for mark in batch.marks:
                if mark.mark_id is not None:
                    self._retire_report(namespace, mark.mark_id)
            records.forget(batch.batch_id)
            self.metrics.state_files_retired.labels("cycles").inc()

    def _retire_report(self, namespace: StorageLocation, mark_id: str) -> None:
        """A mark's report, and first lakeFS's exports its summary says the mark and its sweep
        caused (docs/invariants.md, invariant 3: nothing else under ``_lakefs/``); a kill in
        between leaves the report, so the next run retires what is left."""
        report = ReportDir(namespace, mark_id, self.candidate_sets.options)
        fs, path = report.filesystem()
        for export in lakefs_exports(mark_id, _summary_body(fs, f"{path}/{SUMMARY}")):
            _delete_dir(fs, namespace.join(export).fs_path)
            self.metrics.state_files_retired.labels("lakefs_exports").inc()
        _delete_dir(fs, path)
        self.metrics.state_files_retired.labels("reports").inc()

    # ---- the range cache ------------------------------------------------------------------------

    def _trim_range_cache(self, repository: str) -> None:
        """The repository's range cache down to ``range_cache_max_bytes`` (its mark runs after this,
        in the same thread: nobody reads the cache meanwhile)."""
        cache, cap = RangeCache.for_repository(self.state_dir, repository), self.options.range_cache_max_bytes
        trimmed = trim_range_cache(cache, cap)
        self.metrics.range_cache_needed.labels(repository).set(trimmed.needed_bytes)
        if trimmed.parts_dropped:
            self.metrics.state_files_retired.labels("range_cache").inc(trimmed.parts_dropped)
        if trimmed.needed_bytes > cap:  # a cache that thrashes: worth an operator's attention
            _log.warning(
                "%s: its last mark needed %.1f GiB of range cache, over service.range_cache_max_bytes "
                "(%.1f GiB): each mark reads what was dropped from lakeFS again; raise "
                "range_cache_max_bytes above it, with room to grow (and the state's disk with it)",
                repository, trimmed.needed_bytes / 2**30, cap / 2**30,
            )  # fmt: skip

    # ---- sizes ----------------------------------------------------------------------------------

    def metrics_state_sizes(self) -> None:
        for table, size in state_sizes(self.state_dir).items():
            self.metrics.state_bytes.labels(table).set(size)


def _retirable(
    mark: MarkRecord, newest: MarkRecord | None, oldest: datetime, snapshot: Snapshot | None
) -> bool:
    if mark is newest or mark.ended is None or datetime.fromisoformat(mark.ended) >= oldest:
        return False
    if mark.success and mark.sweep is None:
        return False  # a sweep may still be due (or superseded by the next one)
    swept = datetime.fromisoformat(mark.swept) if mark.sweep == "done" and mark.swept else None
    # a sweep after the snapshot: the candidate set still subtracts what it deleted
    return not (swept is not None and snapshot is not None and swept > snapshot.snapshot_time)


def _listed(repository: str, snapshot: Snapshot) -> Callable[[SparkSession, int], DataFrame]:
    def listed(spark: SparkSession, parallelism: int) -> DataFrame:
        from pyspark.sql import functions as F

        return snapshot.objects(spark, parallelism).select(F.lit(repository).alias("repository"), "address")

    return listed


def _summary_body(fs: pafs.FileSystem, path: str) -> dict[str, Any] | None:
    """A report's ``summary.json`` as JSON, None when missing or unreadable (a killed mark)."""
    try:
        body = json.loads(read_whole(fs, path).decode("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        _log.warning("%s: unreadable (%s): lakeFS's exports it names stay", path, e)
        return None
    return body if isinstance(body, dict) else None


def _delete_dir(fs: pafs.FileSystem, path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        fs.delete_dir(path)


def state_sizes(state: StoreDirectory | Path) -> dict[str, int]:
    """Bytes under the state location by :data:`STATE_TABLES` (one recursive listing, any store)."""
    directory = state if isinstance(state, StoreDirectory) else StoreDirectory.of(state)
    fs, base = directory.filesystem()
    sizes = dict.fromkeys(STATE_TABLES, 0)
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    except FileNotFoundError:  # a local file removed while listing: sizes are a gauge, not a record
        return sizes
    for info in infos:
        if info.type == pafs.FileType.File:
            parts = tuple(info.path[len(base) :].strip("/").split("/")[:-1])
            sizes[_table_of(parts)] += info.size or 0
    return sizes


def _table_of(parts: tuple[str, ...]) -> str:
    if "checkpoint" in parts:
        return "checkpoints"
    if "spool" in parts:
        return "spools"
    if parts[:2] == ("events", "table"):
        return "events"
    if parts[:2] == ("inventory", "table"):
        return "candidates"
    if parts[:1] == ("range-cache",):
        return "range_cache"
    if parts[:1] == ("cycles",):
        return "cycles"
    return "other"


def process_memory() -> int:
    """The driver process's resident set size in bytes (0 where /proc is not there)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def open_descriptors() -> int:
    """How many file descriptors the driver process holds (0 where /proc is not there).

    py4j's callback server watches its sockets with ``select()``, which refuses a descriptor >=
    1024: a driver that leaks them stops receiving ``foreachBatch`` calls and its queries hang.
    """
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def jvm_heap_used(spark: SparkSession) -> Callable[[], float]:
    """A gauge function: the driver JVM's heap in use (NaN when the JVM cannot be asked)."""

    def used() -> float:
        try:
            runtime = spark.sparkContext._jvm.java.lang.Runtime.getRuntime()  # type: ignore[union-attr]
            return float(runtime.totalMemory() - runtime.freeMemory())
        except Exception:  # a scrape must not fail because the JVM is busy or gone
            return float("nan")

    return used


def jvm_heap_after_gc(spark: SparkSession) -> Callable[[], float]:
    """A gauge function: the driver JVM's heap left after the last collection of each heap pool.

    The heap in use also counts garbage not yet collected and swings by hundreds of MiB (the soak's
    sawtooth); what survives collections is what a leak moves. 0 before the first collection, NaN
    when the JVM cannot be asked.
    """

    def after_gc() -> float:
        try:
            management = spark.sparkContext._jvm.java.lang.management  # type: ignore[union-attr]
            heap, total = management.MemoryType.HEAP, 0
            for pool in management.ManagementFactory.getMemoryPoolMXBeans():
                usage = pool.getCollectionUsage() if pool.getType().equals(heap) else None
                total += usage.getUsed() if usage is not None else 0
            return float(total)
        except Exception:  # a scrape must not fail because the JVM is busy or gone
            return float("nan")

    return after_gc
