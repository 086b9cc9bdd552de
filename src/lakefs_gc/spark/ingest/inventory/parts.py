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
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lakefs_gc.inventory.mapping import CANDIDATE_SCHEMA
from lakefs_gc.storage.writes import open_output


def part_path(parts_dir: str, seq: int, file_index: int) -> str:
    """Where an attempt writes the candidates of data file ``file_index`` of delivery ``seq``."""
    return f"{parts_dir}/{seq:08d}/part-{file_index:05d}-{uuid.uuid4().hex[:12]}.parquet"


class CandidatePartWriter:
    """Gathers routed candidate batches into large row groups and counts them per repository.

    Row groups of about :data:`ROW_GROUP_ROWS` rows: a parquet write per small batch costs twice
    the time and makes a file of tiny row groups. The constant columns get a dictionary, the
    others (unique per row) do not. No column statistics: parts are only ever read whole, and
    min/max of every string cost about 14 % of the write. Zstandard at level 1 costs about 15 %
    more CPU than Snappy and makes parts 42 % smaller (less to store and to read back from an
    object store); together, a part costs the CPU a Snappy part with statistics did
    (measured in bench/README.md, section Issue 17). The ETags (32 hex digits each) are stored
    with their lengths apart from their bytes (``DELTA_LENGTH_BYTE_ARRAY``): Zstandard then
    compresses the digits faster, 18 % off the part's write (bench/README.md, "`inventory.py`:
    the ETags' encoding (2026-12-01)").
    """

    ROW_GROUP_ROWS = 128 * 1024
    DICTIONARY_COLUMNS = ("repository", "delivery_id", "snapshot_time")
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
        for row in candidates.group_by(["repository"]).aggregate([([], "count_all")]).to_pylist():
            self.counts[row["repository"]] = self.counts.get(row["repository"], 0) + int(row["count_all"])
        self._pending.append(candidates.select(CANDIDATE_SCHEMA.names).cast(CANDIDATE_SCHEMA))
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
            dictionary = list(self.DICTIONARY_COLUMNS)
            self._writer = pq.ParquetWriter(
                self._stream,
                CANDIDATE_SCHEMA,
                use_dictionary=dictionary,
                write_statistics=False,
                compression="zstd",
                compression_level=1,
                column_encoding=dict.fromkeys(self.DELTA_LENGTH_COLUMNS, "DELTA_LENGTH_BYTE_ARRAY"),
            )
        table = pa.concat_tables(self._pending)
        self._writer.write_table(table, row_group_size=max(table.num_rows, 1))
        self._pending, self._buffered = [], 0
