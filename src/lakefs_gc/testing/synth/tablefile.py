"""Table files assembled from :mod:`.blocks`, laid out as the project's ``TableWriter`` lays them
out (and lakeFS's pebble writer): data blocks, a one- or two-level index, RocksDB's standard
properties plus lakeFS's user properties, the metaindex and the footer; and read back into
blocks whose stored bytes a rewrite reuses as they are.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from lakefs_gc.sstable import ident
from lakefs_gc.sstable.block import BlockBuilder, decode_block
from lakefs_gc.sstable.format import (
    CHECKSUM_CRC32C,
    FORMAT_VERSION,
    INTERNAL_KEY_TRAILER,
    INTERNAL_KEY_TRAILER_SIZE,
    NO_COMPRESSION,
    BlockHandle,
    Footer,
    block_checksum,
)
from lakefs_gc.sstable.reader import INDEX_TYPE_TWO_LEVEL, PROPERTIES_BLOCK, SSTableReader
from lakefs_gc.sstable.varint import put_uvarint
from lakefs_gc.testing.synth.blocks import Block

INDEX_BLOCK = 4096


@dataclass(frozen=True, slots=True)
class Table:
    """An assembled table: its content id, bytes and the summary a metarange records."""

    id: str
    data: bytes
    min_key: bytes
    max_key: bytes
    count: int
    estimated_size: int


def assemble(blocks: Sequence[Block], metadata: dict[str, str]) -> Table:
    """The table file of ``blocks``, laid out as ``TableWriter`` lays it out."""
    digest = hashlib.sha256()
    parts: list[bytes] = []
    offset = 0
    index = _Index()
    for block in blocks:
        digest.update(block.payload)
        parts.append(block.payload)
        index.add(block.last_key + INTERNAL_KEY_TRAILER, BlockHandle(offset, len(block.payload) - 5))
        offset += len(block.payload)
    data_size = offset
    ident.marshal_string_map(digest, metadata)
    count = sum(b.count for b in blocks)
    first = blocks[0].first_key if blocks else b""
    last = blocks[-1].last_key if blocks else b""
    if not blocks:  # an empty table still has one (empty) data block, as TableWriter writes it
        empty = _stored((0).to_bytes(4, "little") + (1).to_bytes(4, "little"))
        parts.append(empty)
        index.add(b"", BlockHandle(0, len(empty) - 5))
        offset = data_size = len(empty)
    index_parts, index_handle, index_size, top_size = index.finish(offset)
    parts += index_parts
    offset += sum(len(p) for p in index_parts)
    user = {k: v.encode() for k, v in metadata.items()}
    user.update(min_key=first, max_key=last, count=str(count).encode(),
                estimated_size_bytes=str(data_size).encode())  # fmt: skip
    props = _properties(blocks, data_size, index_size, top_size, index.partitions, user)
    props_block = _plain_block(props)
    props_handle = BlockHandle(offset, len(props_block) - 5)
    offset += len(props_block)
    metaindex = _plain_block({PROPERTIES_BLOCK.decode(): props_handle.encode()})
    meta_handle = BlockHandle(offset, len(metaindex) - 5)
    footer = Footer(CHECKSUM_CRC32C, meta_handle, index_handle, FORMAT_VERSION).encode()
    data = b"".join([*parts, props_block, metaindex, footer])
    return Table(digest.hexdigest(), data, first, last, count, data_size)


def _stored(raw: bytes) -> bytes:
    """An uncompressed block with its trailer (index, properties and metaindex blocks)."""
    return raw + bytes((NO_COMPRESSION,)) + block_checksum(raw, NO_COMPRESSION).to_bytes(4, "little")


class _Index:
    """One-level index, or two-level once it outgrows a block (as ``TableWriter`` decides)."""

    def __init__(self) -> None:
        self._index = BlockBuilder(1)
        self._top = BlockBuilder(1)
        self.partitions = 0
        self._entries: list[tuple[bytes, BlockHandle]] = []

    def add(self, key: bytes, handle: BlockHandle) -> None:
        self._entries.append((key, handle))

    def finish(self, offset: int) -> tuple[list[bytes], BlockHandle, int, int]:
        """(index blocks as stored, handle of the (top-level) index, index size, top-level size)."""
        out: list[bytes] = []
        for key, handle in self._entries:
            if self._index.entries and self._index.estimated_size() >= INDEX_BLOCK:
                offset = self._flush_partition(out, offset)
            self._index.add(key, handle.encode())
        top_size = 0
        if self.partitions:
            offset = self._flush_partition(out, offset)
            top = _stored(self._top.finish())
            handle = BlockHandle(offset, len(top) - 5)
            out.append(top)
            top_size = len(top)
        else:
            block = _stored(self._index.finish())
            handle = BlockHandle(offset, len(block) - 5)
            out.append(block)
        return out, handle, sum(len(b) for b in out), top_size

    def _flush_partition(self, out: list[bytes], offset: int) -> int:
        last_key = self._index.last_key
        block = _stored(self._index.finish())
        self._top.add(last_key, BlockHandle(offset, len(block) - 5).encode())
        out.append(block)
        self.partitions += 1
        return offset + len(block)


def _properties(
    blocks: Sequence[Block], data_size: int, index_size: int, top_size: int, partitions: int,
    user: dict[str, bytes],
) -> dict[str, bytes]:  # fmt: skip
    props: dict[str, bytes] = {
        "rocksdb.block.based.table.index.type": (INDEX_TYPE_TWO_LEVEL if partitions else 0).to_bytes(
            4, "little"
        ),
        "rocksdb.block.based.table.prefix.filtering": b"0",
        "rocksdb.block.based.table.whole.key.filtering": b"0",
        "rocksdb.comparator": b"leveldb.BytewiseComparator",
        "rocksdb.compression": b"Snappy",
        "rocksdb.data.size": put_uvarint(data_size),
        "rocksdb.deleted.keys": put_uvarint(0),
        "rocksdb.filter.size": put_uvarint(0),
        "rocksdb.index.size": put_uvarint(index_size),
        "rocksdb.merge.operands": put_uvarint(0),
        "rocksdb.num.data.blocks": put_uvarint(max(1, len(blocks))),
        "rocksdb.num.entries": put_uvarint(sum(b.count for b in blocks)),
        "rocksdb.raw.key.size": put_uvarint(sum(b.raw_key_size for b in blocks)),
        "rocksdb.raw.value.size": put_uvarint(sum(b.raw_value_size for b in blocks)),
    }
    if partitions:
        props["rocksdb.index.partitions"] = put_uvarint(partitions)
        props["rocksdb.top-level.index.size"] = put_uvarint(top_size)
    props.update(user)
    return props


def _plain_block(items: dict[str, bytes]) -> bytes:
    """Properties and metaindex blocks: plain sorted keys, restart interval 1, uncompressed."""
    builder = BlockBuilder(1)
    for name in sorted(items, key=lambda n: n.encode()):
        builder.add(name.encode(), items[name])
    return _stored(builder.finish())


def read_blocks(data: bytes, name: str, split_key: bool) -> list[Block]:
    """The blocks of a table this module wrote, stored bytes reused as they are.

    ``split_key`` tells whether the table's last key is one where lakeFS splits ranges; no
    other block can end at one (a split key always closes its range).
    """
    reader = SSTableReader(data, name=name)
    handles = list(reader.data_block_handles())
    out: list[Block] = []
    for i, handle in enumerate(handles):
        payload = data[handle.offset : handle.offset + handle.size + 5]
        pairs = decode_block(reader.read_block(handle))
        if not pairs:
            continue
        key_size = sum(len(k) for k, _ in pairs)
        value_size = sum(len(v) for _, v in pairs)
        first, last = pairs[0][0][:-INTERNAL_KEY_TRAILER_SIZE], pairs[-1][0][:-INTERNAL_KEY_TRAILER_SIZE]
        final = i == len(handles) - 1  # inner blocks end at cuts; the last may end at a flush
        out.append(Block(first, last, len(pairs), payload, key_size, value_size, split_key and final,
                         not final))  # fmt: skip
    return out
