"""Writing a mark's reports from the Spark tasks that hold the rows (layout: :mod:`.layout`).

``deleted/`` and ``deleted.text/`` are written by the tasks of the mark's last job, one part per
task, and ``ranges/`` likewise; each sub-directory gets its ``_SUCCESS`` marker once every part is
written, and ``summary.json`` comes last of all (it is what makes a mark sweepable).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakefs_gc.gc.reports import MarkSummary, StoredSummary
from lakefs_gc.spark.report.layout import (
    MARKED,
    MARKED_SCHEMA,
    MARKED_TEXT,
    METARANGES,
    METARANGES_SCHEMA,
    PART_COUNTS_SCHEMA,
    RANGES,
    RANGES_SCHEMA,
    SUCCESS_MARKER,
    SUMMARY,
    ReportDir,
    new_part_tag,
    part_name,
    partition_id,
)
from lakefs_gc.spark.runtime.failures import on_executor
from lakefs_gc.storage.writes import open_output, write_bytes, write_parquet, write_whole

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def write_marked(df: DataFrame, report: ReportDir) -> tuple[int, int]:
    """Write ``df`` (MARKED_SCHEMA) as ``deleted/`` and ``deleted.text/``; return (rows, bytes)."""
    tag = new_part_tag()
    writer = _MarkedPartWriter(report, tag)
    counts = (
        df.select("address", "size", "last_modified")
        .mapInArrow(on_executor(writer), PART_COUNTS_SCHEMA)
        .collect()
    )
    rows = sum(int(r["rows"]) for r in counts)
    size = sum(int(r["bytes"]) for r in counts)
    fs, base = report.filesystem()
    if rows == 0:  # Spark leaves one schema-only part; readers that infer a schema need it
        write_parquet(fs, f"{base}/{MARKED}/{part_name(0, tag, '.snappy.parquet')}", MARKED_SCHEMA, [])
        write_bytes(fs, f"{base}/{MARKED_TEXT}/{part_name(0, tag, '.txt')}", b"")
    for name in (MARKED, MARKED_TEXT):
        write_bytes(fs, f"{base}/{name}/{SUCCESS_MARKER}", b"")
    return rows, size


class _MarkedPartWriter:
    """The per-partition body of :func:`write_marked` (pickled to the executors)."""

    def __init__(self, report: ReportDir, tag: str) -> None:
        self.report = report
        self.tag = tag

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, base = self.report.filesystem()
        partition = partition_id()
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
                    parquet_out = open_output(fs, parquet_path)
                    parquet = pq.ParquetWriter(parquet_out, MARKED_SCHEMA, compression="snappy")
                    text = open_output(fs, text_path)
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
    counts = range_ids.select("id").mapInArrow(on_executor(writer), "rows long").collect()
    rows = sum(int(r["rows"]) for r in counts)
    fs, base = report.filesystem()
    if rows == 0:
        write_parquet(fs, f"{base}/{RANGES}/{part_name(0, tag, '.snappy.parquet')}", RANGES_SCHEMA, [])
    write_bytes(fs, f"{base}/{RANGES}/{SUCCESS_MARKER}", b"")
    return rows


#: rows per batch (and row group) of ``metaranges/``: the Parquet writer leaves the process native
#: memory that grows with the largest batch it was handed, which the C library does not give
#: back. The 10,745 ids of lakeFS's bottom line at once left the driver 13 MiB larger; in batches
#: of 1,024, as much as the 500 ids of a 1M-object repository do. Measured in bench/README.md,
#: "20M's history: the commit graph in one dict, the metaranges written in batches (2026-11-30)".
METARANGE_BATCH_ROWS = 1024


def write_metaranges(metarange_ids: list[str], report: ReportDir) -> None:
    """Write the metarange ids a mark read as ``metaranges/`` (one per active commit at most:
    the driver holds them anyway, having read the commits CSV). Written after ``ranges/``:
    a metarange is recorded only once all of its ranges are."""
    fs, base = report.filesystem()
    rows = METARANGE_BATCH_ROWS
    batches = [
        pa.RecordBatch.from_pydict({"metarange_id": metarange_ids[i : i + rows]}, schema=METARANGES_SCHEMA)
        for i in range(0, len(metarange_ids), rows)
    ]
    path = f"{base}/{METARANGES}/{part_name(0, new_part_tag(), '.snappy.parquet')}"
    write_parquet(fs, path, METARANGES_SCHEMA, batches)
    write_bytes(fs, f"{base}/{METARANGES}/{SUCCESS_MARKER}", b"")


class _IdPartWriter:
    """Writes one partition's ids as one parquet part of ``report/name`` (runs on an executor)."""

    def __init__(self, report: ReportDir, name: str, schema: pa.Schema, tag: str) -> None:
        self.report, self.name, self.schema, self.tag = report, name, schema, tag

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, base = self.report.filesystem()
        path = f"{base}/{self.name}/{part_name(partition_id(), self.tag, '.snappy.parquet')}"
        rows = 0
        parquet: pq.ParquetWriter | None = None
        out: Any = None
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                if parquet is None:
                    out = open_output(fs, path)
                    parquet = pq.ParquetWriter(out, self.schema, compression="snappy")
                parquet.write_batch(pa.RecordBatch.from_arrays([batch.column(0)], schema=self.schema))
                rows += batch.num_rows
        finally:
            if parquet is not None:
                parquet.close()
            if out is not None:
                out.close()
        yield pa.RecordBatch.from_pydict({"rows": [rows]})


def write_summary(report: ReportDir, summary: MarkSummary) -> None:
    fs, base = report.filesystem()
    write_whole(fs, f"{base}/{SUMMARY}", summary.to_json().encode("utf-8"))


def rewrite_summary(report: ReportDir, summary: StoredSummary) -> None:
    """Replace ``summary.json`` with ``summary`` (key order kept: lakeFS's keys stay first)."""
    fs, base = report.filesystem()
    write_whole(fs, f"{base}/{SUMMARY}", summary.to_json().encode("utf-8"))
