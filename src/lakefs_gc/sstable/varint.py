"""Varint codecs used by RocksDB blocks, graveler values and protobuf.

RocksDB and protobuf use unsigned LEB128 varints; graveler prefixes value components with
Go's ``binary.PutVarint`` (zigzag-encoded signed varints). Decoders return ``(value, next_pos)``
and raise :class:`ValueError` on truncation so callers can attach the file and offset.
"""

from __future__ import annotations

_MAX_VARINT_BYTES = 10


def read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode an unsigned varint at ``pos``; return the value and the position after it."""
    result = 0
    shift = 0
    end = len(buf)
    for _ in range(_MAX_VARINT_BYTES):
        if pos >= end:
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise ValueError("varint longer than 10 bytes")


def read_zigzag(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode a zigzag (Go ``binary.Varint``) signed varint."""
    raw, pos = read_uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def put_uvarint(value: int) -> bytes:
    """Encode a non-negative integer as an unsigned varint."""
    if value < 0:
        raise ValueError("put_uvarint takes a non-negative integer")
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def put_zigzag(value: int) -> bytes:
    """Encode a signed integer as Go's ``binary.PutVarint`` does."""
    return put_uvarint((value << 1) ^ (value >> 63) if value < 0 else value << 1)
