"""Committed trees written as lakeFS writes them: a commit rewrites only the ranges it touches.

:func:`commit_tree` follows lakeFS's committer (``pkg/graveler/committed/commit.go``): ranges
no change falls into are kept by id; the changes falling into a run of adjacent ranges are
merged with their records and the run is re-split by lakeFS's rule (``sstable.DiskWriter``'s
``ShouldBreakAtKey``: after a key whose FNV-1a 64 hash is divisible by the raggedness, or once
the range reaches its maximum size), ending where the run's last range ended; changes past the
last range join it if it was touched, else start new ranges. The new metarange is the parent's
with the replaced ranges swapped. Both are written with :mod:`.blocks`, so a rewrite costs the
blocks it changes, not the table.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from lakefs_gc.gc.addresses import METADATA_PREFIX
from lakefs_gc.sstable.committed import RangeData, encode_range_data
from lakefs_gc.sstable.graveler import METARANGES, RANGES, marshal_value
from lakefs_gc.testing.blockstore import NamespaceStore
from lakefs_gc.testing.synth.blocks import Block, Change, Changes, Merger, rewrite
from lakefs_gc.testing.synth.tablefile import assemble, read_blocks

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_BLOCK_OVERHEAD = 200  # bytes of a cached Block besides its payload


@dataclass(frozen=True)
class RangeSplit:
    """lakeFS's range split rule with ``committed.permanent.min_range_size_bytes`` at its default 0."""

    raggedness: int
    max_bytes: int

    def flags(self, keys: Sequence[bytes]) -> list[bool]:
        """For each key, whether lakeFS closes a range after it (FNV-1a 64 % raggedness == 0),
        computed for a whole batch at once."""
        n = len(keys)
        if n == 0:
            return []
        lengths = np.fromiter(map(len, keys), dtype=np.int64, count=n)
        width = int(lengths.max())
        raw = b"".join(k.ljust(width, b"\0") for k in keys)
        columns = np.frombuffer(raw, dtype=np.uint8).reshape(n, width).astype(np.uint64)
        h = np.full(n, _FNV_OFFSET, dtype=np.uint64)
        prime = np.uint64(_FNV_PRIME)
        for col in range(width):
            h = np.where(lengths > col, (h ^ columns[:, col]) * prime, h)
        return ((h % np.uint64(self.raggedness)) == 0).tolist()  # type: ignore[no-any-return]

    def splits_after(self, key: bytes) -> bool:
        h = _FNV_OFFSET
        for b in key:
            h = ((h ^ b) * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
        return h % self.raggedness == 0


@dataclass(frozen=True, slots=True)
class RangeRef:
    """A range as its metarange records it."""

    id: str
    min_key: bytes
    max_key: bytes
    count: int
    size: int

    def metarange_value(self) -> bytes:
        data = encode_range_data(RangeData(self.min_key, self.max_key, self.size, self.count))
        return marshal_value(self.id.encode("ascii"), data)


@dataclass(frozen=True)
class Tree:
    """A commit's tree: its ranges in key order and its metarange's blocks."""

    ranges: tuple[RangeRef, ...] = ()
    metarange: tuple[Block, ...] = ()
    metarange_id: str = ""


@dataclass
class TableStats:
    ranges: int = 0
    range_records: int = 0
    metaranges: int = 0
    bytes: int = 0
    cache_misses: int = 0


@dataclass
class Tables:
    """Writes a namespace's ranges and metaranges; keeps the blocks of recent ranges in memory,
    up to ``cache_bytes`` (older ones are read back from storage when a commit touches them)."""

    store: NamespaceStore
    split: RangeSplit
    cache_bytes: int
    stats: TableStats = field(default_factory=TableStats)
    _cache: OrderedDict[str, tuple[list[Block], int]] = field(default_factory=OrderedDict)
    _cached: int = 0

    def range_blocks(self, ref: RangeRef) -> list[Block]:
        hit = self._cache.get(ref.id)
        if hit is not None:
            self._cache.move_to_end(ref.id)
            return hit[0]
        self.stats.cache_misses += 1
        key = METADATA_PREFIX + ref.id
        data = self.store.get(key)
        if data is None:
            raise FileNotFoundError(f"synth: range {ref.id} vanished from {self.store.namespace}")
        blocks = read_blocks(data, self.store.qualified(key), self.split.splits_after(ref.max_key))
        self._remember(ref.id, blocks)
        return blocks

    def write_range(self, blocks: list[Block]) -> RangeRef:
        table = assemble(blocks, {"type": RANGES})
        self._put(table.id, table.data)
        self.stats.ranges += 1
        self.stats.range_records += table.count
        self._remember(table.id, blocks)
        return RangeRef(table.id, table.min_key, table.max_key, table.count, table.estimated_size)

    def write_metarange(self, blocks: Sequence[Block]) -> str:
        table = assemble(blocks, {"type": METARANGES})
        self._put(table.id, table.data)
        self.stats.metaranges += 1
        return table.id

    def forget(self) -> None:
        self._cache.clear()
        self._cached = 0

    def _put(self, table_id: str, data: bytes) -> None:
        key = METADATA_PREFIX + table_id
        if self.store.is_local:  # millions of small files: plain writes, the directory made once
            path = self.store.path(key)
            try:
                with open(path, "wb") as out:
                    out.write(data)
            except FileNotFoundError:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as out:
                    out.write(data)
        else:
            self.store.put(key, data)
        self.stats.bytes += len(data)

    def _remember(self, range_id: str, blocks: list[Block]) -> None:
        size = sum(len(b.payload) + _BLOCK_OVERHEAD for b in blocks)
        old = self._cache.pop(range_id, None)
        if old is not None:
            self._cached -= old[1]
        self._cache[range_id] = (blocks, size)
        self._cached += size
        while self._cached > self.cache_bytes and len(self._cache) > 1:
            _, (_, dropped) = self._cache.popitem(last=False)
            self._cached -= dropped


def commit_tree(tables: Tables, tree: Tree, changes: Iterable[Change]) -> Tree:
    """The tree of ``tree`` + ``changes`` (sorted by key, unique; a lazy stream is fine), written
    to storage. Nothing but the touched ranges' blocks and one open range is held at a time."""
    stream = Changes(changes)
    if stream.peek() is None:
        return tree
    ranges, out = tree.ranges, _RangeOutput(tables)
    for i, old in enumerate(ranges):
        ahead = stream.peek()
        if ahead is None or ahead > old.max_key:  # untouched: copied whole, closing the open range
            out.close()
            out.keep(old)
            continue
        out.replaced(old)
        blocks = tables.range_blocks(old)
        following = ranges[i + 1].max_key if i + 1 < len(ranges) else None
        for j, block in enumerate(blocks):
            if j < len(blocks) - 1:
                continues = True
            else:  # does the output go on past this range? only into a touched range or the tail
                ahead = stream.peek()
                continues = ahead is not None and (following is None or ahead <= following)
            out.add(out.merger.block(block, stream, continues=continues))
    out.add(out.merger.records(stream.rest()))  # past the last range
    out.close()
    meta_changes = [(k, out.meta[k], False) for k in sorted(out.meta)]
    metarange = tuple(rewrite(tree.metarange, meta_changes))
    return Tree(tuple(out.ranges), metarange, tables.write_metarange(metarange))


class _RangeOutput:
    """The new tree's ranges as they are decided: kept ones, and new ones closed after a split
    key, at the size limit, or where lakeFS's committer closes its writer."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables
        self.merger = Merger()
        self.ranges: list[RangeRef] = []
        self.meta: dict[bytes, bytes | None] = {}
        self._blocks: list[Block] = []
        self._size = 0

    def keep(self, ref: RangeRef) -> None:
        self.ranges.append(ref)

    def replaced(self, ref: RangeRef) -> None:
        self.meta[ref.max_key] = None

    def add(self, blocks: Iterable[Block]) -> None:
        for block in blocks:
            self._blocks.append(block)
            self._size += len(block.payload)
            if block.split_after or self._size >= self.tables.split.max_bytes:
                self._write()

    def close(self) -> None:
        self.add(self.merger.flush())
        if self._blocks:
            self._write()

    def _write(self) -> None:
        ref = self.tables.write_range(self._blocks)
        self.ranges.append(ref)
        self.meta[ref.max_key] = ref.metarange_value()
        self._blocks, self._size = [], 0
