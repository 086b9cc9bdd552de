"""Mark and sweep reports on storage, written and read by Spark tasks through ``pyarrow.fs``.

Layout (lakeFS's, internals §2.5) under ``<ns>/_lakefs/retention/gc/unified/<mark_id>/``:

* ``deleted/``       parquet part files, first column ``address`` (then ``size``, ``last_modified``);
* ``deleted.text/``  the same addresses, one per line (what lakeFS's rclone backup recipe reads);
* ``swept/``         parquet ``address, outcome, error``: what the sweep did to each marked object,
  written in small parts as it goes, so that a killed sweep resumes (:mod:`.sweep_resume`);
* ``ranges/``, ``metaranges/``  ours: parquet ``range_id`` / ``metarange_id``, what the mark read, so
  that a revalidation at sweep time reads only what is new (ids are content-addressed);
* ``summary.json``   written last: its presence with ``success=true`` is what makes a mark sweepable.

Part files are named like Spark's (``part-<partition>-<tag>-c000...``) and written by the task that
holds the rows, so nothing is collected to the driver and a retried task overwrites its own file.
No Hadoop connector is involved: lakeFS's Scala job reads these with ``spark.read.parquet``.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakefs_gc.errors import StorageError
from lakefs_gc.gc.reports import MarkReportError, MarkSummary, UnknownMarkError, parse_summary, report_dir
from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for, is_not_found
from lakefs_gc.storage.locations import StorageLocation, parse_storage_namespace

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from pyspark.sql import DataFrame, SparkSession

    from lakefs_gc.settings import GcSettings

MARKED = "deleted"
MARKED_TEXT = "deleted.text"
SWEPT = "swept"
RANGES = "ranges"
METARANGES = "metaranges"
SUMMARY = "summary.json"
SUCCESS_MARKER = "_SUCCESS"

MARKED_SCHEMA = pa.schema(
    [("address", pa.string()), ("size", pa.int64()), ("last_modified", pa.timestamp("us", tz="UTC"))]
)
SWEPT_SCHEMA = pa.schema([("address", pa.string()), ("outcome", pa.string()), ("error", pa.string())])
PART_COUNTS_SCHEMA = "rows long, bytes long"
RANGES_SCHEMA = pa.schema([("range_id", pa.string())])
METARANGES_SCHEMA = pa.schema([("metarange_id", pa.string())])


@dataclass(frozen=True)
class ReportDir:
    """The report directory of one mark, and how to reach it."""

    namespace: StorageLocation
    mark_id: str
    options: StorageOptions

    @property
    def location(self) -> StorageLocation:
        return self.namespace.join(report_dir(self.mark_id))

    def child(self, name: str) -> StorageLocation:
        return self.namespace.join(report_dir(self.mark_id) + name)

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        fs, _ = filesystem_for(self.namespace, self.options)
        return fs, self.location.fs_path

    def __str__(self) -> str:
        return str(self.location)


def new_part_tag() -> str:
    """The job-unique middle of part file names (Spark uses a UUID there too)."""
    return str(uuid.uuid4())


def part_name(partition: int, tag: str, suffix: str) -> str:
    return f"part-{partition:05d}-{tag}-c000{suffix}"


# ---- writing --------------------------------------------------------------------------------


def write_marked(df: DataFrame, report: ReportDir) -> tuple[int, int]:
    """Write ``df`` (MARKED_SCHEMA) as ``deleted/`` and ``deleted.text/``; return (rows, bytes)."""
    tag = new_part_tag()
    writer = _MarkedPartWriter(report, tag)
    counts = df.select("address", "size", "last_modified").mapInArrow(writer, PART_COUNTS_SCHEMA).collect()
    rows = sum(int(r["rows"]) for r in counts)
    size = sum(int(r["bytes"]) for r in counts)
    fs, base = report.filesystem()
    if rows == 0:  # Spark leaves one schema-only part; readers that infer a schema need it
        _write_parquet(fs, f"{base}/{MARKED}/{part_name(0, tag, '.snappy.parquet')}", MARKED_SCHEMA, [])
        _write_bytes(fs, f"{base}/{MARKED_TEXT}/{part_name(0, tag, '.txt')}", b"")
    for name in (MARKED, MARKED_TEXT):
        _write_bytes(fs, f"{base}/{name}/{SUCCESS_MARKER}", b"")
    return rows, size


class _MarkedPartWriter:
    """The per-partition body of :func:`write_marked` (pickled to the executors)."""

    def __init__(self, report: ReportDir, tag: str) -> None:
        self.report = report
        self.tag = tag

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, base = self.report.filesystem()
        partition = _partition_id()
        parquet_path = f"{base}/{MARKED}/{part_name(partition, self.tag, '.snappy.parquet')}"
        text_path = f"{base}/{MARKED_TEXT}/{part_name(partition, self.tag, '.txt')}"
        rows = size = 0
        parquet: pq.ParquetWriter | None = None
        parquet_out: Any = None
        text: Any = None
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                if parquet is None:
                    parquet_out = open_report_output(fs, parquet_path)
                    parquet = pq.ParquetWriter(parquet_out, MARKED_SCHEMA, compression="snappy")
                    text = open_report_output(fs, text_path)
                table = pa.Table.from_batches([batch]).cast(MARKED_SCHEMA)
                parquet.write_table(table)
                addresses = table.column("address").to_pylist()
                text.write(("\n".join(addresses) + "\n").encode("utf-8"))
                rows += batch.num_rows
                size += int(pc.sum(table.column("size")).as_py() or 0)
        finally:
            if parquet is not None:
                parquet.close()
            if parquet_out is not None:  # ParquetWriter leaves a stream it was given open; on S3 and
                parquet_out.close()  # Azure the upload completes (or fails, loudly) only on close
            if text is not None:
                text.close()
        yield pa.RecordBatch.from_pydict({"rows": [rows], "bytes": [size]})


def write_ranges(range_ids: DataFrame, report: ReportDir) -> int:
    """Write the distinct range ids a mark read (column ``id``) as ``ranges/``; return how many.

    Written by the tasks that hold them (a repository has up to millions of ranges); ``_SUCCESS``
    last, so that a partial record is never taken for a complete one.
    """
    tag = new_part_tag()
    writer = _IdPartWriter(report, RANGES, RANGES_SCHEMA, tag)
    counts = range_ids.select("id").mapInArrow(writer, "rows long").collect()
    rows = sum(int(r["rows"]) for r in counts)
    fs, base = report.filesystem()
    if rows == 0:
        _write_parquet(fs, f"{base}/{RANGES}/{part_name(0, tag, '.snappy.parquet')}", RANGES_SCHEMA, [])
    _write_bytes(fs, f"{base}/{RANGES}/{SUCCESS_MARKER}", b"")
    return rows


def write_metaranges(metarange_ids: list[str], report: ReportDir) -> None:
    """Write the metarange ids a mark read as ``metaranges/`` (one per active commit at most:
    the driver holds them anyway, having read the commits CSV). Written after ``ranges/``:
    a metarange is recorded only once all of its ranges are."""
    fs, base = report.filesystem()
    batch = pa.RecordBatch.from_pydict({"metarange_id": metarange_ids}, schema=METARANGES_SCHEMA)
    path = f"{base}/{METARANGES}/{part_name(0, new_part_tag(), '.snappy.parquet')}"
    _write_parquet(fs, path, METARANGES_SCHEMA, [batch])
    _write_bytes(fs, f"{base}/{METARANGES}/{SUCCESS_MARKER}", b"")


class _IdPartWriter:
    """Writes one partition's ids as one parquet part of ``report/name`` (runs on an executor)."""

    def __init__(self, report: ReportDir, name: str, schema: pa.Schema, tag: str) -> None:
        self.report, self.name, self.schema, self.tag = report, name, schema, tag

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, base = self.report.filesystem()
        path = f"{base}/{self.name}/{part_name(_partition_id(), self.tag, '.snappy.parquet')}"
        rows = 0
        parquet: pq.ParquetWriter | None = None
        out: Any = None
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                if parquet is None:
                    out = open_report_output(fs, path)
                    parquet = pq.ParquetWriter(out, self.schema, compression="snappy")
                parquet.write_batch(pa.RecordBatch.from_arrays([batch.column(0)], schema=self.schema))
                rows += batch.num_rows
        finally:
            if parquet is not None:
                parquet.close()
            if out is not None:
                out.close()
        yield pa.RecordBatch.from_pydict({"rows": [rows]})


def finish_swept(report: ReportDir) -> None:
    fs, base = report.filesystem()
    _write_bytes(fs, f"{base}/{SWEPT}/{SUCCESS_MARKER}", b"")


def write_summary(report: ReportDir, summary: MarkSummary) -> None:
    fs, base = report.filesystem()
    _write_bytes(fs, f"{base}/{SUMMARY}", summary.to_json().encode("utf-8"))


def rewrite_summary(report: ReportDir, body: dict[str, Any]) -> None:
    """Replace ``summary.json`` with ``body`` (key order kept: lakeFS's keys stay first)."""
    fs, base = report.filesystem()
    _write_bytes(fs, f"{base}/{SUMMARY}", json.dumps(body, separators=(",", ":")).encode("utf-8"))


# ---- reading --------------------------------------------------------------------------------


def read_summary(report: ReportDir) -> dict[str, Any]:
    """The mark's summary; refuses a missing mark and a failed one, like lakeFS."""
    fs, base = report.filesystem()
    try:
        with fs.open_input_stream(f"{base}/{SUMMARY}") as stream:
            text = stream.read().decode("utf-8")
    except OSError as e:
        if is_not_found(e):
            raise UnknownMarkError(
                f"Mark ID ({report.mark_id}) does not exist: no {report.child(SUMMARY)}"
            ) from e
        raise StorageError(f"cannot read {report.child(SUMMARY)}: {e}") from e
    except UnicodeDecodeError as e:
        raise StorageError(f"cannot read {report.child(SUMMARY)}: {e}") from e
    return parse_summary(text, str(report.child(SUMMARY)))


def part_files(report: ReportDir, name: str) -> list[str]:
    """Data files of a report sub-directory (``_``/``.``-prefixed names are markers, not data)."""
    import pyarrow.fs as pafs

    fs, base = report.filesystem()
    selector = pafs.FileSelector(f"{base}/{name}", allow_not_found=True, recursive=False)
    try:
        infos = fs.get_file_info(selector)
    except OSError as e:
        raise StorageError(f"cannot list {report.child(name)}: {e}") from e
    return sorted(
        i.path for i in infos if i.type == pafs.FileType.File and not i.base_name.startswith(("_", "."))
    )


def marked_frame(spark: SparkSession, report: ReportDir, *, parallelism: int) -> DataFrame:
    """The marked addresses (``deleted/``, column ``address``), read on the executors."""
    files = part_files(report, MARKED)
    tasks = spark.createDataFrame([(f,) for f in files], "path string")
    tasks = tasks.repartition(max(1, min(parallelism, len(files))))
    return tasks.mapInArrow(_MarkedPartReader(report), "address string")


class _MarkedPartReader:
    def __init__(self, report: ReportDir) -> None:
        self.report = report

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, _ = self.report.filesystem()
        for batch in batches:
            for path in batch.column("path").to_pylist():
                yield from _read_address_column(fs, path)


def _read_address_column(fs: pafs.FileSystem, path: str) -> Iterator[pa.RecordBatch]:
    try:
        with fs.open_input_file(path) as f:
            parquet = pq.ParquetFile(f)
            names = parquet.schema_arrow.names
            if not names or names[0] != "address":
                raise MarkReportError(f"marked file {path}: first column is not 'address' (columns {names})")
            for batch in parquet.iter_batches(columns=["address"], batch_size=65_536):
                yield pa.RecordBatch.from_arrays([batch.column(0).cast(pa.string())], names=["address"])
    except MarkReportError:
        raise
    except (OSError, pa.ArrowException) as e:
        raise StorageError(f"cannot read marked file {path}: {e}") from e


def recorded_ranges_frame(spark: SparkSession, report: ReportDir, *, parallelism: int) -> DataFrame | None:
    """The range ids the mark recorded in ``ranges/`` (column ``id``), read on the executors, or
    ``None`` when it recorded none (a mark of lakeFS's Scala job, or of an older lakefs-gc): then
    every range must be read again. A record that exists but cannot be read raises."""
    if not _is_complete(report, RANGES):
        return None
    files = part_files(report, RANGES)
    if not files:
        raise MarkReportError(f"{report.child(RANGES)} is marked complete but holds no part file")
    tasks = spark.createDataFrame([(f,) for f in files], "path string")
    tasks = tasks.repartition(max(1, min(parallelism, len(files))))
    return tasks.mapInArrow(_IdPartReader(report, "range_id"), "id string")


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
    import pyarrow.fs as pafs

    fs, base = report.filesystem()
    try:
        info = fs.get_file_info(f"{base}/{name}/{SUCCESS_MARKER}")
    except OSError as e:
        raise StorageError(f"cannot read {report.child(name)}: {e}") from e
    return bool(info.type == pafs.FileType.File)


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


def read_report_table(settings: GcSettings, storage_namespace: str, mark_id: str, name: str) -> pa.Table:
    """A whole report sub-directory (``deleted`` or ``swept``) on the driver — for small reports,
    demos and tests; jobs read reports with :func:`marked_frame`. ``swept`` is read by the rule
    of :mod:`~lakefs_gc.spark.sweep_resume`: one row per address, its confirmed or newest outcome."""
    namespace = parse_storage_namespace(storage_namespace, local_root=settings.storage.local_root)
    report = ReportDir(namespace, mark_id, settings.storage)
    fs, _ = report.filesystem()
    if name == SWEPT:
        from lakefs_gc.spark.sweep_resume import effective_swept

        return effective_swept(fs, part_files(report, name))
    tables = []
    for path in part_files(report, name):
        with fs.open_input_file(path) as f:
            tables.append(pq.read_table(f))
    if not tables:
        return (SWEPT_SCHEMA if name == SWEPT else MARKED_SCHEMA).empty_table()
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


# ---- plumbing -------------------------------------------------------------------------------


def _partition_id() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


def open_report_output(fs: pafs.FileSystem, path: str) -> Any:
    import pyarrow.fs as pafs

    if isinstance(fs, pafs.LocalFileSystem):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        return fs.open_output_stream(path)
    except OSError as e:
        raise StorageError(f"cannot write report file {path}: {e}") from e


def write_whole(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Write ``path`` so that readers see all of it or nothing: an object store's PUT is atomic, a
    local file is written beside (a hidden temp name) and renamed, so a kill never leaves a torn
    file that a reader would take for a complete one."""
    import pyarrow.fs as pafs

    local = isinstance(fs, pafs.LocalFileSystem)
    directory, name = path.rsplit("/", 1)
    target = f"{directory}/.{name}.tmp" if local else path
    try:
        with open_report_output(fs, target) as out:
            out.write(data)
        if local:
            fs.move(target, path)
    except OSError as e:
        raise StorageError(f"cannot write {path}: {e}") from e


def _write_bytes(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    try:
        with open_report_output(fs, path) as out:
            out.write(data)
    except OSError as e:
        raise StorageError(f"cannot write report file {path}: {e}") from e


def _write_parquet(fs: pafs.FileSystem, path: str, schema: pa.Schema, batches: list[pa.RecordBatch]) -> None:
    try:
        with (
            open_report_output(fs, path) as out,
            pq.ParquetWriter(out, schema, compression="snappy") as writer,
        ):
            for batch in batches:
                writer.write_batch(batch)
    except (OSError, pa.ArrowException) as e:
        raise StorageError(f"cannot write report file {path}: {e}") from e
