"""Reading a mark's reports back (layout: :mod:`.layout`): the summary on the driver, typed; the
marked addresses and the recorded range ids on the executors, as DataFrames.

Every reader fails closed: a missing mark, a failed one, a summary of another mark, a marked file
whose first column is not ``address``, a record marked complete without parts, a storage error;
each raises a :class:`~lakefs_gc.errors.GcError` naming the file, never "nothing marked".
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from lakefs_gc.errors import StorageError
from lakefs_gc.gc.reports import (
    MarkReportError,
    StoredSummary,
    UnknownMarkError,
    check_mark_id,
    parse_summary,
)
from lakefs_gc.spark.report.layout import (
    MARKED,
    MARKED_SCHEMA,
    METARANGES,
    RANGES,
    SUCCESS_MARKER,
    SUMMARY,
    SWEPT,
    ReportDir,
    part_files,
)
from lakefs_gc.spark.report.swept import effective_swept
from lakefs_gc.spark.runtime.failures import on_executor
from lakefs_gc.spark.runtime.frames import task_frame
from lakefs_gc.storage.filesystems import file_exists, is_not_found
from lakefs_gc.storage.reads import read_whole

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from pyspark.sql import DataFrame, SparkSession


def read_summary(report: ReportDir) -> StoredSummary:
    """The mark's summary; refuses a missing mark, a failed one (like lakeFS) and one that names
    another mark."""
    fs, base = report.filesystem()
    try:
        text = read_whole(fs, f"{base}/{SUMMARY}").decode("utf-8")
    except OSError as e:
        if is_not_found(e):
            raise UnknownMarkError(
                f"Mark ID ({report.mark_id}) does not exist: no {report.child(SUMMARY)}"
            ) from e
        raise StorageError(f"cannot read {report.child(SUMMARY)}: {e}") from e
    except UnicodeDecodeError as e:
        raise StorageError(f"cannot read {report.child(SUMMARY)}: {e}") from e
    summary = parse_summary(text, str(report.child(SUMMARY)))
    check_mark_id(summary, report.mark_id, str(report))
    return summary


def marked_frame(
    spark: SparkSession, report: ReportDir, *, parallelism: int, files: list[str] | None = None
) -> DataFrame:
    """The marked addresses (``deleted/``, column ``address``), read on the executors. ``files``:
    the parts of ``deleted/`` when the caller listed them already (one listing, not two)."""
    files = part_files(report, MARKED) if files is None else files
    tasks = task_frame(spark, [(f,) for f in files], "path string", parallelism)
    return tasks.mapInArrow(on_executor(_MarkedPartReader(report)), "address string")


class _MarkedPartReader:
    def __init__(self, report: ReportDir) -> None:
        self.report = report

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, _ = self.report.filesystem()
        for batch in batches:
            for path in batch.column("path").to_pylist():
                yield from read_address_column(fs, path)


def read_address_column(
    fs: pafs.FileSystem, path: str, *, slice_of: tuple[int, int] = (0, 1)
) -> Iterator[pa.RecordBatch]:
    """The ``address`` column of marked file ``path``; with ``slice_of=(k, n)`` only its slice
    ``k`` of ``n``: rows ``[k*R//n, (k+1)*R//n)`` of its ``R`` rows, so that ``n`` readers of the
    same file read each row once, and a reader run again reads the same rows (they depend only on
    ``R``, from the file's footer). Only the row groups that hold the slice are read."""
    k, n = slice_of
    try:
        with fs.open_input_file(path) as f:
            parquet = pq.ParquetFile(f)
            names = parquet.schema_arrow.names
            if not names or names[0] != "address":
                raise MarkReportError(f"marked file {path}: first column is not 'address' (columns {names})")
            yield from _rows_of_slice(parquet, k, n)
    except MarkReportError:
        raise
    except (OSError, pa.ArrowException) as e:
        raise StorageError(f"cannot read marked file {path}: {e}") from e


def _rows_of_slice(parquet: pq.ParquetFile, k: int, n: int) -> Iterator[pa.RecordBatch]:
    rows = parquet.metadata.num_rows
    low, high = k * rows // n, (k + 1) * rows // n
    groups: list[int] = []  # the row groups that overlap [low, high)
    first: int | None = None  # the first of them's first row
    start = 0
    for i in range(parquet.metadata.num_row_groups):
        end = start + parquet.metadata.row_group(i).num_rows
        if start < high and end > low:
            groups.append(i)
            first = start if first is None else first
        start = end
    if first is None:  # an empty file, or an empty slice
        return
    position = first
    for batch in parquet.iter_batches(columns=["address"], batch_size=65_536, row_groups=groups):
        lo, hi = max(low - position, 0), min(high - position, batch.num_rows)
        position += batch.num_rows
        if hi > lo:
            column = batch.column(0).slice(lo, hi - lo)
            yield pa.RecordBatch.from_arrays([column.cast(pa.string())], names=["address"])


def recorded_ranges_frame(spark: SparkSession, report: ReportDir, *, parallelism: int) -> DataFrame | None:
    """The range ids the mark recorded in ``ranges/`` (column ``id``), read on the executors, or
    ``None`` when it recorded none (a mark of lakeFS's Scala job, or of an older lakefs-gc): then
    every range must be read again. A record that exists but cannot be read raises."""
    if not _is_complete(report, RANGES):
        return None
    files = part_files(report, RANGES)
    if not files:
        raise MarkReportError(f"{report.child(RANGES)} is marked complete but holds no part file")
    tasks = task_frame(spark, [(f,) for f in files], "path string", parallelism)
    return tasks.mapInArrow(on_executor(_IdPartReader(report, "range_id")), "id string")


def recorded_metaranges(report: ReportDir) -> frozenset[str] | None:
    """The metarange ids the mark recorded in ``metaranges/`` (on the driver: one per active
    commit at most), or ``None`` when it recorded none."""
    if not _is_complete(report, METARANGES):
        return None
    fs, _ = report.filesystem()
    ids: set[str] = set()
    for path in part_files(report, METARANGES):
        for batch in _read_id_column(fs, path, "metarange_id"):
            ids.update(batch.column(0).to_pylist())
    return frozenset(ids)


def _is_complete(report: ReportDir, name: str) -> bool:
    fs, base = report.filesystem()
    try:
        return file_exists(fs, f"{base}/{name}/{SUCCESS_MARKER}")
    except OSError as e:
        raise StorageError(f"cannot read {report.child(name)}: {e}") from e


class _IdPartReader:
    def __init__(self, report: ReportDir, column: str) -> None:
        self.report, self.column = report, column

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, _ = self.report.filesystem()
        for batch in batches:
            for path in batch.column("path").to_pylist():
                yield from _read_id_column(fs, path, self.column)


def _read_id_column(fs: pafs.FileSystem, path: str, column: str) -> Iterator[pa.RecordBatch]:
    try:
        with fs.open_input_file(path) as f:
            parquet = pq.ParquetFile(f)
            if column not in parquet.schema_arrow.names:
                raise MarkReportError(f"{path}: no column {column!r} (columns {parquet.schema_arrow.names})")
            for batch in parquet.iter_batches(columns=[column], batch_size=65_536):
                yield pa.RecordBatch.from_arrays([batch.column(0).cast(pa.string())], names=["id"])
    except MarkReportError:
        raise
    except (OSError, pa.ArrowException) as e:
        raise StorageError(f"cannot read {path}: {e}") from e


def read_report_table(report: ReportDir, name: str) -> pa.Table:
    """A whole report sub-directory (``deleted``, ``swept``, ``ranges``...) on the driver: for small
    reports, demos and tests; jobs read reports with :func:`marked_frame`. ``swept`` is read by the
    rule of :mod:`.swept`: one row per address, its confirmed or newest outcome."""
    fs, _ = report.filesystem()
    if name == SWEPT:
        return effective_swept(fs, part_files(report, name))
    tables = []
    for path in part_files(report, name):
        with fs.open_input_file(path) as f:
            tables.append(pq.read_table(f))
    if not tables:
        return MARKED_SCHEMA.empty_table()
    return pa.concat_tables(tables, promote_options="default")


def address_chunks(batches: Iterator[pa.RecordBatch], size: int) -> Iterator[list[str]]:
    """The ``address`` column of a task's batches regrouped into lists of ``size`` (the last
    shorter): one bulk request each for the sweep, one copy round for backup and restore."""
    pending: list[str] = []
    for batch in batches:
        pending.extend(batch.column("address").to_pylist())
        while len(pending) >= size:
            yield pending[:size]
            pending = pending[size:]
    if pending:
        yield pending
