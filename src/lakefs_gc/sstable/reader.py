"""Lazy, checksum-verifying reader for RocksDB block-based tables as lakeFS/pebble write them.

A corrupt range must abort a mark rather than be read as "no references" (fail closed), so
every anomaly raises :class:`~lakefs_gc.errors.SSTableFormatError` naming the file and the
byte offset: wrong magic (LevelDB, truncation), checksum mismatch, unknown compression or
checksum type, malformed blocks. Entries are produced block by block; memory use is bounded by
one data block plus one index partition.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Protocol, runtime_checkable

from lakefs_gc.errors import SSTableFormatError
from lakefs_gc.sstable.block import BlockCorruption, decode_block
from lakefs_gc.sstable.format import (
    CHECKSUM_CRC32C,
    CHECKSUM_NAMES,
    COMPRESSION_NAMES,
    FOOTER_SIZE,
    INTERNAL_KEY_TRAILER_SIZE,
    LEGACY_ROCKSDB_MAGIC,
    LEVELDB_MAGIC,
    MAGIC,
    NO_COMPRESSION,
    SNAPPY_COMPRESSION,
    SUPPORTED_FORMAT_VERSIONS,
    TRAILER_SIZE,
    BlockHandle,
    Footer,
    block_checksum,
    snappy_decompress,
)
from lakefs_gc.sstable.varint import read_uvarint

PROPERTIES_BLOCK = b"rocksdb.properties"
INDEX_TYPE_PROPERTY = "rocksdb.block.based.table.index.type"
INDEX_TYPE_TWO_LEVEL = 2


@runtime_checkable
class RandomAccessSource(Protocol):
    """Anything that reads byte ranges: a pyarrow ``NativeFile`` satisfies it."""

    def size(self) -> int: ...

    def read_at(self, nbytes: int, offset: int) -> bytes: ...


class _BytesSource:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def size(self) -> int:
        return len(self._data)

    def read_at(self, nbytes: int, offset: int) -> bytes:
        return self._data[offset : offset + nbytes]

    def close(self) -> None:
        pass


class _FileSource:
    """A local file read with ``pread``. A file object, not a bare descriptor: a reader dropped
    without ``close()`` still gives its descriptor back when it is collected."""

    def __init__(self, path: Path) -> None:
        self._file = open(path, "rb", buffering=0)  # noqa: SIM115 (closed by close() or collection)
        self._size = os.fstat(self._file.fileno()).st_size

    def size(self) -> int:
        return self._size

    def read_at(self, nbytes: int, offset: int) -> bytes:
        return os.pread(self._file.fileno(), nbytes, offset)

    def close(self) -> None:
        self._file.close()


Source = str | os.PathLike[str] | bytes | RandomAccessSource


class SSTableReader:
    """Reads one table: footer, metaindex, properties and entries.

    ``source`` is a local path, the whole file as ``bytes``, or a random-access object with
    ``size()`` and ``read_at(nbytes, offset)``. ``name`` is used in error messages (defaults to
    the path). Iterating yields ``(user_key, value)`` with the 8-byte internal-key trailer
    stripped.
    """

    def __init__(self, source: Source, *, name: str | None = None) -> None:
        self._owned = False
        if isinstance(source, bytes):
            self._src: RandomAccessSource = _BytesSource(source)
            self.name = name or "<bytes>"
        elif isinstance(source, str | os.PathLike):
            path = Path(source)
            self.name = name or str(path)
            try:
                self._src = _FileSource(path)
            except OSError as e:
                raise SSTableFormatError(self.name, None, f"cannot open: {e.strerror or e}") from e
            self._owned = True
        else:
            self._src = source
            self.name = name or repr(source)
        try:
            self.size = self._src.size()
            self.footer = self._read_footer()
            self.properties = self._read_properties()
        except BaseException:
            self.close()
            raise

    # -- context management -------------------------------------------------------------
    def close(self) -> None:
        if self._owned:
            self._owned = False
            self._src.close()  # type: ignore[attr-defined]

    def __enter__(self) -> SSTableReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- public API -----------------------------------------------------------------------
    @property
    def two_level_index(self) -> bool:
        raw = self.properties.get(INDEX_TYPE_PROPERTY)
        return raw is not None and int.from_bytes(raw[:4], "little") == INDEX_TYPE_TWO_LEVEL

    def user_properties(self) -> dict[str, str]:
        """Properties that are not ``rocksdb.*`` (lakeFS's ``type``, ``count``, …) as text."""
        return {
            k: v.decode("utf-8", "backslashreplace")
            for k, v in self.properties.items()
            if not k.startswith("rocksdb.")
        }

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        for handle in self.data_block_handles():
            for ikey, value in self._decode(handle, self.read_block(handle)):
                if len(ikey) < INTERNAL_KEY_TRAILER_SIZE:
                    raise SSTableFormatError(
                        self.name, handle.offset, f"data-block key {ikey!r} is shorter than an internal key"
                    )
                yield ikey[:-INTERNAL_KEY_TRAILER_SIZE], value

    def data_block_handles(self) -> Iterator[BlockHandle]:
        """Handles of the data blocks in key order, through a one- or two-level index."""
        index = self.footer.index
        entries = self._decode(index, self.read_block(index))
        if not self.two_level_index:
            for _, value in entries:
                yield self._handle(value, index.offset)
            return
        for _, value in entries:
            partition = self._handle(value, index.offset)
            for _, inner in self._decode(partition, self.read_block(partition)):
                yield self._handle(inner, partition.offset)

    def read_block(self, handle: BlockHandle) -> bytes:
        """Read, checksum-verify and decompress one block."""
        end = handle.offset + handle.size + TRAILER_SIZE
        if end > self.size - FOOTER_SIZE:
            raise SSTableFormatError(
                self.name, handle.offset, f"block of {handle.size} bytes runs past the end of the table data"
            )
        raw = self._src.read_at(handle.size + TRAILER_SIZE, handle.offset)
        if len(raw) != handle.size + TRAILER_SIZE:
            raise SSTableFormatError(self.name, handle.offset, "short read (file truncated?)")
        block, ctype = raw[: handle.size], raw[handle.size]
        stored = int.from_bytes(raw[handle.size + 1 :], "little")
        if block_checksum(block, ctype) != stored:
            raise SSTableFormatError(self.name, handle.offset, "block checksum mismatch (corrupt data)")
        if ctype == NO_COMPRESSION:
            return block
        if ctype == SNAPPY_COMPRESSION:
            try:
                return snappy_decompress(block)
            except Exception as e:
                raise SSTableFormatError(self.name, handle.offset, f"invalid Snappy block: {e}") from e
        kind = COMPRESSION_NAMES.get(ctype, "unknown")
        raise SSTableFormatError(
            self.name,
            handle.offset,
            f"unsupported compression type {ctype} ({kind}); expected none or Snappy",
        )

    # -- internals ------------------------------------------------------------------------
    def _decode(self, handle: BlockHandle, block: bytes) -> list[tuple[bytes, bytes]]:
        try:
            return decode_block(block)
        except BlockCorruption as e:
            raise SSTableFormatError(self.name, handle.offset, f"malformed block (+{e.pos}): {e}") from e

    def _handle(self, value: bytes, where: int) -> BlockHandle:
        try:
            handle, end = BlockHandle.decode(value)
        except ValueError as e:
            raise SSTableFormatError(self.name, where, f"malformed block handle: {e}") from e
        if end != len(value):
            raise SSTableFormatError(
                self.name, where, "index value is not exactly one block handle (unsupported table format)"
            )
        return handle

    def _read_footer(self) -> Footer:
        if self.size == 0:
            raise SSTableFormatError(self.name, 0, "empty file")
        if self.size < FOOTER_SIZE:
            raise SSTableFormatError(
                self.name, 0, f"file of {self.size} bytes is shorter than a table footer"
            )
        at = self.size - FOOTER_SIZE
        raw = self._src.read_at(FOOTER_SIZE, at)
        magic = raw[-8:]
        if magic != MAGIC:
            raise SSTableFormatError(self.name, self.size - 8, _magic_reason(magic))
        version = int.from_bytes(raw[41:45], "little")
        if version not in SUPPORTED_FORMAT_VERSIONS:
            raise SSTableFormatError(self.name, at + 41, f"unsupported table format version {version}")
        checksum_type = raw[0]
        if checksum_type != CHECKSUM_CRC32C:
            kind = CHECKSUM_NAMES.get(checksum_type, "unknown")
            raise SSTableFormatError(
                self.name, at, f"unsupported checksum type {checksum_type} ({kind}); expected 1 (CRC32C)"
            )
        try:
            metaindex, pos = BlockHandle.decode(raw, 1)
            index, _ = BlockHandle.decode(raw, pos)
        except ValueError as e:
            raise SSTableFormatError(self.name, at + 1, f"malformed footer block handle: {e}") from e
        return Footer(checksum_type, metaindex, index, version)

    def _read_properties(self) -> dict[str, bytes]:
        meta = self.footer.metaindex
        handles = dict(self._decode(meta, self.read_block(meta)))
        raw = handles.get(PROPERTIES_BLOCK)
        if raw is None:
            return {}
        props = self._handle(raw, meta.offset)
        return {
            k.decode("utf-8", "backslashreplace"): v for k, v in self._decode(props, self.read_block(props))
        }


def _magic_reason(magic: bytes) -> str:
    if magic == LEVELDB_MAGIC:
        return "LevelDB table (magic 57fb808b247547db), not a RocksDB block-based table"
    if magic == LEGACY_ROCKSDB_MAGIC:
        return "legacy RocksDB footer (format version 0) is not supported"
    return f"bad magic {magic.hex()} (expected f7cff485b741e288): not an SSTable, or truncated"


def decode_numeric_property(name: str, raw: bytes) -> int | None:
    """Decode a numeric ``rocksdb.*`` property (varint, or fixed-width for a few names)."""
    if name == INDEX_TYPE_PROPERTY or name == "rocksdb.external_sst_file.version":
        return int.from_bytes(raw[:4], "little") if len(raw) >= 4 else None
    if name == "rocksdb.external_sst_file.global_seqno":
        return int.from_bytes(raw[:8], "little") if len(raw) >= 8 else None
    try:
        value, end = read_uvarint(raw, 0)
    except ValueError:
        return None
    return value if end == len(raw) else None
