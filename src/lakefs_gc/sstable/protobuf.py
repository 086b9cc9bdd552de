"""A minimal protobuf wire-format codec for the two messages lakeFS stores in ranges.

``catalog.Entry`` and ``committed.RangeData`` are tiny; hand decoding avoids a protobuf
runtime dependency and generated code, and is faster for the hot path (decoding millions of
range entries). Unknown fields are skipped, as any protobuf reader must.
"""

from __future__ import annotations

from collections.abc import Iterator

from lakefs_gc.sstable.varint import put_uvarint, read_uvarint

VARINT = 0
FIXED64 = 1
LENGTH_DELIMITED = 2
FIXED32 = 5


def iter_fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """Yield ``(field_number, wire_type, value)``; value is an int or the delimited bytes."""
    pos = 0
    end = len(buf)
    while pos < end:
        tag, pos = read_uvarint(buf, pos)
        field, wire = tag >> 3, tag & 7
        if wire == VARINT:
            value, pos = read_uvarint(buf, pos)
            yield field, wire, value
        elif wire == LENGTH_DELIMITED:
            n, pos = read_uvarint(buf, pos)
            if pos + n > end:
                raise ValueError(f"field {field} length {n} overruns the message")
            yield field, wire, buf[pos : pos + n]
            pos += n
        elif wire == FIXED64:
            if pos + 8 > end:
                raise ValueError(f"field {field} fixed64 overruns the message")
            yield field, wire, int.from_bytes(buf[pos : pos + 8], "little")
            pos += 8
        elif wire == FIXED32:
            if pos + 4 > end:
                raise ValueError(f"field {field} fixed32 overruns the message")
            yield field, wire, int.from_bytes(buf[pos : pos + 4], "little")
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire} for field {field}")


def as_int64(value: int) -> int:
    """Interpret a decoded varint as a two's-complement int64 (protobuf ``int64``)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def put_varint_field(field: int, value: int) -> bytes:
    """Encode an integer field; proto3 omits zero values."""
    if value == 0:
        return b""
    return put_uvarint(field << 3) + put_uvarint(value & 0xFFFFFFFFFFFFFFFF)


def put_bytes_field(field: int, value: bytes, *, keep_empty: bool = False) -> bytes:
    """Encode a length-delimited field; proto3 omits empty values unless it's a message."""
    if not value and not keep_empty:
        return b""
    return put_uvarint((field << 3) | LENGTH_DELIMITED) + put_uvarint(len(value)) + value
