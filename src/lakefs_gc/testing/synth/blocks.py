"""SSTable data blocks that a rewrite can reuse, and tables assembled from them.

A commit rewrites only the ranges it touches, and a touched range differs from its previous
version in a few records; its new metarange differs from the parent's in a few records too. The
project's :class:`~lakefs_gc.sstable.TableWriter` re-encodes every record of a table (about 65K
records/s), which at 30K commits would spend hours re-encoding unchanged records. Here data
blocks end at *content-defined* points (a key whose CRC-32 has its low 4 bits clear, once the
block holds 2 KiB; always at 8 KiB and after a key where lakeFS splits ranges), so a block is a
function of its records alone: after a change, the re-encoded blocks fall back into step with
the old ones within a block or two, and every other block is copied as stored bytes.

The file layout is the one ``TableWriter`` writes and lakeFS's pebble writer produces: format
v2, CRC-32C, Snappy kept when it saves 1/8, restart interval 16, internal keys with sequence 0
and kind SET, a two-level index once the index outgrows 4 KiB, RocksDB's standard properties
and lakeFS's user properties. Only blocks vary in size (2–8 KiB instead of 4 KiB), which
readers do not care about. A table's id is the SHA-256 of its stored blocks and metadata:
content-addressed like lakeFS's (the same records give the same id) but not lakeFS's record
hash, which nothing recomputes.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from lakefs_gc.sstable.block import decode_block
from lakefs_gc.sstable.format import (
    INTERNAL_KEY_TRAILER,
    INTERNAL_KEY_TRAILER_SIZE,
    NO_COMPRESSION,
    SNAPPY_COMPRESSION,
    block_checksum,
    snappy_compress,
    snappy_decompress,
)
from lakefs_gc.sstable.varint import put_uvarint

MIN_BLOCK = 2048
MAX_BLOCK = 8192
INDEX_BLOCK = 4096
RESTART_INTERVAL = 16
_VARINT = [put_uvarint(i) for i in range(1 << 14)]

#: ``(path, graveler value or None to delete it, lakeFS splits the range after this key)``
Change = tuple[bytes, bytes | None, bool]
Record = tuple[bytes, bytes, bool]


@dataclass(frozen=True, slots=True)
class Block:
    """One data block as stored (block bytes + 5-byte trailer) with what tables need to know."""

    first_key: bytes
    last_key: bytes
    count: int
    payload: bytes
    raw_key_size: int
    raw_value_size: int
    #: its last key is one where lakeFS's writer closes a range
    split_after: bool
    #: it ends where the cutter cuts (not at the end of the records it was given), so a
    #: rewrite can reuse it whatever follows
    cut: bool = True

    def records(self) -> list[Record]:
        stored, ctype = self.payload[:-5], self.payload[-5]
        raw = snappy_decompress(stored) if ctype == SNAPPY_COMPRESSION else stored
        pairs = decode_block(raw)
        last = len(pairs) - 1
        return [
            (k[:-INTERNAL_KEY_TRAILER_SIZE], v, self.split_after and i == last)
            for i, (k, v) in enumerate(pairs)
        ]


class BlockCutter:
    """Encodes sorted records into blocks, cutting at content-defined points."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._buf = bytearray()
        self._restarts: list[int] = []
        self._last = b""
        self._first = b""
        self._count = 0
        self._key_size = 0
        self._value_size = 0

    @property
    def empty(self) -> bool:
        return self._count == 0

    def add(self, key: bytes, value: bytes, split: bool) -> Block | None:
        """Add a record; return the block it completed, if any."""
        ikey = key + INTERNAL_KEY_TRAILER
        buf = self._buf
        if self._count % RESTART_INTERVAL == 0:
            self._restarts.append(len(buf))
            shared = 0
            if self._count == 0:
                self._first = key
        else:
            last = self._last
            n = min(len(last), len(ikey))
            diff = int.from_bytes(last[:n], "big") ^ int.from_bytes(ikey[:n], "big")
            shared = n - (diff.bit_length() + 7) // 8
        unshared, vlen = len(ikey) - shared, len(value)
        buf += _VARINT[shared] if shared < 16384 else put_uvarint(shared)
        buf += _VARINT[unshared] if unshared < 16384 else put_uvarint(unshared)
        buf += _VARINT[vlen] if vlen < 16384 else put_uvarint(vlen)
        buf += ikey[shared:]
        buf += value
        self._last = ikey
        self._count += 1
        self._key_size += len(ikey)
        self._value_size += vlen
        size = len(buf) + 4 * len(self._restarts) + 4
        if split or size >= MAX_BLOCK or (size >= MIN_BLOCK and zlib.crc32(key) & 15 == 0):
            return self._finish(split, True)
        return None

    def flush(self) -> Block | None:
        return None if self._count == 0 else self._finish(False, False)

    def _finish(self, split: bool, cut: bool) -> Block:
        raw = bytes(self._buf) + b"".join(r.to_bytes(4, "little") for r in self._restarts)
        raw += len(self._restarts).to_bytes(4, "little")
        stored, ctype = raw, NO_COMPRESSION
        compressed = snappy_compress(raw)
        if len(compressed) < len(raw) - len(raw) // 8:
            stored, ctype = compressed, SNAPPY_COMPRESSION
        payload = stored + bytes((ctype,)) + block_checksum(stored, ctype).to_bytes(4, "little")
        block = Block(
            self._first, self._last[:-INTERNAL_KEY_TRAILER_SIZE], self._count, payload,
            self._key_size, self._value_size, split, cut,
        )  # fmt: skip
        self._reset()
        return block


def encode(records: Iterable[Record]) -> Iterator[Block]:
    """Blocks of sorted records, each ending where the cutter cuts."""
    cutter = BlockCutter()
    for key, value, split in records:
        block = cutter.add(key, value, split)
        if block is not None:
            yield block
    tail = cutter.flush()
    if tail is not None:
        yield tail


class Changes:
    """A stream of sorted changes (unique keys), consumed as blocks need them."""

    def __init__(self, changes: Iterable[Change]) -> None:
        self._it = iter(changes)
        self._next: Change | None = next(self._it, None)

    def peek(self) -> bytes | None:
        """The key of the next change, or None at the end."""
        return None if self._next is None else self._next[0]

    def upto(self, key: bytes) -> Iterator[Change]:
        """The changes with keys up to ``key``."""
        while self._next is not None and self._next[0] <= key:
            yield self._next
            self._next = next(self._it, None)

    def rest(self) -> Iterator[Change]:
        while self._next is not None:
            yield self._next
            self._next = next(self._it, None)


class Merger:
    """Merges old blocks with changes into new blocks.

    A block is decoded only when a change falls into it (or between it and the previous block),
    or while the re-encoded blocks have not fallen back into step with the old ones; otherwise
    it is passed on as it is. A block the cutter did not end (the last of its table) is passed
    on only if nothing follows it in the output (``continues`` false).
    """

    def __init__(self) -> None:
        self.cutter = BlockCutter()

    def block(self, block: Block, changes: Changes, *, continues: bool) -> Iterator[Block]:
        ahead = changes.peek()
        if (ahead is None or ahead > block.last_key) and self.cutter.empty and (block.cut or not continues):
            yield block
            return
        yield from self.records(_merge(block.records(), changes.upto(block.last_key)))

    def records(self, records: Iterable[Change]) -> Iterator[Block]:
        cutter = self.cutter
        for key, value, split in records:
            if value is not None:
                done = cutter.add(key, value, split)
                if done is not None:
                    yield done

    def flush(self) -> Iterator[Block]:
        tail = self.cutter.flush()
        if tail is not None:
            yield tail


def rewrite(blocks: Sequence[Block], changes: Iterable[Change]) -> Iterator[Block]:
    """The blocks of one table with ``changes`` applied (sorted, unique keys; ``None`` deletes);
    changes past the last block are appended."""
    stream, merger = Changes(changes), Merger()
    for i, block in enumerate(blocks):
        last = i == len(blocks) - 1
        yield from merger.block(block, stream, continues=not last or stream.peek() is not None)
    yield from merger.records(stream.rest())
    yield from merger.flush()


def _merge(base: list[Record], changes: Iterator[Change]) -> Iterator[Change]:
    """Sorted merge; a change replaces or (when its value is None) removes the base record."""
    change = next(changes, None)
    for record in base:
        while change is not None and change[0] < record[0]:
            yield change
            change = next(changes, None)
        if change is not None and change[0] == record[0]:
            yield change
            change = next(changes, None)
        else:
            yield record
    while change is not None:
        yield change
        change = next(changes, None)
