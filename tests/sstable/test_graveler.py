"""Graveler values, catalog entries, range data and lakeFS-style content ids."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakefs_gc.sstable import (
    AddressType,
    Entry,
    SSTableReader,
    iter_metarange,
    iter_range_addresses,
    iter_range_entries,
    write_metarange,
    write_range,
)
from lakefs_gc.sstable.catalog import decode_entry, encode_entry, format_rfc3339_ns
from lakefs_gc.sstable.committed import RangeData, decode_range_data, encode_range_data
from lakefs_gc.sstable.graveler import marshal_value, unmarshal_value
from lakefs_gc.sstable.varint import put_uvarint, put_zigzag, read_uvarint, read_zigzag
from tests.support.rocksdb import SstDump


def test_varint_vectors() -> None:
    assert read_uvarint(bytes([0xAC, 0x02]), 0) == (300, 2)
    assert read_zigzag(b"\x01", 0) == (-1, 1)
    assert read_zigzag(b"\x02", 0) == (1, 1)
    assert read_zigzag(b"\x03", 0) == (-2, 1)
    # Go encoding/binary PutVarint vectors
    for value, encoded in [(0, "00"), (-1, "01"), (1, "02"), (-64, "7f"), (64, "8001"), (-65, "8101")]:
        assert put_zigzag(value).hex() == encoded
        assert read_zigzag(bytes.fromhex(encoded), 0) == (value, len(encoded) // 2)
    with pytest.raises(ValueError, match="truncated"):
        read_uvarint(b"\x80", 0)


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_uvarint_round_trip(value: int) -> None:
    assert read_uvarint(put_uvarint(value), 0)[0] == value


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_zigzag_round_trip(value: int) -> None:
    assert read_zigzag(put_zigzag(value), 0)[0] == value


entries_strategy = st.builds(
    Entry,
    address=st.text(max_size=80),
    address_type=st.sampled_from(list(AddressType)),
    size=st.integers(min_value=0, max_value=2**62),
    etag=st.text(alphabet="0123456789abcdef", max_size=32),
    last_modified_ns=st.one_of(st.none(), st.integers(min_value=0, max_value=4_000_000_000 * 10**9)),
    content_type=st.text(max_size=30),
    metadata=st.dictionaries(st.text(max_size=10), st.text(max_size=20), max_size=3),
)


@given(entries_strategy)
def test_entry_round_trip(entry: Entry) -> None:
    assert decode_entry(encode_entry(entry)) == entry


@given(st.binary(max_size=50), st.binary(max_size=50), st.integers(0, 2**63), st.integers(0, 2**62))
def test_range_data_round_trip(lo: bytes, hi: bytes, size: int, count: int) -> None:
    rd = RangeData(lo, hi, size, count)
    assert decode_range_data(encode_range_data(rd)) == rd


@given(st.binary(max_size=64), st.binary(max_size=500))
def test_value_round_trip(identity: bytes, data: bytes) -> None:
    assert unmarshal_value(marshal_value(identity, data)) == (identity, data)
    assert unmarshal_value(marshal_value(identity, data) + b"trailing") == (identity, data)


def test_rfc3339_nanoseconds() -> None:
    assert format_rfc3339_ns(1628163584_471124555) == "2021-08-05T11:39:44.471124555Z"
    assert format_rfc3339_ns(1656366525_000000000) == "2022-06-27T21:48:45Z"
    assert format_rfc3339_ns(1_500_000_000_100_000_000) == "2017-07-14T02:40:00.1Z"


def sample_entries(n: int, prefix: str = "p") -> list[tuple[bytes, Entry]]:
    return [
        (
            f"{prefix}/{i:06d}".encode(),
            Entry(f"data/gqv3epl4fd2o8m3men70/obj{i:06d}", AddressType.RELATIVE, i, f"{i:032x}", 10**18 + i),
        )
        for i in range(n)
    ]


def test_range_and_metarange_written_like_lakefs(tmp_path: Path, sst_dump: SstDump) -> None:
    first = write_range(tmp_path, sample_entries(3000, "a"))
    second = write_range(tmp_path, sample_entries(10, "b"))
    meta = write_metarange(tmp_path, [first, second])
    assert (tmp_path / first.id).is_file() and (tmp_path / meta.id).is_file()
    assert len(first.id) == 64 and int(first.id, 16) >= 0
    with SSTableReader(tmp_path / first.id) as reader:
        props = reader.user_properties()
        assert props["type"] == "ranges"
        assert (props["min_key"], props["max_key"], props["count"]) == ("a/000000", "a/002999", "3000")
        assert int(props["estimated_size_bytes"]) == first.estimated_size > 0
        assert [e for _, e in iter_range_entries(reader)] == [e for _, e in sample_entries(3000, "a")]
        assert next(iter_range_addresses(reader)) == (
            "data/gqv3epl4fd2o8m3men70/obj000000",
            AddressType.RELATIVE,
        )
    with SSTableReader(tmp_path / meta.id) as reader:
        assert reader.user_properties()["type"] == "metaranges"
        assert [(k, rid) for k, rid, _ in iter_metarange(reader)] == [
            (b"a/002999", first.id),
            (b"b/000009", second.id),
        ]
    assert len(sst_dump(tmp_path / first.id)) == 3000


def test_content_ids_are_deterministic_and_content_sensitive(tmp_path: Path) -> None:
    a = write_range(tmp_path / "a", sample_entries(50))
    b = write_range(tmp_path / "b", sample_entries(50))
    assert a.id == b.id
    assert (tmp_path / "a" / a.id).read_bytes() == (tmp_path / "b" / b.id).read_bytes()
    changed = sample_entries(50)
    changed[7] = (changed[7][0], Entry("data/x/other", AddressType.RELATIVE, 1))
    assert write_range(tmp_path / "c", changed).id != a.id
    # Empty tables still differ by their metadata (lakeFS hashes it for exactly this reason).
    assert write_range(tmp_path / "d", []).id != write_metarange(tmp_path / "d", []).id


def test_range_id_matches_lakefs_hashing() -> None:
    """Pinned: sha256 over len|bytes| records plus ident.MarshalStringMap({"type": "ranges"})."""
    import hashlib

    from lakefs_gc.sstable.catalog import entry_identity

    key, entry = sample_entries(1)[0]
    value = marshal_value(entry_identity(entry), encode_entry(entry))
    h = hashlib.sha256()
    for part in (key, value):
        h.update(str(len(part)).encode() + part + b"|")
    h.update(b"\x04" + b"\x02\x08" + (1).to_bytes(8, "big"))
    for s in (b"type", b"ranges"):
        h.update(b"\x01" + b"\x02\x08" + len(s).to_bytes(8, "big") + s)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        assert write_range(Path(tmp), [(key, entry)]).id == h.hexdigest()
