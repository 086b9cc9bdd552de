"""Physical objects: their addresses, the entries that point at them, and the files themselves.

Every object gets a sequence number; its address is a function of that number and its creation
time alone (``data/<slice>/<xid>``: slices of ``slice_objects`` consecutive objects named by
the descending xid of their first object's time, as lakeFS names slices; the object xid carries
its time and, where lakeFS puts machine, pid and counter, the seed and the sequence number).
So the manifest and the inventory regenerate every address at the end from a few numbers per
group of objects, instead of remembering 20M strings.
"""

from __future__ import annotations

import base64
import hashlib
import math
import os
from dataclasses import dataclass

from lakefs_gc.sstable.varint import put_uvarint
from lakefs_gc.testing.blockstore import NamespaceStore

_DESCENDING_BASE = 64_060_588_800
CONTENT_TYPE = b"application/octet-stream"
#: identity = SHA-256 over lakeFS's ident encoding of (size, etag, metadata {}, content type)
_ID_ETAG = b"\x01\x02\x08" + (32).to_bytes(8, "big")
_ID_TAIL = b"\x04\x02\x08" + (0).to_bytes(8, "big") + b"\x01\x02\x08" + len(CONTENT_TYPE).to_bytes(8, "big")


#: the bytes of an object that carry its name (the rest of a larger object is zeros, a sparse file)
HEAD_BYTES = 32
_MASK = (1 << 64) - 1


_ALPHABET = "0123456789abcdefghijklmnopqrstuv"  # base32hex, lower case as xids print
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]


def xid(seconds: int, machine: bytes, tail: int) -> str:
    """A 20-character xid: 4 bytes of time, 3 of ``machine``, 5 of ``tail``."""
    raw = (seconds % (1 << 32)).to_bytes(4, "big") + machine + tail.to_bytes(5, "big")
    return base64.b32hexencode(raw).decode("ascii").rstrip("=").lower()


class XidMaker:
    """:func:`xid` for many tails: the first 11 characters depend on time and machine only."""

    def __init__(self, machine: bytes) -> None:
        self.machine = machine
        self._low_bit = machine[-1] & 1
        self._heads: dict[int, str] = {}

    def __call__(self, seconds: int, tail: int) -> str:
        head = self._heads.get(seconds)
        if head is None:
            head = xid(seconds, self.machine, 0)[:11]
            if len(self._heads) > 4096:
                self._heads.clear()
            self._heads[seconds] = head
        v = (self._low_bit << 44) | (tail << 4)  # bits 55..99 of the 100 the 20 characters hold
        pairs = _PAIRS
        return (head + pairs[(v >> 35) & 1023] + pairs[(v >> 25) & 1023] + pairs[(v >> 15) & 1023]
                + pairs[(v >> 5) & 1023] + _ALPHABET[v & 31])  # fmt: skip


@dataclass
class Objects:
    """Allocates sequence numbers, builds entries, and writes files when ``physical``.

    Sizes: ``object_size`` for every object when ``size_sigma`` is 0, else lognormal with median
    ``object_size`` and ``size_sigma`` (of the log), a function of the seed and the sequence number
    (so outputs regenerate them): sizes as a data lake's files have them, rarely equal, which is
    what the mark's identity-twin guard relies on to stay cheap. An object's content is its name
    (:meth:`content`, at most ``HEAD_BYTES``) followed by zeros, written as a sparse file; its ETag
    is the MD5 of that head (the whole content's when the object is no larger).
    """

    store: NamespaceStore
    seed: int
    slice_objects: int
    object_size: int
    physical: bool
    size_sigma: float = 0.0
    next_seq: int = 0

    def __post_init__(self) -> None:
        self.machine = hashlib.sha256(f"lakefs-gc synth {self.seed}".encode()).digest()[:3]
        sizes = hashlib.sha256(f"lakefs-gc synth sizes {self.seed}".encode()).digest()
        self._size_key = int.from_bytes(sizes[:8], "big")
        self._head = min(self.object_size, HEAD_BYTES)
        self._xid = XidMaker(self.machine)
        #: each slice's name: the descending xid of its first object's creation time
        self.slices: list[str] = []
        self.written = 0
        self._dir_fd: int | None = None
        self._dir_name = ""

    def address(self, seq: int, created: int) -> str:
        return f"data/{self.slices[seq // self.slice_objects]}/{self._xid(created, seq)}"

    def content(self, address: str) -> bytes:
        """The first bytes of the object (all of it when its size is ``object_size`` ≤ ``HEAD_BYTES``)."""
        return address.encode()[-self._head :].rjust(self._head, b".")

    def size(self, seq: int) -> int:
        """Object ``seq``'s size (see the class docstring): a normal deviate from the two 32-bit
        halves of a 64-bit hash (Box-Muller), fine enough that equal sizes are rare."""
        if not self.size_sigma:
            return self.object_size
        h = _mix(self._size_key ^ seq)
        u1, u2 = ((h >> 32) + 0.5) / 4294967296.0, (h & 0xFFFFFFFF) / 4294967296.0
        z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
        return max(self._head, min(1 << 40, int(self.object_size * math.exp(self.size_sigma * z))))

    def create(self, count: int, created: int) -> int:
        """Allocate ``count`` objects created at ``created`` (epoch seconds); their first seq."""
        first = self.next_seq
        for seq in range(first, first + count):
            if seq % self.slice_objects == 0:
                name = xid((_DESCENDING_BASE - created) % (1 << 32), self.machine, len(self.slices))
                self.slices.append(name)
                if self.physical and self.store.is_local:
                    os.makedirs(self.store.path(f"data/{name}"), exist_ok=True)
        self.next_seq += count
        return first

    def entries(self, first: int, count: int, created: int, *, graveler: bool) -> list[bytes]:
        """Encoded entries of objects ``first ..`` (graveler range values, or the bare
        ``catalog.Entry`` staging stores), writing the files when ``physical``."""
        out = []
        stamp = b"\x12" + bytes((len(put_uvarint(created)) + 1,)) + b"\x08" + put_uvarint(created)
        tail = b"\x30\x01\x3a" + bytes((len(CONTENT_TYPE),)) + CONTENT_TYPE
        for seq in range(first, first + count):
            address = self.address(seq, created)
            data = self.content(address)
            size = self.size(seq)
            size_field = b"\x18" + put_uvarint(size)
            size_id = b"\x02\x08" + size.to_bytes(8, "big")
            etag = hashlib.md5(data).hexdigest().encode()
            if self.physical:
                self._write(address, data, size, created)
            raw = address.encode()
            proto = b"\x0a" + put_uvarint(len(raw)) + raw + stamp + size_field + b"\x22\x20" + etag + tail
            if graveler:
                identity = hashlib.sha256(size_id + _ID_ETAG + etag + _ID_TAIL + CONTENT_TYPE).digest()
                out.append(b"\x40" + identity + _zigzag_len(len(proto)) + proto)
            else:
                out.append(proto)
        return out

    def etag(self, address: str) -> str:
        return hashlib.md5(self.content(address)).hexdigest()

    def _write(self, address: str, data: bytes, size: int, created: int) -> None:
        if not self.store.is_local:
            self.store.put(address, data.ljust(size, b"\0"))
            self.written += 1
            return
        directory, name = address.rsplit("/", 1)
        if directory != self._dir_name:  # names resolved against the slice's open directory
            self._close_dir()
            self._dir_fd = os.open(self.store.path(directory), os.O_RDONLY | os.O_DIRECTORY)
            self._dir_name = directory
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=self._dir_fd)
        try:
            os.write(fd, data)
            if size > len(data):
                os.ftruncate(fd, size)  # the zeros: a sparse file
            stamp = created * 1_000_000_000
            os.utime(fd, ns=(stamp, stamp))
        finally:
            os.close(fd)
        self.written += 1

    def close(self) -> None:
        self._close_dir()

    def _close_dir(self) -> None:
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd, self._dir_name = None, ""


def _mix(x: int) -> int:
    """splitmix64's finaliser: 64 well-mixed bits of ``x``."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _zigzag_len(n: int) -> bytes:
    return put_uvarint(n << 1)


def table_prefix(table: int) -> str:
    """Key prefix of a table: commits append partitions at its end."""
    return f"tables/t{table:04d}/"


def partition_keys(table: int, date: str, pid: int, first: int, count: int) -> list[bytes]:
    prefix = f"{table_prefix(table)}date={date}/part-{pid:08d}-"
    return [f"{prefix}{j:05d}.parquet".encode() for j in range(first, first + count)]


def scratch_keys(table: int, date: str, pid: int, first: int, count: int) -> list[bytes]:
    """Scratch data a job leaves under the partition it writes (as output committers do)."""
    prefix = f"{table_prefix(table)}date={date}/_temporary/{pid:08d}/part-"
    return [f"{prefix}{j:05d}.parquet".encode() for j in range(first, first + count)]
