"""Writer of RocksDB block-based tables that lakeFS, pebble and RocksDB can read.

Mirrors what lakeFS's pebble writer produces (docs/formats/lakefs-ranges.md, "File layout"):
format version 2, CRC-32C, 4 KiB data blocks with restart interval 16, Snappy per block (kept only when it
saves at least 1/8, as pebble does), a two-level index once the index outgrows one block, and a properties
block with RocksDB's standard properties plus caller-supplied user properties.
"""

from __future__ import annotations

from typing import BinaryIO

from lakefs_gc.sstable.block import BlockBuilder
from lakefs_gc.sstable.format import (
    CHECKSUM_CRC32C,
    FORMAT_VERSION,
    INTERNAL_KEY_TRAILER,
    NO_COMPRESSION,
    SNAPPY_COMPRESSION,
    BlockHandle,
    Footer,
    block_checksum,
    snappy_compress,
)
from lakefs_gc.sstable.reader import INDEX_TYPE_PROPERTY, INDEX_TYPE_TWO_LEVEL, PROPERTIES_BLOCK
from lakefs_gc.sstable.varint import put_uvarint

DEFAULT_BLOCK_SIZE = 4096
DEFAULT_RESTART_INTERVAL = 16


class TableWriter:
    """Streams sorted ``(user_key, value)`` pairs into one table on a binary file object.

    Keys must be strictly increasing (byte order); each is stored as an internal key with
    sequence number 0 and kind SET, exactly as lakeFS's writer stores them.
    """

    def __init__(
        self,
        out: BinaryIO,
        *,
        block_size: int = DEFAULT_BLOCK_SIZE,
        index_block_size: int = DEFAULT_BLOCK_SIZE,
        restart_interval: int = DEFAULT_RESTART_INTERVAL,
        compress: bool = True,
    ) -> None:
        self._out = out
        self._offset = 0
        self._block_size = block_size
        self._index_block_size = index_block_size
        self._compress = compress
        self._data = BlockBuilder(restart_interval)
        self._index = BlockBuilder(1)
        self._top_index = BlockBuilder(1)
        self._partitions = 0
        self._top_level_size = 0
        self._last_user_key: bytes | None = None
        self.entries = 0
        self._raw_key_size = 0
        self._raw_value_size = 0
        self._data_size = 0
        self._index_size = 0
        self._data_blocks = 0
        self._finished = False

    @property
    def estimated_size(self) -> int:
        """Bytes written so far plus the pending data block (lakeFS's ``estimated_size_bytes``)."""
        return self._offset + self._data.estimated_size()

    def add(self, user_key: bytes, value: bytes) -> None:
        if self._finished:
            raise ValueError("table already finished")
        if self._last_user_key is not None and user_key <= self._last_user_key:
            raise ValueError(f"keys must be strictly increasing: {user_key!r} after {self._last_user_key!r}")
        if self._data.entries and self._data.estimated_size() >= self._block_size:
            self._flush_data_block()
        ikey = user_key + INTERNAL_KEY_TRAILER
        self._data.add(ikey, value)
        self._last_user_key = user_key
        self.entries += 1
        self._raw_key_size += len(ikey)
        self._raw_value_size += len(value)

    def finish(self, user_properties: dict[str, bytes] | None = None) -> int:
        """Write index, properties, metaindex and footer; return the file size."""
        if self._data.entries or self.entries == 0:
            self._flush_data_block()
        index_handle = self._write_index()
        props = self._properties(user_properties or {})
        props_handle = self._write_block(_build_plain_block(props), compress=False)
        metaindex = _build_plain_block({PROPERTIES_BLOCK.decode(): props_handle.encode()})
        metaindex_handle = self._write_block(metaindex, compress=False)
        footer = Footer(CHECKSUM_CRC32C, metaindex_handle, index_handle, FORMAT_VERSION).encode()
        self._out.write(footer)
        self._offset += len(footer)
        self._finished = True
        return self._offset

    # -- internals ------------------------------------------------------------------------
    def _flush_data_block(self) -> None:
        last_key = self._data.last_key
        handle = self._write_block(self._data.finish(), compress=self._compress)
        self._data_size = self._offset
        self._data_blocks += 1
        if self._index.entries and self._index.estimated_size() >= self._index_block_size:
            self._flush_index_partition()
        self._index.add(last_key, handle.encode())

    def _flush_index_partition(self) -> None:
        last_key = self._index.last_key
        start = self._offset
        handle = self._write_block(self._index.finish(), compress=False)
        self._index_size += self._offset - start
        self._top_index.add(last_key, handle.encode())
        self._partitions += 1

    def _write_index(self) -> BlockHandle:
        if self._partitions:
            self._flush_index_partition()
            start = self._offset
            handle = self._write_block(self._top_index.finish(), compress=False)
            self._top_level_size = self._offset - start
        else:
            start = self._offset
            handle = self._write_block(self._index.finish(), compress=False)
        self._index_size += self._offset - start
        return handle

    def _write_block(self, block: bytes, *, compress: bool) -> BlockHandle:
        ctype = NO_COMPRESSION
        if compress:
            compressed = snappy_compress(block)
            if len(compressed) < len(block) - len(block) // 8:
                block, ctype = compressed, SNAPPY_COMPRESSION
        handle = BlockHandle(self._offset, len(block))
        trailer = bytes((ctype,)) + block_checksum(block, ctype).to_bytes(4, "little")
        self._out.write(block)
        self._out.write(trailer)
        self._offset += len(block) + len(trailer)
        return handle

    def _properties(self, user: dict[str, bytes]) -> dict[str, bytes]:
        two_level = self._partitions > 0
        props: dict[str, bytes] = {
            "rocksdb.block.based.table.index.type": (INDEX_TYPE_TWO_LEVEL if two_level else 0).to_bytes(
                4, "little"
            ),
            "rocksdb.block.based.table.prefix.filtering": b"0",
            "rocksdb.block.based.table.whole.key.filtering": b"0",
            "rocksdb.comparator": b"leveldb.BytewiseComparator",
            "rocksdb.compression": b"Snappy" if self._compress else b"NoCompression",
            "rocksdb.data.size": put_uvarint(self._data_size),
            "rocksdb.deleted.keys": put_uvarint(0),
            "rocksdb.filter.size": put_uvarint(0),
            "rocksdb.index.size": put_uvarint(self._index_size),
            "rocksdb.merge.operands": put_uvarint(0),
            "rocksdb.num.data.blocks": put_uvarint(self._data_blocks),
            "rocksdb.num.entries": put_uvarint(self.entries),
            "rocksdb.raw.key.size": put_uvarint(self._raw_key_size),
            "rocksdb.raw.value.size": put_uvarint(self._raw_value_size),
        }
        if two_level:
            props["rocksdb.index.partitions"] = put_uvarint(self._partitions)
            props["rocksdb.top-level.index.size"] = put_uvarint(self._top_level_size)
        for name, value in user.items():
            if name.startswith("rocksdb.") or name == INDEX_TYPE_PROPERTY:
                raise ValueError(f"user property {name!r} uses the reserved rocksdb. prefix")
            props[name] = value
        return props


def _build_plain_block(items: dict[str, bytes]) -> bytes:
    """Properties and metaindex blocks: plain (non-internal) sorted keys, restart interval 1."""
    builder = BlockBuilder(1)
    for name in sorted(items, key=lambda n: n.encode()):
        builder.add(name.encode(), items[name])
    return builder.finish()
