"""The range cache's executor side: tasks that read lakeFS ranges into cache parts and look them up.

Split from :mod:`lakefs_gc.spark.mark.range_cache.cache` (the driver side: generations, records, planning),
whose docstring explains the layout and the guarantees. Everything here is pickled to the
executors, so it holds paths and settings, never clients.
"""

from __future__ import annotations

import bisect
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakefs_gc.errors import GcError
from lakefs_gc.lakefs.client import LakeFSClient
from lakefs_gc.spark.mark.references import RANGE_READER_SOURCE, MetadataReader
from lakefs_gc.storage.directories import StoreDirectory
from lakefs_gc.storage.filesystems import filesystem_for
from lakefs_gc.storage.writes import open_output

META_DIR, RANGE_DIR, ENTRY_DIR, GEN_DIR = "metaranges", "ranges", "entries", "_gen"
COMMITTED_DIR = "committed"  # :mod:`.committed`'s level
#: a bucket or the metarange level is rewritten to what a cycle needs past this fraction unneeded
EVICT_FRACTION = 0.5
MAX_BUCKET_PARTS = 8
META_SCHEMA = pa.schema([("metarange_id", pa.string()), ("range_id", pa.string())])
RANGE_SCHEMA = pa.schema([("range_id", pa.string()), ("address", pa.string())])
#: the entries of the HEAD trees' ranges, for the identity-twin guard (null path: empty range),
#: with their content evidence: the namespace-relative address (null outside the namespace) and
#: the checksum lakeFS recorded (spark/mark/twin_evidence.py)
ENTRY_SCHEMA = pa.schema([
    ("range_id", pa.string()), ("path", pa.string()), ("size", pa.int64()),
    ("address", pa.string()), ("checksum", pa.string()),
])  # fmt: skip
META_STATUS = "file string, rows long, ids array<string>, read long"
RANGE_STATUS = (
    "bucket int, needed long, read long, held long, replaced boolean, file string, rows long, ranges long, "
    "used_files array<string>, entries_file string, entries_rows long, entries_ranges long"
)
_RANGE_STATUS_ARROW = pa.schema([
    ("bucket", pa.int32()), ("needed", pa.int64()), ("read", pa.int64()), ("held", pa.int64()),
    ("replaced", pa.bool_()), ("file", pa.string()), ("rows", pa.int64()), ("ranges", pa.int64()),
    ("used_files", pa.list_(pa.string())),
    ("entries_file", pa.string()), ("entries_rows", pa.int64()), ("entries_ranges", pa.int64()),
])  # fmt: skip
_BATCH = 65_536


class RangeCacheError(GcError):
    """The range cache cannot answer safely; the mark must fail (delete the cache to rebuild it)."""


@dataclass(frozen=True)
class Part:
    """One parquet file of the cache: its path under the root, its rows, and what it holds."""

    file: str
    rows: int
    ids: tuple[str, ...] = ()  # metarange parts: the metarange ids it holds
    ranges: int = 0  # range parts: how many range ids it holds
    used: int = 0  # the newest generation whose mark needed something it holds (retention: LRU)


@dataclass(frozen=True)
class _Store:
    """The cache directory as the executor tasks see it (pickled with them): any store."""

    directory: StoreDirectory
    hint: str

    @property
    def root(self) -> str:
        return self.directory.uri()

    def ids(self, part: Part, wanted: set[str] | None = None) -> set[str]:
        """The range ids ``part`` holds (those in ``wanted``; None: all): its first column, on
        every level but the metaranges'. The column is read as the parquet dictionary it is
        stored as, so only each row's index into it is decoded, not its 64-character id: every
        cycle learns this way which ranges each bucket holds, a scan of every address part
        (on the bottom line's parts, five times faster than reading the ids as strings)."""
        found: set[str] = set()
        for _ in self.scan(part, ["range_id"], wanted, found, dictionary=True):
            pass
        return found

    def scan(
        self,
        part: Part,
        columns: list[str],
        wanted: set[str] | None,
        found: set[str] | None,
        *,
        dictionary: bool = False,
    ) -> Iterator[pa.RecordBatch]:
        """The rows of ``part`` whose first column is in ``wanted`` (None: all), adding the values
        found there to ``found`` (None: not collected); ``dictionary``: that column comes
        dictionary-encoded (:meth:`ids`). Anything unexpected about the file raises, naming it."""
        path = self.directory.uri(part.file)
        ordered = sorted(wanted) if wanted is not None else None
        values = pa.array(ordered, pa.string()) if ordered is not None else None
        try:
            fs, base = self.directory.filesystem()
            encoded = columns[:1] if dictionary else None
            with (
                fs.open_input_file(f"{base}/{part.file}") as f,
                pq.ParquetFile(f, read_dictionary=encoded) as parquet,
            ):
                if parquet.metadata.num_rows != part.rows:
                    raise RangeCacheError(
                        f"range cache part {path} holds {parquet.metadata.num_rows} rows, "
                        f"its record says {part.rows}; {self.hint}"
                    )
                groups = _row_groups(parquet.metadata, ordered)
                for batch in parquet.iter_batches(columns=columns, batch_size=_BATCH, row_groups=groups):
                    if values is not None:
                        batch = batch.filter(pc.is_in(batch.column(0), value_set=values))
                    if found is not None:
                        found.update(pc.unique(batch.column(0)).to_pylist())
                    yield batch
        except (OSError, ValueError, KeyError, pa.ArrowException) as e:
            raise RangeCacheError(f"range cache part {path} cannot be read: {e}; {self.hint}") from e

    def require(self, wanted: set[str], found: set[str], where: str) -> None:
        """Fail closed when the cache lacks an id it should hold."""
        missing = wanted - found
        if missing:
            raise RangeCacheError(
                f"range cache {where} of {self.root} lacks {len(missing)} of the ids its record says "
                f"it holds (e.g. {min(missing)}); {self.hint}"
            )


def _row_groups(metadata: pq.FileMetaData, wanted: list[str] | None) -> list[int]:
    """The row groups of a part that may hold a ``wanted`` id (sorted; None: all), by the min and
    max its first column's statistics record. A part's ranges are written in id order, so a
    lookup of a few ranges (the retained ones, a cycle's HEAD ranges) skips most of the level;
    a group without usable statistics is read."""
    groups = []
    for index in range(metadata.num_row_groups):
        stats = metadata.row_group(index).column(0).statistics
        low, high = (stats.min, stats.max) if stats is not None and stats.has_min_max else (None, None)
        if wanted is not None and isinstance(low, str) and isinstance(high, str):
            at = bisect.bisect_left(wanted, low)
            if at == len(wanted) or wanted[at] > high:
                continue
        groups.append(index)
    return groups


class _PartWriter:
    """Rows into a new part; a fresh name per task attempt, so no attempt overwrites a listed part."""

    def __init__(self, store: _Store, prefix: str, schema: pa.Schema) -> None:
        self.file = f"{prefix}-{uuid.uuid4().hex}.parquet"
        self.store, self.schema = store, schema
        self.rows = 0
        self.pending: list[tuple[Any, ...]] = []
        self.writer: pq.ParquetWriter | None = None
        self.out: Any = None  # the output stream (an object store uploads it whole on close)

    def add(self, key: str, *values: Any) -> None:
        self.pending.append((key, *values))
        if len(self.pending) >= _BATCH:
            self._flush()

    def add_batch(self, batch: pa.RecordBatch) -> None:
        self._flush()
        self._write(pa.RecordBatch.from_arrays(batch.columns, schema=self.schema))

    def close(self) -> Part | None:
        """The part written (complete: listed only from here on), or None when no row was added."""
        self._flush()
        if self.writer is None:
            return None
        self.writer.close()
        self.out.close()
        return Part(self.file, self.rows)

    def _flush(self) -> None:
        if self.pending:
            rows = zip(*self.pending, strict=True)
            columns = [pa.array(c, f.type) for c, f in zip(rows, self.schema, strict=True)]
            self.pending = []
            self._write(pa.RecordBatch.from_arrays(columns, schema=self.schema))

    def _write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if self.writer is None:
            fs, base = self.store.directory.filesystem()
            self.out = open_output(fs, f"{base}/{self.file}")
            self.writer = pq.ParquetWriter(self.out, self.schema)
        self.writer.write_batch(batch)
        self.rows += batch.num_rows


def _session(reader: MetadataReader) -> tuple[Any, LakeFSClient]:
    fs, _ = filesystem_for(reader.namespace, reader.options)
    return fs, LakeFSClient(reader.connection, source=RANGE_READER_SOURCE)


def _rows(batches: Iterable[pa.RecordBatch]) -> Iterator[dict[str, Any]]:
    for batch in batches:
        yield from batch.to_pylist()


def _by_bucket(batches: Iterator[pa.RecordBatch], heads: set[str] | None = None) -> dict[int, set[str]]:
    """The task's range ids (``id``) by ``bucket``; ``heads``: also collects there those the rows
    flag ``head``."""
    needed: dict[int, set[str]] = defaultdict(set)
    for row in _rows(batches):
        needed[row["bucket"]].add(row["id"])
        if heads is not None and row.get("head"):
            heads.add(row["id"])
    return needed


@dataclass(frozen=True)
class _MetarangeWriter:
    """Writes a task's metaranges (read from lakeFS, or copied from a listed part) as one part."""

    store: _Store
    reader: MetadataReader
    gen: int
    listed: Mapping[str, Part]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        items = [(r["id"], r["source"]) for r in _rows(batches)]
        if not items:
            return
        writer = _PartWriter(self.store, f"{META_DIR}/part-{self.gen:08d}", META_SCHEMA)
        copies: dict[str, set[str]] = defaultdict(set)
        fs, client = _session(self.reader)
        with client:
            for metarange_id, source in items:
                if source is None:
                    range_ids: list[str | None] = [*self.reader.read_metarange(client, fs, metarange_id)]
                    for range_id in range_ids or [None]:  # an empty metarange is held too
                        writer.add(metarange_id, range_id)
                else:
                    copies[source].add(metarange_id)
        for source, ids in copies.items():
            found: set[str] = set()
            for batch in self.store.scan(self.listed[source], META_SCHEMA.names, ids, found):
                writer.add_batch(batch)
            self.store.require(ids, found, source)
        part = writer.close()
        assert part is not None  # every metarange wrote a row at least
        read = sum(1 for _, source in items if source is None)
        yield pa.RecordBatch.from_pydict(
            {"file": [part.file], "rows": [part.rows], "ids": [[m for m, _ in items]], "read": [read]}
        )


@dataclass(frozen=True)
class _MetarangeLookup:
    """The range ids of the needed metaranges, from the parts the record says hold them (with
    their ``metarange`` when ``with_metarange``)."""

    store: _Store
    listed: Mapping[str, Part]
    with_metarange: bool = False

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for row in _rows(batches):
            wanted, found = set(row["ids"]), set[str]()
            for batch in self.store.scan(self.listed[row["file"]], META_SCHEMA.names, wanted, found):
                batch = batch.filter(pc.is_valid(batch.column(1)))
                if not batch.num_rows:
                    continue
                if self.with_metarange:
                    yield pa.RecordBatch.from_arrays(batch.columns, names=["metarange", "id"])
                else:
                    yield pa.RecordBatch.from_arrays([batch.column(1)], names=["id"])
            self.store.require(wanted, found, row["file"])


@dataclass(frozen=True)
class _RangeIngest:
    """Per bucket of the task: reads the ranges the cache does not hold into a new part (with the
    bucket's needed cached ranges when it is due for a rewrite); one status row per bucket.
    ``entries``: the entries level (HEAD ranges' entries, ENTRY_SCHEMA) instead of the addresses.
    On the addresses level, a range the rows flag ``head`` (a branch HEAD's) that the entries
    level (``head_parts``) lacks is read once for both: its entries go into a new entries part
    of the bucket, its addresses are taken from them (the same normalisation)."""

    store: _Store
    reader: MetadataReader
    gen: int
    listed: Mapping[int, tuple[Part, ...]]
    entries: bool = False
    head_parts: Mapping[int, tuple[Part, ...]] = field(default_factory=dict)
    evict: bool = True  # false: never rewrite a bucket (a read-ahead only adds: :mod:`.ahead`)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        heads: set[str] = set()
        needed = _by_bucket(batches, heads)
        if not needed:
            return
        fs, client = _session(self.reader)
        with client:
            for bucket, ids in sorted(needed.items()):
                yield self._bucket(client, fs, bucket, ids, heads)

    def _bucket(
        self, client: LakeFSClient, fs: Any, bucket: int, ids: set[str], heads: set[str]
    ) -> pa.RecordBatch:
        parts = self.listed.get(bucket, ())
        held: set[str] = set()
        used_files = []  # the listed parts holding a needed range
        for part in parts:
            found = self.store.ids(part)
            held |= found
            if found & ids:
                used_files.append(part.file)
        keep, new = ids & held, sorted(ids - held)
        unneeded = len(held) - len(keep)
        due = unneeded > EVICT_FRACTION * len(held) or len(parts) >= MAX_BUCKET_PARTS
        rewrite = self.evict and bool(parts) and due
        level, schema = (ENTRY_DIR, ENTRY_SCHEMA) if self.entries else (RANGE_DIR, RANGE_SCHEMA)
        writer = _PartWriter(self.store, f"{level}/part-{self.gen:08d}-b{bucket:05d}", schema)
        if rewrite:
            copied: set[str] = set()
            for part in parts:
                for batch in self.store.scan(part, schema.names, keep, copied):
                    writer.add_batch(batch)
            self.store.require(keep, copied, f"bucket {bucket}")
        both = self._lacking_entries(bucket, heads.intersection(new)) if not self.entries else set()
        entry_writer = _PartWriter(self.store, f"{ENTRY_DIR}/part-{self.gen:08d}-b{bucket:05d}", ENTRY_SCHEMA)
        for range_id in new:
            rows: Iterable[tuple[Any, ...]]
            if self.entries or range_id in both:
                entries = list(self.reader.read_head_entries(client, fs, range_id))
                rows = entries if self.entries else [(e[2],) for e in entries if e[2] is not None]
                if range_id in both:
                    _add(entry_writer, range_id, entries, len(ENTRY_SCHEMA))
            else:
                rows = ((a,) for a in self.reader.read_range(client, fs, range_id))
            _add(writer, range_id, rows, len(schema))
        written, entries_written = writer.close(), entry_writer.close()
        status = {
            "bucket": bucket, "needed": len(ids), "read": len(new), "held": len(held), "replaced": rewrite,
            "file": written.file if written else None, "rows": written.rows if written else 0,
            "ranges": len(new) + (len(keep) if rewrite else 0), "used_files": used_files,
            "entries_file": entries_written.file if entries_written else None,
            "entries_rows": entries_written.rows if entries_written else 0, "entries_ranges": len(both),
        }  # fmt: skip
        return pa.RecordBatch.from_pylist([status], schema=_RANGE_STATUS_ARROW)

    def _lacking_entries(self, bucket: int, heads: set[str]) -> set[str]:
        """Those of ``heads`` (HEAD ranges this bucket reads now) the entries level lacks."""
        held: set[str] = set()
        for part in self.head_parts.get(bucket, ()) if heads else ():
            held |= self.store.ids(part, heads)
        return heads - held


def _add(writer: _PartWriter, range_id: str, rows: Iterable[tuple[Any, ...]], width: int) -> None:
    """The rows of one range; an empty range is held too (one row of nulls)."""
    empty = True
    for row in rows:
        writer.add(range_id, *row)
        empty = False
    if empty:
        writer.add(range_id, *(None,) * (width - 1))
