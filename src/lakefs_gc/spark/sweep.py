"""The sweep: delete what a successful, persisted mark listed, on the executors, and say what happened.

Only a mark whose ``summary.json`` exists and says ``success=true`` is swept (invariant 5) — ours
or lakeFS's Scala job's, the layout is the same. Each task deletes its share of ``deleted/`` with
one store client and bulk requests (S3 ``DeleteObjects`` ≤ 1000 keys, Azure blob batch ≤ 256,
local unlink), re-checks every key before deleting it, and writes one ``swept/`` part file with
the outcome of every key: ``deleted``, ``missing`` or ``failed`` (with the error). The confirmed
counts are then added to the summary. Per-key failures are data, not exceptions.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakefs_gc.gc.reports import MarkReportError
from lakefs_gc.lakefs.client import LakeFSClient
from lakefs_gc.spark.failures import is_spark_failure, job_failure
from lakefs_gc.spark.reports import (
    SWEPT,
    SWEPT_SCHEMA,
    ReportDir,
    finish_swept,
    marked_frame,
    new_part_tag,
    open_report_output,
    part_name,
    read_summary,
    rewrite_summary,
)
from lakefs_gc.storage.deleters import deleter_for
from lakefs_gc.storage.locations import parse_storage_namespace

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakefs_gc.settings import GcSettings

_log = logging.getLogger(__name__)

Progress = Callable[[str], None]
OUTCOMES = ("deleted", "missing", "failed")


@dataclass(frozen=True)
class SweepResult:
    repository: str
    mark_id: str
    deleted: int
    missing: int
    failed: int
    report_location: str

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
) -> SweepResult:
    """Sweep mark ``mark_id`` of ``repository``; refuses a missing or failed mark."""
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
    say(f"{repository}: sweeping mark {mark_id} ({summary.get('num_deleted_objects')} objects marked)")
    marked = marked_frame(spark, report, parallelism=parallelism).repartition(parallelism)
    body = _SweepPartition(report, new_part_tag(), settings.gc.sweep_concurrency)
    try:
        rows = marked.mapInArrow(body, "deleted long, missing long, failed long").collect()
    except Exception as e:
        if not is_spark_failure(e):
            raise
        raise job_failure(e, f"sweep of mark {mark_id} of {repository}") from e
    counts = {o: sum(int(r[o]) for r in rows) for o in OUTCOMES}
    finish_swept(report)
    summary["sweep"] = {
        **counts,
        "finish_time": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
    }
    rewrite_summary(report, summary)
    say(
        f"{repository}: swept mark {mark_id}: {counts['deleted']} deleted, {counts['missing']} missing, "
        f"{counts['failed']} failed; outcomes in {report.child(SWEPT)}"
    )
    return SweepResult(
        repository, mark_id, counts["deleted"], counts["missing"], counts["failed"], str(report)
    )


class _SweepPartition:
    """Delete one partition's addresses in bulk and record every outcome (runs on an executor).

    Object stores answer a bulk delete in tens to hundreds of milliseconds, mostly waiting: with
    one request per task the sweep would run at (task slots x one request) and lose to a plain
    loop. So each task keeps ``concurrency`` requests in flight on one thread-safe client, and
    records the outcomes on its own thread, in order, as they complete.
    """

    def __init__(self, report: ReportDir, tag: str, concurrency: int) -> None:
        self.report = report
        self.tag = tag
        self.concurrency = concurrency

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        fs, base = self.report.filesystem()
        recorder = _Recorder(fs, f"{base}/{SWEPT}/{part_name(partition, self.tag, '.snappy.parquet')}")
        deleter = deleter_for(self.report.namespace, self.report.options)
        try:
            with ThreadPoolExecutor(self.concurrency, thread_name_prefix="sweep") as pool:
                in_flight: deque[tuple[list[str], Future[list[Any]]]] = deque()
                for chunk in _chunks(batches, deleter.max_batch):
                    in_flight.append((chunk, pool.submit(deleter.delete, chunk)))
                    while len(in_flight) > 2 * self.concurrency:
                        recorder.record(*_done(in_flight.popleft()))
                while in_flight:
                    recorder.record(*_done(in_flight.popleft()))
        finally:
            deleter.close()
            recorder.close()
        yield pa.RecordBatch.from_pydict({o: [recorder.counts[o]] for o in OUTCOMES})


def _chunks(batches: Iterator[pa.RecordBatch], size: int) -> Iterator[list[str]]:
    pending: list[str] = []
    for batch in batches:
        pending.extend(batch.column("address").to_pylist())
        while len(pending) >= size:
            yield pending[:size]
            pending = pending[size:]
    if pending:
        yield pending


def _done(item: tuple[list[str], Future[list[Any]]]) -> tuple[list[str], list[Any]]:
    addresses, future = item
    return addresses, future.result()


class _Recorder:
    """Counts outcomes and appends them to the task's ``swept/`` part file."""

    def __init__(self, fs: Any, path: str) -> None:
        self.fs, self.path = fs, path
        self.counts = dict.fromkeys(OUTCOMES, 0)
        self.writer: pq.ParquetWriter | None = None
        self.out: Any = None

    def record(self, addresses: list[str], outcomes: list[Any]) -> None:
        if [o.address for o in outcomes] != addresses:
            raise RuntimeError(
                f"the deleter answered {len(outcomes)} outcomes for {len(addresses)} other addresses"
            )
        rows: dict[str, list[Any]] = {"address": addresses, "outcome": [], "error": []}
        for outcome in outcomes:
            rows["outcome"].append(outcome.outcome)
            rows["error"].append(outcome.error)
            self.counts[outcome.outcome] += 1
        if self.writer is None:
            self.out = open_report_output(self.fs, self.path)
            self.writer = pq.ParquetWriter(self.out, SWEPT_SCHEMA, compression="snappy")
        self.writer.write_batch(pa.RecordBatch.from_pydict(rows, schema=SWEPT_SCHEMA))

    def close(self) -> None:
        """Close the writer, then the stream it leaves open (an S3/Azure upload completes only then)."""
        if self.writer is not None:
            self.writer.close()
        if self.out is not None:
            self.out.close()
