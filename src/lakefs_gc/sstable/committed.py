"""``committed.RangeData``: what a metarange records about each of its ranges."""

from __future__ import annotations

from dataclasses import dataclass

from lakefs_gc.sstable.protobuf import as_int64, iter_fields, put_bytes_field, put_varint_field


@dataclass(frozen=True, slots=True)
class RangeData:
    """Summary of one range: its key span, entry count and estimated byte size."""

    min_key: bytes
    max_key: bytes
    estimated_size: int
    count: int


def decode_range_data(data: bytes) -> RangeData:
    min_key = max_key = b""
    estimated_size = count = 0
    for num, _wire, value in iter_fields(data):
        if num == 1 and isinstance(value, bytes):
            min_key = value
        elif num == 2 and isinstance(value, bytes):
            max_key = value
        elif num == 3 and isinstance(value, int):
            estimated_size = value
        elif num == 4 and isinstance(value, int):
            count = as_int64(value)
    return RangeData(min_key, max_key, estimated_size, count)


def encode_range_data(rd: RangeData) -> bytes:
    return (
        put_bytes_field(1, rd.min_key)
        + put_bytes_field(2, rd.max_key)
        + put_varint_field(3, rd.estimated_size)
        + put_varint_field(4, rd.count)
    )
