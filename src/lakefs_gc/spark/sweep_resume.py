"""A sweep that can be killed at any moment and started again: ``swept/`` as a log of confirmed batches.

The sweep's tasks write ``swept/`` as many small parquet parts, each written whole once its rows
are known (:func:`write_part`: one upload on S3/Azure, a rename on local disks), after every
:data:`~lakefs_gc.spark.sweep.FLUSH_OUTCOMES` outcomes or :data:`~lakefs_gc.spark.sweep.FLUSH_INTERVAL_S`
seconds. A part holds either confirmed outcomes (``deleted``/``missing``) or only ``failed`` ones
(``...-cNNN-failed.snappy.parquet``). A kill (``kill -9`` of the driver, a lost executor) loses at
most the outcomes not yet flushed: their objects were maybe deleted, not confirmed, and the next
run deletes them again (deleting is idempotent: S3 answers ``deleted`` again, Azure and local
disks ``missing``).

A sweep of a mark that already has ``swept/`` parts (:func:`confirmed`) deletes only what no
readable part confirms; ``failed`` outcomes are not confirmations, those objects are tried again.
Its summary counts are the confirmed ones from before plus this run's; ``failed`` is this run's
alone. When it completes it removes the ``failed`` parts of earlier runs (each of their addresses
was tried again in this run) and writes ``_SUCCESS``, so that ``swept/`` then holds every swept
address exactly once.

The reading rule, for a ``swept/`` in any state (after a kill, or written by an older lakefs-gc
with one mixed part per task): parts that cannot be read (no parquet footer: a write cut short)
are ignored; an address's outcome is its confirmed one if any part confirms it (``deleted``
before ``missing``), else its newest ``failed`` one (run tags sort by start time).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.accumulators import AccumulatorParam

from lakefs_gc.errors import StorageError
from lakefs_gc.spark.reports import (
    SUCCESS_MARKER,
    SWEPT,
    SWEPT_SCHEMA,
    ReportDir,
    open_report_output,
    part_files,
    write_whole,
)

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from pyspark import Accumulator
    from pyspark.sql import DataFrame, SparkSession

_log = logging.getLogger(__name__)

CONFIRMED = ("deleted", "missing")
FAILED_SUFFIX = "-failed.snappy.parquet"
_PART = re.compile(r"part-(?P<partition>\d+)-(?P<tag>.+)-c(?P<seq>\d+)(?:-failed)?\.snappy\.parquet$")


def run_tag(now: datetime | None = None) -> str:
    """A sweep run's part-name tag: starts with the UTC start time, so that tags sort by run."""
    when = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{when}-{uuid.uuid4().hex[:12]}"


def swept_part_path(base: str, partition: int, tag: str, seq: int, *, failed: bool) -> str:
    suffix = FAILED_SUFFIX if failed else ".snappy.parquet"
    return f"{base}/{SWEPT}/part-{partition:05d}-{tag}-c{seq:03d}{suffix}"


def is_failed_part(path: str) -> bool:
    return path.endswith(FAILED_SUFFIX)


def part_order(path: str) -> tuple[str, int, str]:
    """Sort key of a part: its run tag, then its number within the task (names of other writers last)."""
    name = path.rsplit("/", 1)[-1]
    match = _PART.match(name)
    return (match["tag"], int(match["seq"]), name) if match else ("~", 0, name)


def write_part(fs: pafs.FileSystem, path: str, rows: Mapping[str, list[Any]]) -> None:
    """Write one ``swept/`` part whole: encoded in memory, then one upload (S3 and Azure show an object
    only once its upload completes) or, on a local disk, a hidden temporary file renamed into place.
    A kill therefore never leaves a visible part without its footer."""

    buffer = pa.BufferOutputStream()
    pq.write_table(pa.table(dict(rows), schema=SWEPT_SCHEMA), buffer, compression="snappy")
    write_whole(fs, path, buffer.getvalue().to_pybytes())


def read_part(fs: pafs.FileSystem, path: str) -> pa.Table | None:
    """A part's rows, or ``None`` when it is not a readable parquet file (a write cut short).
    A storage error (the part may well be fine) raises: never taken for "nothing confirmed"."""
    try:
        with fs.open_input_file(path) as f:
            return pq.read_table(f, columns=list(SWEPT_SCHEMA.names))
    except OSError as e:
        raise StorageError(f"cannot read sweep report part {path}: {e}") from e
    except pa.ArrowException as e:  # ArrowInvalid: no footer, not parquet
        _log.warning("ignoring unreadable sweep report part %s: %s", path, e)
        return None


# ---- resuming a sweep -------------------------------------------------------------------------


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
        with open_report_output(fs, f"{base}/{SWEPT}/{SUCCESS_MARKER}"):
            pass


def confirmed(
    spark: SparkSession, report: ReportDir, *, parallelism: int, say: Callable[[str], None] | None = None
) -> Resume:
    """Start a sweep run of ``report``'s mark: read what earlier runs confirmed (on the executors).

    ``swept/_SUCCESS`` is removed first (``swept/`` is being changed until this run completes), and
    parts without a readable footer are removed once read around (their addresses are not
    confirmed, so this run deletes them again and records them anew).
    """
    from pyspark.sql import functions as F

    fs, base = report.filesystem()
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
    for path in sorted(bad):
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
    tasks = spark.createDataFrame([(f,) for f in files], "path string")
    tasks = tasks.repartition(max(1, min(parallelism, len(files))))
    return tasks.mapInArrow(_ConfirmedReader(report, unreadable), "address string, outcome string")


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


def _delete(fs: pafs.FileSystem, path: str, *, missing_ok: bool = False) -> None:
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        if not missing_ok:
            raise StorageError(f"cannot delete report file {path}: not found") from None
    except OSError as e:
        from lakefs_gc.storage.filesystems import is_not_found

        if not (missing_ok and is_not_found(e)):
            raise StorageError(f"cannot delete report file {path}: {e}") from e


# ---- reading the outcome of a sweep ----------------------------------------------------------------


def effective_swept(fs: pafs.FileSystem, paths: list[str]) -> pa.Table:
    """``swept/`` by the reading rule (module docstring): one row per address, on the driver."""
    best: dict[str, tuple[str, str | None]] = {}
    for path in sorted(paths, key=part_order):
        table = read_part(fs, path)
        if table is None:
            continue
        for address, outcome, error in zip(
            *(table.column(c).to_pylist() for c in SWEPT_SCHEMA.names), strict=True
        ):
            seen = best.get(address)
            # newer replaces older unless the older is confirmed; deleted replaces missing
            if seen is None or seen[0] not in CONFIRMED or (outcome == "deleted" and seen[0] == "missing"):
                best[address] = (outcome, error)
    return pa.table(
        {
            "address": list(best),
            "outcome": [o for o, _ in best.values()],
            "error": [e for _, e in best.values()],
        },
        schema=SWEPT_SCHEMA,
    )
