"""A sweep that can be killed at any moment and started again, from what ``swept/`` confirms.

The sweep's tasks flush their outcomes to ``swept/`` parts (:mod:`lakefs_gc.spark.report.swept`)
after every :data:`~lakefs_gc.spark.sweep.partition.FLUSH_OUTCOMES` outcomes or
:data:`~lakefs_gc.spark.sweep.partition.FLUSH_INTERVAL_S` seconds. A kill (``kill -9`` of the
driver, a lost executor) loses at most the outcomes not yet flushed: their objects were maybe
deleted, not confirmed, and the next run deletes them again (deleting is idempotent: S3 answers
``deleted`` again, Azure and local disks ``missing``).

A sweep of a mark that already has ``swept/`` parts (:func:`confirmed`) deletes only what no
readable part confirms; ``failed`` outcomes are not confirmations, those objects are tried again.
Its summary counts are the confirmed ones from before plus this run's; ``failed`` is this run's
alone. When it completes it removes the ``failed`` parts of earlier runs (each of their addresses
was tried again in this run) and writes ``_SUCCESS``, so that ``swept/`` then holds every swept
address exactly once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.accumulators import AccumulatorParam

from lakefs_gc.errors import StorageError
from lakefs_gc.spark.report.layout import SUCCESS_MARKER, SWEPT, ReportDir, part_files
from lakefs_gc.spark.report.swept import CONFIRMED, is_failed_part, part_order, read_part, run_tag
from lakefs_gc.spark.runtime.failures import on_executor
from lakefs_gc.spark.runtime.frames import task_frame
from lakefs_gc.storage.writes import open_output

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from pyspark import Accumulator
    from pyspark.sql import DataFrame, SparkSession

_log = logging.getLogger(__name__)


@dataclass
class Resume:
    """What earlier runs of a mark's sweep confirmed, and this run's tag.

    ``addresses``: the confirmed addresses (column ``address``, distinct), ``None`` if none.
    """

    report: ReportDir
    tag: str
    addresses: DataFrame | None
    deleted: int = 0
    missing: int = 0

    @property
    def count(self) -> int:
        return self.deleted + self.missing

    def pending(self, marked: DataFrame) -> DataFrame:
        """``marked`` without what earlier runs confirmed."""
        if self.addresses is None:
            return marked
        return marked.join(self.addresses, "address", "left_anti")

    def totals(self, counts: Mapping[str, int]) -> dict[str, int]:
        """This run's outcome counts plus the confirmed ones of earlier runs (``failed``: this run's)."""
        return {
            "deleted": self.deleted + int(counts.get("deleted", 0)),
            "missing": self.missing + int(counts.get("missing", 0)),
            "failed": int(counts.get("failed", 0)),
        }

    def finish(self) -> None:
        """After a complete run: drop earlier runs' ``failed`` parts (superseded: every address in them
        was tried again by this run), then mark ``swept/`` complete."""
        fs, base = self.report.filesystem()
        for path in part_files(self.report, SWEPT):
            if is_failed_part(path) and not part_order(path)[0].startswith(self.tag):
                _delete(fs, path)
        with open_output(fs, f"{base}/{SWEPT}/{SUCCESS_MARKER}"):
            pass


def confirmed(
    spark: SparkSession,
    report: ReportDir,
    *,
    parallelism: int,
    say: Callable[[str], None] | None = None,
    read_only: bool = False,
) -> Resume:
    """Start a sweep run of ``report``'s mark: read what earlier runs confirmed (on the executors).

    ``swept/_SUCCESS`` is removed first (``swept/`` is being changed until this run completes), and
    parts without a readable footer are removed once read around (their addresses are not
    confirmed, so this run deletes them again and records them anew). ``read_only`` (a dry run)
    changes nothing in ``swept/``.
    """
    from pyspark.sql import functions as F

    fs, base = report.filesystem()
    if not read_only:
        _delete(fs, f"{base}/{SWEPT}/{SUCCESS_MARKER}", missing_ok=True)
    tag = run_tag()
    files = [p for p in part_files(report, SWEPT) if not is_failed_part(p)]
    if not files:
        return Resume(report, tag, None)
    unreadable: Accumulator[frozenset[str]] = spark.sparkContext.accumulator(frozenset(), _PathSet())
    rows = _parts_frame(spark, report, files, parallelism, unreadable)
    per_address = rows.groupBy("address").agg(F.min("outcome").alias("outcome"))  # deleted < missing
    counts = {r["outcome"]: int(r["count"]) for r in per_address.groupBy("outcome").count().collect()}
    bad = set(unreadable.value)
    for path in sorted(bad) if not read_only else ():
        _log.warning("removing unreadable sweep report part %s (its objects are swept again)", path)
        _delete(fs, path, missing_ok=True)
    good = [p for p in files if p not in bad]
    addresses = _parts_frame(spark, report, good, parallelism, None).select("address").distinct()
    deleted, missing = counts.get("deleted", 0), counts.get("missing", 0)
    resume = Resume(report, tag, addresses if good else None, deleted, missing)
    (say or _log.info)(
        f"{report.mark_id}: resuming: {resume.count} objects confirmed by earlier runs "
        f"({resume.deleted} deleted, {resume.missing} missing) are not swept again"
    )
    return resume


def deleted_addresses(spark: SparkSession, report: ReportDir, *, parallelism: int) -> DataFrame | None:
    """The addresses ``swept/`` confirms deleted (column ``address``), None when there are none.

    For the service's candidate set: what our own sweeps removed is not a candidate any more.
    """
    from pyspark.sql import functions as F

    files = [p for p in part_files(report, SWEPT) if not is_failed_part(p)]
    if not files:
        return None
    rows = _parts_frame(spark, report, files, parallelism, None)
    return rows.filter(F.col("outcome") == "deleted").select("address")


def _parts_frame(
    spark: SparkSession,
    report: ReportDir,
    files: list[str],
    parallelism: int,
    unreadable: Accumulator[frozenset[str]] | None,
) -> DataFrame:
    tasks = task_frame(spark, [(f,) for f in files], "path string", parallelism)
    return tasks.mapInArrow(
        on_executor(_ConfirmedReader(report, unreadable)), "address string, outcome string"
    )


class _ConfirmedReader:
    """Reads ``swept/`` parts on an executor: their confirmed rows; unreadable parts into ``unreadable``."""

    def __init__(self, report: ReportDir, unreadable: Accumulator[frozenset[str]] | None) -> None:
        self.report, self.unreadable = report, unreadable

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc

        fs, _ = self.report.filesystem()
        for batch in batches:
            for path in batch.column("path").to_pylist():
                table = read_part(fs, path)
                if table is None:
                    if self.unreadable is not None:
                        self.unreadable.add(frozenset([path]))
                    continue
                table = table.filter(pc.is_in(table.column("outcome"), pa.array(CONFIRMED)))
                yield from table.select(["address", "outcome"]).to_batches()


class _PathSet(AccumulatorParam[frozenset[str]]):
    """An accumulator of paths (a set: a retried task adds the same ones again)."""

    def zero(self, value: frozenset[str]) -> frozenset[str]:
        return frozenset()

    def addInPlace(self, a: frozenset[str], b: frozenset[str]) -> frozenset[str]:
        return a | b


#: tries of one report file's delete: a store can drop a connection mid-answer (Azurite did, in a
#: CI run), and the sweep it follows is done: failing the run for it would be a false alarm
DELETE_ATTEMPTS = 3


def _delete(fs: pafs.FileSystem, path: str, *, missing_ok: bool = False) -> None:
    """Delete one report file; a failure other than "not found" is tried again (after one, "not
    found" means an earlier try did delete it), then raised as a :class:`StorageError`."""
    from lakefs_gc.storage.filesystems import is_not_found

    for attempt in range(DELETE_ATTEMPTS):
        try:
            fs.delete_file(path)
            return
        except OSError as e:
            gone = is_not_found(e)  # FileNotFoundError included
            if gone and (missing_ok or attempt > 0):
                return
            if gone:
                raise StorageError(f"cannot delete report file {path}: not found") from None
            if attempt + 1 == DELETE_ATTEMPTS:
                raise StorageError(f"cannot delete report file {path}: {e}") from e
            _log.warning("deleting report file %s failed (%s); trying again", path, e)
            time.sleep(0.2 * 2**attempt)
