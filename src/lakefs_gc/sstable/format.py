"""RocksDB block-based table constants, block handles, footer and block trailers.

lakeFS writes its ranges with pebble in ``TableFormatRocksDBv2`` (docs/formats/lakefs-ranges.md,
"File layout"): a 53-byte footer, CRC-32C checksums and per-block Snappy or no compression. Everything here is
byte layout; decisions about *what* to read live in the reader.
"""

from __future__ import annotations

from dataclasses import dataclass

import cramjam
import crc32c

from lakefs_gc.sstable.varint import put_uvarint, read_uvarint

MAGIC = bytes.fromhex("f7cff485b741e288")
LEVELDB_MAGIC = bytes.fromhex("57fb808b247547db")
LEGACY_ROCKSDB_MAGIC = bytes.fromhex("0888cc31b8a2dbdb")  # kLegacyBlockBasedTableMagicNumber
FOOTER_SIZE = 53
TRAILER_SIZE = 5
FORMAT_VERSION = 2
SUPPORTED_FORMAT_VERSIONS = (1, 2)

CHECKSUM_CRC32C = 1
CHECKSUM_NAMES = {0: "none", 1: "CRC32C", 2: "xxHash", 3: "xxHash64", 4: "XXH3"}

NO_COMPRESSION = 0
SNAPPY_COMPRESSION = 1
COMPRESSION_NAMES = {
    0: "none",
    1: "Snappy",
    2: "zlib",
    3: "BZip2",
    4: "LZ4",
    5: "LZ4HC",
    6: "Xpress",
    7: "ZSTD",
}

#: internal-key trailer pebble/RocksDB append to every data-block key: seqnum 0, kind SET
INTERNAL_KEY_TRAILER = bytes.fromhex("0100000000000000")
INTERNAL_KEY_TRAILER_SIZE = 8

_CRC_MASK_DELTA = 0xA282EAD8


@dataclass(frozen=True, slots=True)
class BlockHandle:
    """Where a block lives in the file; ``size`` excludes the 5-byte trailer."""

    offset: int
    size: int

    def encode(self) -> bytes:
        return put_uvarint(self.offset) + put_uvarint(self.size)

    @classmethod
    def decode(cls, buf: bytes, pos: int = 0) -> tuple[BlockHandle, int]:
        offset, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        return cls(offset, size), pos


@dataclass(frozen=True, slots=True)
class Footer:
    checksum_type: int
    metaindex: BlockHandle
    index: BlockHandle
    format_version: int

    def encode(self) -> bytes:
        handles = self.metaindex.encode() + self.index.encode()
        body = bytes((self.checksum_type,)) + handles.ljust(40, b"\x00")
        return body + self.format_version.to_bytes(4, "little") + MAGIC


def mask_crc(crc: int) -> int:
    """RocksDB's masked CRC: rotate right by 15 and add a constant (mod 2^32)."""
    return (((crc >> 15) | (crc << 17)) + _CRC_MASK_DELTA) & 0xFFFFFFFF


def block_checksum(block: bytes, compression_type: int) -> int:
    """Masked CRC-32C over ``block || compression_type`` as stored in a block trailer."""
    return mask_crc(crc32c.crc32c(bytes((compression_type,)), crc32c.crc32c(block)))


def snappy_decompress(block: bytes) -> bytes:
    return bytes(cramjam.snappy.decompress_raw(block))


def snappy_compress(block: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(block))
