"""Committed trees as lakeFS stores them: a metarange of ranges under ``_lakefs/<id>``.

A commit's tree is written by applying its staged changes to the parent's metarange: ranges
no change touches are reused by id (content addressing, as lakeFS does), touched ranges are
merged with the changes and re-split at content-defined boundaries, so unchanged regions
produce the same range ids again.
"""

from __future__ import annotations

import bisect
import tempfile
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from lakefs_gc.errors import GcError
from lakefs_gc.gc.addresses import METADATA_PREFIX
from lakefs_gc.sstable import Entry, RangeInfo, SSTableReader, iter_metarange, write_metarange
from lakefs_gc.sstable.catalog import encode_entry, entry_identity
from lakefs_gc.sstable.graveler import RANGES, decode_range_value, marshal_value, write_graveler_table
from lakefs_gc.testing.blockstore import NamespaceStore


@dataclass(frozen=True)
class RangeSplit:
    """Where ranges end: past ``min_entries``, at keys whose FNV-1a hash hits ``raggedness``,
    and always at ``max_entries`` (lakeFS breaks on bytes; entries keep tests predictable)."""

    min_entries: int = 1000
    raggedness: int = 5000
    max_entries: int = 50_000

    def should_break(self, key: bytes, count: int) -> bool:
        if count < self.min_entries:
            return False
        return count >= self.max_entries or _fnv1a(key) % self.raggedness == 0


def _fnv1a(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


class TreeStore:
    """Reads and writes the ranges and metaranges of one namespace, with a small cache."""

    def __init__(self, store: NamespaceStore, split: RangeSplit, cache_ranges: int = 256) -> None:
        self._store = store
        self._split = split
        self._cache: OrderedDict[str, list[tuple[bytes, bytes]]] = OrderedDict()
        self._cache_size = cache_ranges
        #: metarange id -> (max keys, ranges) for :meth:`get`; metaranges are immutable
        self._index: OrderedDict[str, tuple[list[bytes], list[RangeInfo]]] = OrderedDict()

    # -- reading --------------------------------------------------------------------------
    def ranges(self, metarange_id: str) -> list[RangeInfo]:
        if not metarange_id:
            return []
        reader = self._open(metarange_id)
        return [
            RangeInfo(rid, rd.min_key, rd.max_key, rd.count, rd.estimated_size)
            for _k, rid, rd in iter_metarange(reader)
        ]

    def range_records(self, range_id: str) -> list[tuple[bytes, bytes]]:
        """Raw ``(path, graveler value)`` records of a range (cached; merges copy them as is)."""
        cached = self._cache.get(range_id)
        if cached is not None:
            self._cache.move_to_end(range_id)
            return cached
        records = list(self._open(range_id))
        self._cache[range_id] = records
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return records

    def range_entries(self, range_id: str) -> Iterator[tuple[bytes, Entry]]:
        for key, value in self.range_records(range_id):
            yield key, decode_range_value(value)

    def entries(self, metarange_id: str, *, start: bytes = b"") -> Iterator[tuple[bytes, Entry]]:
        """Every ``(path, Entry)`` of a tree with ``path >= start``, in order."""
        for r in self.ranges(metarange_id):
            if r.max_key < start:
                continue
            for key, value in self.range_records(r.id):
                if key >= start:
                    yield key, decode_range_value(value)

    def get(self, metarange_id: str, path: bytes) -> Entry | None:
        max_keys, ranges = self._range_index(metarange_id)
        r = bisect.bisect_left(max_keys, path)  # the first range that does not end before path
        if r == len(ranges) or ranges[r].min_key > path:
            return None
        records = self.range_records(ranges[r].id)
        i = bisect.bisect_left(records, path, key=lambda kv: kv[0])
        if i < len(records) and records[i][0] == path:
            return decode_range_value(records[i][1])
        return None

    def _range_index(self, metarange_id: str) -> tuple[list[bytes], list[RangeInfo]]:
        """Decoding the metarange on every lookup made the uncommitted dump quadratic (10K staged
        entries decoded 8.7M metarange records); a few recent metaranges are kept (immutable)."""
        cached = self._index.get(metarange_id)
        if cached is not None:
            self._index.move_to_end(metarange_id)
            return cached
        ranges = self.ranges(metarange_id)
        index = ([r.max_key for r in ranges], ranges)
        self._index[metarange_id] = index
        if len(self._index) > 16:
            self._index.popitem(last=False)
        return index

    def _open(self, table_id: str) -> SSTableReader:
        data = self._store.get(METADATA_PREFIX + table_id)
        if data is None:
            raise GcError(f"range or metarange {table_id} is missing from {self._store.namespace}")
        return SSTableReader(data, name=self._store.qualified(METADATA_PREFIX + table_id))

    # -- writing --------------------------------------------------------------------------
    def apply(self, base_metarange: str, changes: dict[bytes, Entry | None]) -> str:
        """Write the tree ``base + changes`` (``None`` deletes a path); return its metarange id."""
        keys = sorted(changes)
        encoded = {k: None if e is None else encode_value(e) for k, e in changes.items()}
        out: list[RangeInfo] = []
        ci = 0
        for r in self.ranges(base_metarange):
            end = bisect.bisect_right(keys, r.max_key, ci)
            if end == ci:
                out.append(r)
                continue
            merged = _merge(self.range_records(r.id), [(k, encoded[k]) for k in keys[ci:end]])
            out.extend(self.write_ranges(merged))
            ci = end
        tail = ((k, encoded[k]) for k in keys[ci:])
        out.extend(self.write_ranges((k, v) for k, v in tail if v is not None))
        return self.write_metarange(out)

    def write_ranges(self, records: Iterable[tuple[bytes, bytes]]) -> list[RangeInfo]:
        """Split sorted raw records into ranges at content-defined boundaries and store them."""
        out: list[RangeInfo] = []
        chunk: list[tuple[bytes, bytes]] = []
        for key, value in records:
            chunk.append((key, value))
            if self._split.should_break(key, len(chunk)):
                out.append(self._store_range(chunk))
                chunk = []
        if chunk:
            out.append(self._store_range(chunk))
        return out

    def write_metarange(self, ranges: list[RangeInfo]) -> str:
        with tempfile.TemporaryDirectory(prefix="lakefs-test-range-") as tmp:
            info = write_metarange(Path(tmp), ranges)
            self._publish(Path(tmp), info)
        return info.id

    def _store_range(self, records: list[tuple[bytes, bytes]]) -> RangeInfo:
        with tempfile.TemporaryDirectory(prefix="lakefs-test-range-") as tmp:
            info = write_graveler_table(Path(tmp), records, {"type": RANGES})
            self._publish(Path(tmp), info)
        self._cache[info.id] = records
        return info

    def _publish(self, directory: Path, info: RangeInfo) -> None:
        key = METADATA_PREFIX + info.id
        if not self._store.exists(key):
            self._store.put(key, (directory / info.id).read_bytes())


def encode_value(entry: Entry) -> bytes:
    """The graveler value lakeFS stores for an entry: identity + protobuf."""
    return marshal_value(entry_identity(entry), encode_entry(entry))


def _merge(
    base: list[tuple[bytes, bytes]], changes: list[tuple[bytes, bytes | None]]
) -> Iterator[tuple[bytes, bytes]]:
    """Sorted merge; a change replaces or (when None) removes the base entry of its key."""
    i = j = 0
    while i < len(base) or j < len(changes):
        if j >= len(changes) or (i < len(base) and base[i][0] < changes[j][0]):
            yield base[i]
            i += 1
            continue
        key, value = changes[j]
        if i < len(base) and base[i][0] == key:
            i += 1
        if value is not None:
            yield key, value
        j += 1
