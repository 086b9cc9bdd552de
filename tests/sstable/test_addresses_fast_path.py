"""The addresses-only fast path agrees with the general decoder, entry for entry and error for error.

The fast path re-implements block, value and ``catalog.Entry`` walking inline, so it is checked
against the general path (``decode_block`` → ``unmarshal_value`` → ``decode_address``) on real
lakeFS ranges, on generated entries of every shape, and on every single-byte corruption of a
decompressed block: wherever the general path raises, the fast path must raise too.
"""

from __future__ import annotations

import io
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakefs_gc.errors import SSTableFormatError
from lakefs_gc.sstable import (
    AddressType,
    Entry,
    SSTableReader,
    TableWriter,
    iter_range_addresses,
    iter_range_entries,
)
from lakefs_gc.sstable.addresses import (
    block_addresses,
    block_contents,
    block_head_entries,
    block_path_sizes,
    range_address_blocks,
    range_content_blocks,
    range_head_entry_blocks,
)
from lakefs_gc.sstable.block import BlockBuilder, decode_block
from lakefs_gc.sstable.catalog import decode_address, decode_entry, encode_entry, entry_identity
from lakefs_gc.sstable.format import INTERNAL_KEY_TRAILER
from lakefs_gc.sstable.graveler import marshal_value, unmarshal_value
from lakefs_gc.sstable.protobuf import put_bytes_field, put_varint_field


def tagged(address: str, address_type: int) -> str:
    """A ``keep`` that shows which entries were passed to it, and drops FULL ones under ``drop/``."""
    if address_type == AddressType.FULL and address.startswith("drop/"):
        return None  # type: ignore[return-value]
    return f"{address_type}:{address}"


def general(block: bytes) -> list[str]:
    """What the general decoders make of one block, with the same ``keep``."""
    out = []
    for ikey, value in decode_block(block):
        if len(ikey) < len(INTERNAL_KEY_TRAILER):
            raise ValueError("short key")
        address, address_type = decode_address(unmarshal_value(value)[1])
        if address_type == AddressType.RELATIVE:
            out.append(address)
        elif (kept := tagged(address, address_type)) is not None:
            out.append(kept)
    return out


def outcome(decode: object, block: bytes) -> list[str] | str:
    try:
        return decode(block)  # type: ignore[operator,no-any-return]
    except Exception:
        return "rejected"


def block_of(values: list[bytes], restart_interval: int = 4) -> bytes:
    builder = BlockBuilder(restart_interval)
    for i, value in enumerate(values):
        builder.add(f"path/{i:06d}".encode() + INTERNAL_KEY_TRAILER, value)
    return builder.finish()


entries = st.builds(
    Entry,
    address=st.text(max_size=40),
    address_type=st.sampled_from(AddressType),
    size=st.integers(min_value=0, max_value=2**62),
    etag=st.text(max_size=40),
    last_modified_ns=st.one_of(st.none(), st.integers(min_value=0, max_value=2**62)),
    content_type=st.text(max_size=20),
    metadata=st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
)


@given(st.lists(entries, min_size=1, max_size=30), st.integers(min_value=1, max_value=16))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # shared cores
def test_agrees_with_the_general_path_on_any_entries(items: list[Entry], interval: int) -> None:
    block = block_of([marshal_value(entry_identity(e), encode_entry(e)) for e in items], interval)
    assert block_addresses(block, tagged) == general(block)


def odd_values() -> list[bytes]:
    """Values a generic protobuf reader accepts but Go would not write: out-of-order, repeated,
    unknown and multi-byte-tag fields, address types as fixed-width ints, long varints."""
    return [
        marshal_value(b"", put_varint_field(6, 1) + put_bytes_field(1, b"b")),
        marshal_value(
            b"x" * 200, put_bytes_field(1, b"a") + put_bytes_field(1, b"c") + put_varint_field(6, 2)
        ),
        marshal_value(b"i", put_bytes_field(1, b"d") + put_bytes_field(99, b"zz") + put_varint_field(200, 7)),
        marshal_value(b"", put_bytes_field(1, b"e") + bytes([0x31]) + (2).to_bytes(8, "little")),
        marshal_value(b"", put_bytes_field(1, b"f") + bytes([0x35]) + (1).to_bytes(4, "little")),
        marshal_value(b"", bytes([0x8A, 0x00, 0x01]) + b"g" + bytes([0x30, 0x81, 0x00])),
        marshal_value(b"", put_bytes_field(1, b"h" * 300) + bytes([0x18] + [0xFF] * 9 + [0x01])),
        marshal_value(b"", put_bytes_field(1, "ü".encode())) + b"trailing bytes are ignored",
    ]


def test_agrees_on_unusual_but_valid_encodings() -> None:
    block = block_of(odd_values())
    assert block_addresses(block, tagged) == general(block) == [
        "b", "2:c", "0:d", "2:e", "f", "g", "0:" + "h" * 300, "0:ü"
    ]  # fmt: skip


@pytest.mark.parametrize(
    "value",
    [
        b"",  # no identity length
        marshal_value(b"", put_varint_field(6, 3)),  # unknown address type
        marshal_value(b"", put_bytes_field(1, b"\xff")),  # not UTF-8
        marshal_value(b"", bytes([0x0A, 0x05]) + b"ab"),  # address overruns the message
        marshal_value(b"", bytes([0x18] + [0xFF] * 10 + [0x01])),  # varint of 11 bytes
        marshal_value(b"", bytes([0x18, 0x80])),  # varint runs past the message
        marshal_value(b"", bytes([0x0B])),  # group wire type
        marshal_value(b"", bytes([0x31, 0x00])),  # fixed64 runs past the message
        b"\x01" + b"\x00",  # negative identity length
        b"\x00\x03",  # negative data length
        b"\x00\x10ab",  # data longer than the value
        b"\x40" + b"x" * 10,  # identity longer than the value
    ],
)
def test_rejects_what_the_general_path_rejects(value: bytes) -> None:
    block = block_of([marshal_value(b"", put_bytes_field(1, b"ok")), value])
    assert outcome(general, block) == "rejected"
    assert outcome(lambda b: block_addresses(b, tagged), block) == "rejected"


def test_every_single_byte_corruption_is_decided_alike() -> None:
    """Flip, zero or max out each byte of a block (the CRC would catch this on disk; the
    decoders must still never disagree on a block the writer could have produced wrongly)."""
    for pos, byte, bad in corruptions(17):
        fast = outcome(lambda b: block_addresses(b, tagged), bad)
        assert fast == outcome(general, bad), (pos, byte)


def corruptions(seed: int) -> Iterator[tuple[int, int, bytes]]:
    """``(position, byte, block)``: a 6-entry block with one byte flipped, zeroed or maxed out."""
    items = [
        Entry(f"data/slice/{i:04d}", AddressType(i % 3), size=i * 1000, etag=f"{i:x}", last_modified_ns=i,
              content_type="t", metadata={"k": "v"} if i % 2 else {})
        for i in range(6)
    ]  # fmt: skip
    block = block_of([marshal_value(entry_identity(e), encode_entry(e)) for e in items], 2)
    rng = random.Random(seed)
    for pos in range(len(block)):
        for byte in {block[pos] ^ 0xFF, 0, 0x7F, 0x80, rng.randrange(256)}:
            yield pos, byte, block[:pos] + bytes([byte]) + block[pos + 1 :]


def test_same_addresses_as_the_general_reader(lakefs_sstables: Path) -> None:
    for name in ("range.sst", "ok1.sst", "56569996.sst"):
        with SSTableReader(lakefs_sstables / name) as reader:
            expected = [
                tagged(a, t) if t != AddressType.RELATIVE else a for a, t in iter_range_addresses(reader)
            ]
        with SSTableReader(lakefs_sstables / name) as reader:
            fast = [a for block in range_address_blocks(reader, tagged) for a in block]
        assert fast == [a for a in expected if a is not None], name


def test_a_corrupt_range_fails_with_its_name_and_key() -> None:
    """An address that is not UTF-8, in a block whose CRC is right: the general decoder's error."""
    reader = range_with_a_bad_address()
    with pytest.raises(SSTableFormatError, match=r"undecodable range entry at key b'k/1'") as err:
        list(range_address_blocks(reader, tagged))
    assert err.value.name == "r.sst"


# ---- (path, size): the identity-twin guard's view of a HEAD tree ----------------------------


def general_path_sizes(block: bytes) -> list[tuple[str, int]]:
    """What the general decoders make of one block's paths and sizes."""
    out = []
    for ikey, value in decode_block(block):
        if len(ikey) < len(INTERNAL_KEY_TRAILER):
            raise ValueError("short key")
        data = unmarshal_value(value)[1]
        decode_address(data)  # what the fast path checks of the rest of the entry
        out.append((ikey[: -len(INTERNAL_KEY_TRAILER)].decode(), decode_entry(data).size))
    return out


@given(st.lists(entries, min_size=1, max_size=30), st.integers(min_value=1, max_value=16))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # shared cores
def test_paths_and_sizes_agree_with_the_general_path(items: list[Entry], interval: int) -> None:
    block = block_of([marshal_value(entry_identity(e), encode_entry(e)) for e in items], interval)
    assert block_path_sizes(block) == general_path_sizes(block)
    assert [s for _, s in block_path_sizes(block)] == [e.size for e in items]


def test_paths_and_sizes_of_unusual_encodings() -> None:
    negative = marshal_value(b"", put_bytes_field(1, b"n") + put_varint_field(3, (1 << 64) - 5))
    twice = marshal_value(b"", put_varint_field(3, 7) + put_bytes_field(1, b"t") + put_varint_field(3, 9))
    block = block_of([*odd_values(), negative, twice])
    assert block_path_sizes(block) == general_path_sizes(block)
    assert block_path_sizes(block)[-2:] == [("path/000008", -5), ("path/000009", 9)]


def test_every_single_byte_corruption_is_decided_alike_for_paths_and_sizes() -> None:
    for pos, byte, bad in corruptions(19):
        fast = outcome(block_path_sizes, bad)
        general_answer = outcome(general_path_sizes, bad)
        # the fast path reads no etag, metadata or timestamp: where only those are broken the
        # general decoder alone rejects; anywhere else both decide alike
        assert fast == general_answer or fast != "rejected", (pos, byte)
        if fast != "rejected" and general_answer != "rejected":
            assert fast == general_answer, (pos, byte)


def test_same_paths_and_sizes_as_the_general_reader(lakefs_sstables: Path) -> None:
    for name in ("range.sst", "ok1.sst", "56569996.sst"):
        with SSTableReader(lakefs_sstables / name) as reader:
            expected = [(k.decode(), e.size) for k, e in iter_range_entries(reader)]
        with SSTableReader(lakefs_sstables / name) as reader:
            fast = [(p, s) for block in range_head_entry_blocks(reader, tagged) for p, s, _, _ in block]
        assert fast == expected and expected, name


def test_a_corrupt_range_fails_the_paths_too() -> None:
    with pytest.raises(SSTableFormatError, match=r"undecodable range entry at key b'k/1'"):
        list(range_head_entry_blocks(range_with_a_bad_address(), tagged))


def range_with_a_bad_address() -> SSTableReader:
    """Three entries, the second's address not UTF-8, in blocks whose CRC is right."""
    out = io.BytesIO()
    writer = TableWriter(out, compress=False)
    for i in range(3):
        address = b"\xff" if i == 1 else b"data/x/%d" % i
        writer.add(b"k/%d" % i, marshal_value(b"", put_bytes_field(1, address) + put_varint_field(6, 1)))
    writer.finish({})
    return SSTableReader(out.getvalue(), name="r.sst")


# ---- (path, size, address, checksum): the twin guard's view with content evidence ------------


def general_head_entries(block: bytes) -> list[tuple[str, int, str | None, str]]:
    """What the general decoders make of one block's paths, sizes, kept addresses and checksums."""
    out: list[tuple[str, int, str | None, str]] = []
    for ikey, value in decode_block(block):
        if len(ikey) < len(INTERNAL_KEY_TRAILER):
            raise ValueError("short key")
        data = unmarshal_value(value)[1]
        address, address_type = decode_address(data)
        kept = address if address_type == AddressType.RELATIVE else tagged(address, address_type)
        entry = decode_entry(data)
        out.append((ikey[: -len(INTERNAL_KEY_TRAILER)].decode(), entry.size, kept, entry.etag))
    return out


@given(st.lists(entries, min_size=1, max_size=30), st.integers(min_value=1, max_value=16))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # shared cores
def test_head_entries_agree_with_the_general_path(items: list[Entry], interval: int) -> None:
    block = block_of([marshal_value(entry_identity(e), encode_entry(e)) for e in items], interval)
    assert block_head_entries(block, tagged) == general_head_entries(block)
    assert [c for *_, c in block_head_entries(block, tagged)] == [e.etag for e in items]


def test_head_entries_as_the_general_reader(lakefs_sstables: Path) -> None:
    for name in ("range.sst", "ok1.sst", "56569996.sst"):
        with SSTableReader(lakefs_sstables / name) as reader:
            expected = [
                (k.decode(), e.size, e.address if e.address_type == AddressType.RELATIVE
                 else tagged(e.address, e.address_type), e.etag)
                for k, e in iter_range_entries(reader)
            ]  # fmt: skip
        with SSTableReader(lakefs_sstables / name) as reader:
            fast = [e for block in range_head_entry_blocks(reader, tagged) for e in block]
        assert fast == expected and expected, name


def test_a_corrupt_range_fails_the_head_entries_too() -> None:
    with pytest.raises(SSTableFormatError, match=r"undecodable range entry at key b'k/1'"):
        list(range_head_entry_blocks(range_with_a_bad_address(), tagged))


# ---- (size, address, checksum): a HEAD range read once for the classification and the guard --


@given(st.lists(entries, min_size=1, max_size=30), st.integers(min_value=1, max_value=16))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # shared cores
def test_contents_are_the_head_entries_without_paths(items: list[Entry], interval: int) -> None:
    block = block_of([marshal_value(entry_identity(e), encode_entry(e)) for e in items], interval)
    assert block_contents(block, tagged) == [(s, a, c) for _, s, a, c in general_head_entries(block)]


def test_contents_as_the_general_reader(lakefs_sstables: Path) -> None:
    for name in ("range.sst", "ok1.sst", "56569996.sst"):
        with SSTableReader(lakefs_sstables / name) as reader:
            expected = [
                (s, a, c) for block in range_head_entry_blocks(reader, tagged) for _, s, a, c in block
            ]
        with SSTableReader(lakefs_sstables / name) as reader:
            fast = [e for block in range_content_blocks(reader, tagged) for e in block]
        assert fast == expected and expected, name


def test_every_single_byte_corruption_is_decided_alike_for_contents() -> None:
    def contents(block: bytes) -> list[tuple[int, str | None, str]]:
        return [(s, a, c) for _, s, a, c in general_head_entries(block)]

    for pos, byte, bad in corruptions(23):
        fast = outcome(lambda b: block_contents(b, tagged), bad)
        general_answer = outcome(contents, bad)
        # as for paths and sizes: the general decoder alone rejects what only breaks a field or key
        # the fast path does not read; anywhere else both decide alike
        assert fast == general_answer or fast != "rejected", (pos, byte)
        if fast != "rejected" and general_answer != "rejected":
            assert fast == general_answer, (pos, byte)


def test_a_corrupt_range_fails_the_contents_too() -> None:
    with pytest.raises(SSTableFormatError, match=r"undecodable range entry at key b'k/1'"):
        list(range_content_blocks(range_with_a_bad_address(), tagged))
