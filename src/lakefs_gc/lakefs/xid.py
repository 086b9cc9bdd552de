"""lakeFS's identifiers: xids and the *descending* xids used for data slices and GC run ids.

An xid is 12 bytes (4-byte big-endian seconds, 3-byte machine, 2-byte pid, 3-byte counter)
printed as 20 lower-case base32hex characters. lakeFS names data slices and GC runs with a
descending xid, ``xid.NewWithTime(64060588800 − t)`` (docs/formats/lakefs-storage.md, "xids
and slices"), so newer slices sort first; decoding it back tells when a slice or a mark was created.
"""

from __future__ import annotations

import base64
import itertools
import os
import secrets
import threading
from datetime import datetime, timezone

_DESCENDING_BASE = 64_060_588_800
_WRAP = 1 << 32
_counter = itertools.count(secrets.randbelow(1 << 24))
_lock = threading.Lock()
_MACHINE = secrets.token_bytes(3)


def new_xid(at: datetime) -> str:
    """A fresh xid for time ``at`` (unique within the process)."""
    return _encode(int(at.timestamp()) % _WRAP)


def new_descending_xid(at: datetime) -> str:
    """A fresh descending xid: lexicographically smaller for later times."""
    return _encode((_DESCENDING_BASE - int(at.timestamp())) % _WRAP)


def xid_time(xid: str) -> datetime:
    """The time encoded in an (ascending) xid."""
    return datetime.fromtimestamp(_timestamp(xid), tz=timezone.utc)


def descending_xid_time(xid: str) -> datetime:
    """The creation time of a descending xid (``3931046656 − ts``, modulo 2^32)."""
    return datetime.fromtimestamp((_DESCENDING_BASE - _timestamp(xid)) % _WRAP, tz=timezone.utc)


def _encode(seconds: int) -> str:
    with _lock:
        counter = next(_counter) % (1 << 24)
    raw = (
        seconds.to_bytes(4, "big")
        + _MACHINE
        + (os.getpid() % (1 << 16)).to_bytes(2, "big")
        + counter.to_bytes(3, "big")
    )
    return base64.b32hexencode(raw).decode("ascii").rstrip("=").lower()


def _timestamp(xid: str) -> int:
    if len(xid) != 20:
        raise ValueError(f"not an xid (20 base32hex characters): {xid!r}")
    raw = base64.b32hexdecode(xid.upper() + "====")
    return int.from_bytes(raw[:4], "big")
