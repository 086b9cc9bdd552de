"""lakeFS's ``catalog.Entry``: the value of every object in a range.

Field numbers follow ``pkg/catalog/catalog.proto`` (docs/formats/lakefs-ranges.md, "Graveler
values"). The GC only needs ``address`` and ``address_type``; :func:`decode_address` extracts them without
building an :class:`Entry`, which matters when a mark decodes tens of millions of entries.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timezone

from lakefs_gc.sstable import ident
from lakefs_gc.sstable.protobuf import (
    LENGTH_DELIMITED,
    VARINT,
    as_int64,
    iter_fields,
    put_bytes_field,
    put_varint_field,
)


class AddressType(enum.IntEnum):
    """How ``Entry.address`` is resolved (lakefs-storage.md, "Physical addresses")."""

    BY_PREFIX_DEPRECATED = 0
    RELATIVE = 1
    FULL = 2


@dataclass(frozen=True, slots=True)
class Entry:
    """One object as a lakeFS range stores it.

    ``last_modified_ns`` keeps lakeFS's nanosecond precision (``datetime`` cannot).
    """

    address: str
    address_type: AddressType = AddressType.BY_PREFIX_DEPRECATED
    size: int = 0
    etag: str = ""
    last_modified_ns: int | None = None
    content_type: str = ""
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def last_modified(self) -> datetime | None:
        if self.last_modified_ns is None:
            return None
        seconds, nanos = divmod(self.last_modified_ns, 1_000_000_000)
        return datetime.fromtimestamp(seconds, tz=timezone.utc).replace(microsecond=nanos // 1000)


def epoch_ns(t: datetime) -> int:
    """Nanoseconds since the Unix epoch of an aware datetime, exactly (no float rounding)."""
    delta = t - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def format_rfc3339_ns(epoch_ns: int) -> str:
    """RFC 3339 UTC with nanoseconds as Go prints them (trailing zeros trimmed)."""
    seconds, nanos = divmod(epoch_ns, 1_000_000_000)
    base = datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    if nanos:
        base += "." + f"{nanos:09d}".rstrip("0")
    return base + "Z"


def decode_entry(data: bytes) -> Entry:
    """Decode a protobuf ``catalog.Entry``; raises ValueError on malformed input."""
    address = etag = content_type = ""
    size = 0
    address_type = 0
    last_modified_ns: int | None = None
    metadata: dict[str, str] = {}
    for num, wire, value in iter_fields(data):
        if wire == LENGTH_DELIMITED:
            assert isinstance(value, bytes)
            if num == 1:
                address = value.decode("utf-8")
            elif num == 2:
                last_modified_ns = _decode_timestamp(value)
            elif num == 4:
                etag = value.decode("utf-8")
            elif num == 5:
                k, v = _decode_map_entry(value)
                metadata[k] = v
            elif num == 7:
                content_type = value.decode("utf-8", "replace")
        elif wire == VARINT:
            assert isinstance(value, int)
            if num == 3:
                size = as_int64(value)
            elif num == 6:
                address_type = value
    return Entry(
        address=address,
        address_type=_address_type(address_type),
        size=size,
        etag=etag,
        last_modified_ns=last_modified_ns,
        content_type=content_type,
        metadata=metadata,
    )


def decode_address(data: bytes) -> tuple[str, AddressType]:
    """Only ``(address, address_type)`` of an encoded Entry: the GC's hot path."""
    address = ""
    address_type = 0
    for num, _wire, value in iter_fields(data):
        if num == 1 and isinstance(value, bytes):
            address = value.decode("utf-8")
        elif num == 6 and isinstance(value, int):
            address_type = value
    return address, _address_type(address_type)


def encode_entry(entry: Entry) -> bytes:
    """Encode as Go's ``proto.Marshal`` would (field order, zero values omitted, sorted map)."""
    out = put_bytes_field(1, entry.address.encode())
    if entry.last_modified_ns is not None:
        seconds, nanos = divmod(entry.last_modified_ns, 1_000_000_000)
        ts = put_varint_field(1, seconds) + put_varint_field(2, nanos)
        out += put_bytes_field(2, ts, keep_empty=True)
    out += put_varint_field(3, entry.size)
    out += put_bytes_field(4, entry.etag.encode())
    for k in sorted(entry.metadata):
        kv = put_bytes_field(1, k.encode()) + put_bytes_field(2, entry.metadata[k].encode())
        out += put_bytes_field(5, kv, keep_empty=True)
    out += put_varint_field(6, int(entry.address_type))
    out += put_bytes_field(7, entry.content_type.encode())
    return out


def entry_identity(entry: Entry) -> bytes:
    """lakeFS's entry identity (``catalog.EntryToValue``): SHA-256 over size, etag, metadata
    and, when present, content type, in ``ident`` typed encoding. Equal identities mean equal
    content, which lakeFS uses for diffs and merges."""
    h = hashlib.sha256()
    ident.marshal_int64(h, entry.size)
    ident.marshal_string(h, entry.etag)
    ident.marshal_string_map(h, entry.metadata)
    if entry.content_type:
        ident.marshal_string(h, entry.content_type)
    return h.digest()


def _decode_timestamp(buf: bytes) -> int:
    seconds = nanos = 0
    for num, _wire, value in iter_fields(buf):
        if num == 1 and isinstance(value, int):
            seconds = as_int64(value)
        elif num == 2 and isinstance(value, int):
            nanos = as_int64(value)
    return seconds * 1_000_000_000 + nanos


def _decode_map_entry(buf: bytes) -> tuple[str, str]:
    key = value = ""
    for num, _wire, raw in iter_fields(buf):
        if num == 1 and isinstance(raw, bytes):
            key = raw.decode("utf-8")
        elif num == 2 and isinstance(raw, bytes):
            value = raw.decode("utf-8")
    return key, value


def _address_type(value: int) -> AddressType:
    try:
        return AddressType(value)
    except ValueError as e:
        raise ValueError(f"unknown address_type {value}") from e
