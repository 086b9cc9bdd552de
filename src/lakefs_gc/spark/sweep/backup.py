"""Backup and restore of a mark's objects, on the executors, resumable, with a report next to the mark.

``backup_run`` copies every address a successful mark listed in ``deleted/`` from the storage
namespace to ``<to>/<repository>/<mark_id>/<address>``; ``restore_run`` copies them back from
``<from>/<repository>/<mark_id>/<address>`` to ``<namespace>/<address>``. The backup layout is the
namespace's own relative layout, so a restore maps back exactly and ``rclone``/``aws s3 sync``
can restore by hand too.

Each task copies its share with one :class:`~lakefs_gc.storage.copiers.ObjectCopier` and writes
one part file of ``backup/`` or ``restore/`` under the mark's report directory (columns
``address, outcome, error, size``). Every run gives every marked address an outcome, so a run
killed part-way is simply started again: what an earlier run copied is found and counted as
``already``. Each run writes a new set of parts (an earlier run's parts stay, as history), and
``backup.json`` / ``restore.json`` beside ``summary.json`` name the current run's part tag, its
location and its counts. Neither command deletes or overwrites anything.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from lakefs_gc.errors import ConfigError
from lakefs_gc.gc.ports import Clock, utc_now
from lakefs_gc.spark.report.layout import ReportDir, new_part_tag, part_files, part_name
from lakefs_gc.spark.report.read import address_chunks, marked_frame, read_summary
from lakefs_gc.spark.runtime.failures import is_spark_failure, job_failure, on_executor
from lakefs_gc.storage.copiers import CopyOutcome, ObjectCopier, copier_for
from lakefs_gc.storage.locations import StorageLocation, parse_location
from lakefs_gc.storage.reads import read_whole
from lakefs_gc.storage.writes import open_output, write_whole

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakefs_gc.storage.filesystems import StorageOptions

_log = logging.getLogger(__name__)

Direction = Literal["backup", "restore"]
Progress = Callable[[str], None]
OUTCOMES = ("copied", "already", "missing", "conflict", "failed")
COPY_SCHEMA = pa.schema(
    [("address", pa.string()), ("outcome", pa.string()), ("error", pa.string()), ("size", pa.int64())]
)
#: addresses per unit of work handed to a task's thread pool
COPY_CHUNK = 64


@dataclass(frozen=True)
class CopyResult:
    direction: Direction
    repository: str
    mark_id: str
    location: str  # the backup: <root>/<repository>/<mark_id>/
    counts: dict[str, int] = field(default_factory=dict)
    bytes_copied: int = 0
    report_location: str = ""

    @property
    def ok(self) -> bool:
        """No failure and no conflict; for a restore also nothing missing (lost from both sides)."""
        bad = self.counts.get("failed", 0) + self.counts.get("conflict", 0)
        if self.direction == "restore":
            bad += self.counts.get("missing", 0)
        return bad == 0


def backup_location(root: str, repository: str, mark_id: str, options: StorageOptions) -> StorageLocation:
    """``<root>/<repository>/<mark_id>/``: where the backup of one mark lives."""
    for name, value in (("repository", repository), ("mark id", mark_id)):
        if not value or "/" in value or value in (".", ".."):
            raise ConfigError(f"{name} {value!r} cannot name a backup directory")
    return parse_location(root, local_root=options.local_root).join(f"{repository}/{mark_id}/")


@dataclass(frozen=True)
class CopyJob:
    """One backup or restore: of which mark (``mark``, of ``repository``), to or from where (``root``)."""

    direction: Direction
    repository: str
    mark: ReportDir
    root: str
    concurrency: int = 8
    parallelism: int | None = None


def backup_run(
    spark: SparkSession,
    mark: ReportDir,
    repository: str,
    *,
    to: str,
    concurrency: int = 8,
    parallelism: int | None = None,
    progress: Progress | None = None,
    clock: Clock = utc_now,
) -> CopyResult:
    """Copy the objects ``mark`` listed to ``<to>/<repository>/<mark_id>/`` (before a sweep)."""
    job = CopyJob("backup", repository, mark, to, concurrency, parallelism)
    return _copy_run(spark, job, progress or _log.info, clock)


def restore_run(
    spark: SparkSession,
    mark: ReportDir,
    repository: str,
    *,
    source: str,
    concurrency: int = 8,
    parallelism: int | None = None,
    progress: Progress | None = None,
    clock: Clock = utc_now,
) -> CopyResult:
    """Copy the objects of ``mark`` back from ``<source>/<repository>/<mark_id>/``.

    Only addresses the mark listed are restored, each checked with ``deletable_key`` (never
    ``_lakefs/``, never outside the namespace), and nothing is overwritten: an object already
    in the namespace is ``already`` (same size) or a ``conflict`` (different: newer data).
    """
    job = CopyJob("restore", repository, mark, source, concurrency, parallelism)
    return _copy_run(spark, job, progress or _log.info, clock)


def _copy_run(spark: SparkSession, job: CopyJob, say: Progress, clock: Clock) -> CopyResult:
    direction, repository, report = job.direction, job.repository, job.mark
    mark_id, options = report.mark_id, report.options
    if job.concurrency < 1:
        raise ConfigError(f"copy concurrency must be at least 1, got {job.concurrency}")
    summary = read_summary(report)  # refuses a missing or failed mark
    backup = backup_location(job.root, repository, mark_id, options)
    _refuse_overlap(report.namespace, backup)
    source, destination = (report.namespace, backup) if direction == "backup" else (backup, report.namespace)
    copier_for(source, destination, options).close()  # configuration errors surface here
    parallelism = job.parallelism or spark.sparkContext.defaultParallelism
    say(
        f"{repository}: {direction} of mark {mark_id} ({summary.text('num_deleted_objects')} objects): "
        f"{source} -> {destination}"
    )
    tag = new_part_tag()
    body = _CopyPartition(report, direction, tag, source, destination, job.concurrency)
    marked = marked_frame(spark, report, parallelism=parallelism).repartition(parallelism)
    try:
        rows = marked.mapInArrow(
            on_executor(body), ", ".join(f"{c} long" for c in (*OUTCOMES, "bytes"))
        ).collect()
    except Exception as e:
        if not is_spark_failure(e):
            raise
        raise job_failure(e, f"{direction} of mark {mark_id} of {repository}") from e
    counts = {o: sum(int(r[o]) for r in rows) for o in OUTCOMES}
    copied_bytes = sum(int(r["bytes"]) for r in rows)
    _write_run_record(report, direction, tag, backup, counts, copied_bytes, clock)
    result = CopyResult(
        direction, repository, mark_id, str(backup), counts, copied_bytes, str(report.child(direction))
    )
    say(
        f"{repository}: {direction} of mark {mark_id}: "
        + ", ".join(f"{counts[o]} {o}" for o in OUTCOMES)
        + f"; outcomes in {result.report_location}"
    )
    return result


def _refuse_overlap(namespace: StorageLocation, backup: StorageLocation) -> None:
    """A backup inside the namespace would be written among lakeFS's data (and a namespace inside
    the backup would be restored onto itself): both are refused."""
    same_store = (namespace.kind, namespace.container, (namespace.account or "").lower()) == (
        backup.kind,
        backup.container,
        (backup.account or "").lower(),
    )
    a, b = namespace.key.strip("/") + "/", backup.key.strip("/") + "/"
    if same_store and (a.startswith(b) or b.startswith(a) or a == "/" or b == "/"):
        raise ConfigError(f"the backup location {backup} overlaps the storage namespace {namespace}")


def _write_run_record(
    report: ReportDir,
    direction: Direction,
    tag: str,
    backup: StorageLocation,
    counts: dict[str, int],
    copied_bytes: int,
    clock: Clock,
) -> None:
    record = {
        "direction": direction,
        "mark_id": report.mark_id,
        "location": str(backup),
        "part_tag": tag,
        **counts,
        "bytes_copied": copied_bytes,
        "finish_time": clock().isoformat().replace("+00:00", "Z"),
    }
    fs, base = report.filesystem()
    for path, data in (
        (f"{base}/{direction}/_SUCCESS", b""),
        (f"{base}/{direction}.json", json.dumps(record, indent=1).encode("utf-8")),
    ):
        write_whole(fs, path, data)


def read_copy_report(report: ReportDir, direction: Direction) -> pa.Table:
    """The outcomes of the latest complete run (the parts ``<direction>.json`` names), on the driver:
    for small reports, demos and tests."""
    fs, base = report.filesystem()
    tag = json.loads(read_whole(fs, f"{base}/{direction}.json"))["part_tag"]
    tables = []
    for path in part_files(report, direction):
        if f"-{tag}-" in path.rsplit("/", 1)[-1]:
            with fs.open_input_file(path) as f:
                tables.append(pq.read_table(f))
    return pa.concat_tables(tables) if tables else COPY_SCHEMA.empty_table()


class _CopyPartition:
    """Copy one partition's addresses and record every outcome (runs on an executor).

    Copies wait on the stores, so ``concurrency`` chunks are in flight on one copier (boto3 and
    azure-storage-blob clients are thread-safe); outcomes are recorded in order on the task thread.
    """

    def __init__(
        self,
        report: ReportDir,
        direction: Direction,
        tag: str,
        source: StorageLocation,
        destination: StorageLocation,
        concurrency: int,
    ) -> None:
        self.report, self.direction, self.tag = report, direction, tag
        self.source, self.destination, self.concurrency = source, destination, concurrency

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        fs, base = self.report.filesystem()
        recorder = _Recorder(
            fs, f"{base}/{self.direction}/{part_name(partition, self.tag, '.snappy.parquet')}"
        )
        copier = copier_for(self.source, self.destination, self.report.options)
        try:
            with ThreadPoolExecutor(self.concurrency, thread_name_prefix=self.direction) as pool:
                in_flight: deque[Future[list[CopyOutcome]]] = deque()
                for chunk in address_chunks(batches, COPY_CHUNK):
                    in_flight.append(pool.submit(_copy_all, copier, chunk))
                    while len(in_flight) > 2 * self.concurrency:
                        recorder.record(in_flight.popleft().result())
                while in_flight:
                    recorder.record(in_flight.popleft().result())
        finally:
            copier.close()
            recorder.close()
        yield pa.RecordBatch.from_pydict(
            {**{o: [n] for o, n in recorder.counts.items()}, "bytes": [recorder.copied_bytes]}
        )


def _copy_all(copier: ObjectCopier, addresses: list[str]) -> list[CopyOutcome]:
    return [copier.copy(a) for a in addresses]


class _Recorder:
    """Counts outcomes and appends them to the task's part file (created even when empty, so a
    run's parts always cover all of its tasks)."""

    def __init__(self, fs: Any, path: str) -> None:
        self.counts = dict.fromkeys(OUTCOMES, 0)
        self.copied_bytes = 0
        self.out = open_output(fs, path)
        self.writer = pq.ParquetWriter(self.out, COPY_SCHEMA, compression="snappy")

    def record(self, outcomes: list[CopyOutcome]) -> None:
        rows: dict[str, list[Any]] = {"address": [], "outcome": [], "error": [], "size": []}
        for o in outcomes:
            rows["address"].append(o.address)
            rows["outcome"].append(o.outcome)
            rows["error"].append(o.error)
            rows["size"].append(o.size)
            self.counts[o.outcome] += 1
            if o.outcome == "copied":
                self.copied_bytes += o.size or 0
        self.writer.write_batch(pa.RecordBatch.from_pydict(rows, schema=COPY_SCHEMA))

    def close(self) -> None:
        """Close the writer, then the stream it leaves open (an S3/Azure upload completes only then)."""
        self.writer.close()
        self.out.close()
