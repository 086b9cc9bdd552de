"""Bad input is rejected with SSTableFormatError naming the file and byte offset."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakefs_gc.errors import SSTableFormatError
from lakefs_gc.sstable import SSTableReader
from lakefs_gc.sstable.format import FOOTER_SIZE, TRAILER_SIZE, block_checksum


def read_all(path: Path) -> None:
    with SSTableReader(path) as reader:
        list(reader)


def write(tmp_path: Path, data: bytes, name: str = "t.sst") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_empty_file(tmp_path: Path) -> None:
    path = write(tmp_path, b"")
    with pytest.raises(SSTableFormatError, match="empty file") as err:
        read_all(path)
    assert err.value.offset == 0 and err.value.name == str(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SSTableFormatError, match="cannot open"):
        read_all(tmp_path / "nope.sst")


def test_shorter_than_footer(tmp_path: Path) -> None:
    with pytest.raises(SSTableFormatError, match="shorter than a table footer"):
        read_all(write(tmp_path, b"\x00" * 20))


@pytest.mark.parametrize("cut", [4, 1, 100])
def test_truncated_file(lakefs_sstables: Path, tmp_path: Path, cut: int) -> None:
    data = (lakefs_sstables / "ok1.sst").read_bytes()[:-cut]
    path = write(tmp_path, data)
    with pytest.raises(SSTableFormatError, match="bad magic") as err:
        read_all(path)
    assert err.value.offset == len(data) - 8


def _rewrite_block_compression(data: bytes, offset: int, size: int, ctype: int) -> bytes:
    """Set a block's compression byte and re-compute its checksum, so only the type is wrong."""
    out = bytearray(data)
    block = bytes(out[offset : offset + size])
    out[offset + size] = ctype
    out[offset + size + 1 : offset + size + TRAILER_SIZE] = block_checksum(block, ctype).to_bytes(4, "little")
    return bytes(out)


def test_unknown_compression_zstd(pebble_testdata: Path, tmp_path: Path) -> None:
    original = (pebble_testdata / "h.sst").read_bytes()
    with SSTableReader(original) as reader:
        first = next(reader.data_block_handles())
    path = write(tmp_path, _rewrite_block_compression(original, first.offset, first.size, 7))
    with pytest.raises(SSTableFormatError, match=r"compression type 7 \(ZSTD\)") as err:
        read_all(path)
    assert err.value.offset == first.offset


def test_unknown_checksum_type(lakefs_sstables: Path, tmp_path: Path) -> None:
    data = bytearray((lakefs_sstables / "range.sst").read_bytes())
    data[-FOOTER_SIZE] = 3  # xxHash64
    path = write(tmp_path, bytes(data))
    with pytest.raises(SSTableFormatError, match=r"checksum type 3 \(xxHash64\)") as err:
        read_all(path)
    assert err.value.offset == len(data) - FOOTER_SIZE


def test_unsupported_format_version(lakefs_sstables: Path, tmp_path: Path) -> None:
    data = bytearray((lakefs_sstables / "range.sst").read_bytes())
    data[-12:-8] = (5).to_bytes(4, "little")
    with pytest.raises(SSTableFormatError, match="format version 5"):
        read_all(write(tmp_path, bytes(data)))


def test_checksum_mismatch_in_metaindex_fails_at_open(lakefs_sstables: Path, tmp_path: Path) -> None:
    data = (lakefs_sstables / "range.sst").read_bytes()
    with SSTableReader(data) as reader:
        meta = reader.footer.metaindex
    corrupt = bytearray(data)
    corrupt[meta.offset] ^= 0xFF
    with pytest.raises(SSTableFormatError, match="checksum mismatch") as err:
        SSTableReader(write(tmp_path, bytes(corrupt)))
    assert err.value.offset == meta.offset


def test_block_handle_past_end(lakefs_sstables: Path, tmp_path: Path) -> None:
    """A footer pointing outside the file (e.g. a table cut in its middle and re-footed)."""
    from lakefs_gc.sstable.format import BlockHandle, Footer

    data = (lakefs_sstables / "range.sst").read_bytes()
    with SSTableReader(data) as reader:
        footer = reader.footer
    bogus = Footer(footer.checksum_type, footer.metaindex, BlockHandle(10_000, 50), 2).encode()
    path = write(tmp_path, data[:-FOOTER_SIZE] + bogus)
    with pytest.raises(SSTableFormatError, match="runs past the end") as err:
        read_all(path)
    assert err.value.offset == 10_000


def test_undecodable_graveler_value_names_the_key(tmp_path: Path) -> None:
    from lakefs_gc.sstable import TableWriter, iter_range_entries

    path = tmp_path / "bad-values.sst"
    with path.open("wb") as out:
        writer = TableWriter(out)
        writer.add(b"some/key", b"\x7f\x01")  # identity length 63 > value size
        writer.finish({"type": b"ranges"})
    with SSTableReader(path) as reader, pytest.raises(SSTableFormatError, match="some/key"):
        list(iter_range_entries(reader))
