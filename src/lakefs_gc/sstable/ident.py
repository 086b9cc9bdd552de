"""lakeFS's typed content hashing (``pkg/ident``), used for entry identities and range ids.

Each value is written with a type byte and a length, so different fields can never hash alike.
Two things lakeFS computes this way must match byte for byte: the identity of a range entry
(``catalog.EntryToValue``) and the metadata part of a range id (``DiskWriter.Close``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

_STRING = b"\x01"
_INT64 = b"\x02"
_STRING_MAP = b"\x04"


def marshal_int64(h: hashlib._Hash, value: int) -> None:
    h.update(_INT64 + b"\x08" + (value & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big"))


def marshal_string(h: hashlib._Hash, value: str) -> None:
    raw = value.encode()
    h.update(_STRING)
    marshal_int64(h, len(raw))
    h.update(raw)


def marshal_string_map(h: hashlib._Hash, values: Mapping[str, str]) -> None:
    """Keys sorted, each key and value as a typed string."""
    h.update(_STRING_MAP)
    marshal_int64(h, len(values))
    for key in sorted(values):
        marshal_string(h, key)
        marshal_string(h, values[key])
