"""One data file's candidates as one parquet part of the candidate table (executor side).

The inventory source writes each data file's candidates itself, straight from the Arrow batches
it routed, and hands Spark only a status row. Passing every candidate through Spark instead
(Arrow → JVM rows → Arrow for the sink) cost 15 of the ingest's 25 CPU seconds per 10M rows
(bench/inventory.py). A part's name is unique per attempt; the ingest record lists the parts it
accepted, so a part from a retried or replayed task is never read twice.
"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lakefs_gc.inventory.mapping import CONSTANT_COLUMNS, ROUTED_SCHEMA
from lakefs_gc.storage.writes import open_output


def part_path(parts_dir: str, seq: int, file_index: int) -> str:
    """Where an attempt writes the candidates of data file ``file_index`` of delivery ``seq``."""
    return f"{parts_dir}/{seq:08d}/part-{file_index:05d}-{uuid.uuid4().hex[:12]}.parquet"


class CandidatePartWriter:
    """Gathers routed candidate batches into large row groups and counts them per repository.

    Row groups of about :data:`ROW_GROUP_ROWS` rows: a parquet write per small batch costs twice
    the time and makes a file of tiny row groups. The constant columns arrive as dictionaries
    (:data:`~lakefs_gc.inventory.mapping.ROUTED_SCHEMA`) and are stored as they are; the others
    (unique per row) get none. No column statistics: parts are only ever read whole, and
    min/max of every string cost about 14 % of the write. Zstandard at level 1 costs about 15 %
    more CPU than Snappy and makes parts 42 % smaller (less to store and to read back from an
    object store); together, a part costs the CPU a Snappy part with statistics did
    (measured in bench/README.md, section Issue 17). The ETags (32 hex digits each) are stored
    with their lengths apart from their bytes (``DELTA_LENGTH_BYTE_ARRAY``): Zstandard then
    compresses the digits faster, 18 % off the part's write (bench/README.md, "`inventory.py`:
    the ETags' encoding (2026-12-01)").
    """

    ROW_GROUP_ROWS = 128 * 1024
    DELTA_LENGTH_COLUMNS = ("etag",)

    def __init__(self, fs: pafs.FileSystem, path: str) -> None:
        self.fs, self.path = fs, path
        self.counts: dict[str, int] = {}
        self._pending: list[pa.Table] = []
        self._buffered = 0
        self._stream: Any = None
        self._writer: pq.ParquetWriter | None = None

    def write(self, candidates: pa.Table) -> None:
        if candidates.num_rows == 0:
            return
        candidates = _routed(candidates)
        for chunk in candidates.column("repository").chunks:
            for row in pc.value_counts(chunk).to_pylist():  # a routed chunk: one value, no hashing
                self.counts[row["values"]] = self.counts.get(row["values"], 0) + row["counts"]
        self._pending.append(candidates)
        self._buffered += candidates.num_rows
        if self._buffered >= self.ROW_GROUP_ROWS:
            self._flush()

    @property
    def rows(self) -> int:
        return sum(self.counts.values())

    def close(self) -> str | None:
        """Finish the part; its path, or ``None`` when the file gave no candidates (no part)."""
        self._flush()
        if self._writer is None:
            return None
        self._writer.close()
        self._stream.close()  # ParquetWriter leaves a stream it was given open (S3: not uploaded)
        return self.path

    def abort(self) -> None:
        """Drop whatever was written (the file was rejected)."""
        try:
            if self._writer is not None:
                self._writer.close()
                self._stream.close()
            self.fs.delete_file(self.path)
        except OSError:
            pass  # nothing written, or already gone; the ingest record never lists it anyway

    def _flush(self) -> None:
        if not self._pending:
            return
        if self._writer is None:
            self._stream = open_output(self.fs, self.path)
            self._writer = pq.ParquetWriter(
                self._stream,
                ROUTED_SCHEMA,
                store_schema=False,  # read back as CANDIDATE_SCHEMA's plain columns, not dictionaries
                use_dictionary=list(CONSTANT_COLUMNS),
                write_statistics=False,
                compression="zstd",
                compression_level=1,
                column_encoding=dict.fromkeys(self.DELTA_LENGTH_COLUMNS, "DELTA_LENGTH_BYTE_ARRAY"),
            )
        # one dictionary per column for the row group: a writer given a chunk with another
        # dictionary than the last falls back to hashing every row of it
        table = pa.concat_tables(self._pending).unify_dictionaries()
        self._writer.write_table(table, row_group_size=max(table.num_rows, 1))
        self._pending, self._buffered = [], 0


def _routed(candidates: pa.Table) -> pa.Table:
    """``candidates`` in ROUTED_SCHEMA: as :func:`~lakefs_gc.inventory.mapping.route_rows` gives
    them, or from plain CANDIDATE_SCHEMA columns (pyarrow casts no timestamp to a dictionary)."""
    table = candidates.select(ROUTED_SCHEMA.names)
    for name in CONSTANT_COLUMNS:
        column = table.column(name)
        if not pa.types.is_dictionary(column.type):
            table = table.set_column(table.schema.get_field_index(name), name, pc.dictionary_encode(column))
    return table.cast(ROUTED_SCHEMA)
