"""The committed-address level as the classification asks it: each candidate flagged in its own task.

The classification's candidates are hash-partitioned by address (sources/prefetch.py). When their
partition count divides the level's bucket count or is a multiple of it, each task holds the
addresses of ``buckets / partitions`` buckets (or of one): it reads those buckets' parts and looks
its rows up in them. That replaces the join with the level (at the bottom line 22M addresses
shuffled and sorted every cycle) with a reading of the level in place.

The lookup is a scalar Arrow UDF over three columns computed by Spark (the address, its bucket and
its 64-bit hash, :func:`~.committed.committed_hash`): the other columns of the candidates stay in
the JVM. A task sorts its buckets' hashes once; a row's hash is found through an index by its
leading bits, and only the rows whose hash the level holds have their address compared with the
level's. At the bottom line this replaced a set of 5.4M strings per task, looked up row by row
(most of a Python worker's time in the classification's stage; bench/README.md, "20M objects,
the level looked up by hash and the classification counted as it passes (2026-11-29)").

Equal hashes never decide alone: a row is flagged only when the level holds its very address, so
two addresses of one hash (about one pair in 10^12 at the bottom line) are told apart.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakefs_gc.spark.mark.range_cache.committed import committed_bucket, committed_hash
from lakefs_gc.spark.mark.range_cache.generation import CommittedLevel
from lakefs_gc.spark.mark.range_cache.tasks import Part, RangeCacheError, _Store
from lakefs_gc.spark.runtime.failures import on_executor

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: at most this many of the level's addresses held by one task of :class:`CommittedLookup` (at the
#: bottom line 5.5M per task took 0.4 GB once loaded, 1.2 GB at the peak of reading them)
MAX_TASK_ADDRESSES = 8_000_000


@dataclass(frozen=True)
class CommittedLookup:
    """The level flagging the candidates in their own tasks, no join (module docstring).

    Otherwise (other partition counts, or more than :data:`MAX_TASK_ADDRESSES` addresses a task
    would hold) :meth:`flag` declines and the classification joins with ``addresses``.
    """

    store: _Store
    level: CommittedLevel
    buckets: int  # the generation's bucket count
    addresses: DataFrame  # ADDRESS_SCHEMA, each once: the join, when flag declines

    def fits(self, partitions: int | None) -> bool:
        """Whether a frame hash-partitioned by address into ``partitions`` is flagged in place."""
        if partitions is None or (self.buckets % partitions and partitions % self.buckets):
            return False
        rows = sum(p.rows for p in self.level.buckets.values())
        return rows <= MAX_TASK_ADDRESSES * min(partitions, self.buckets)

    def flag(self, frame: DataFrame, column: str, partitions: int | None) -> DataFrame | None:
        """``frame`` with ``column``: true where the level holds the row's address, else null;
        None when ``frame``'s partitioning (``partitions``: hash by address) does not fit."""
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.functions import arrow_udf
        from pyspark.sql.types import BooleanType

        if not self.fits(partitions):
            return None
        body = on_executor(_Flag(self.store, self.level.buckets))

        def flags(batches: Iterator[tuple[pa.Array, pa.Array, pa.Array]]) -> Iterator[pa.Array]:
            return body(batches)

        udf = arrow_udf(flags, BooleanType())  # type: ignore[call-overload]  # the hints say the type
        keys = (F.col("address"), committed_bucket(self.buckets), committed_hash())
        return frame.withColumn(column, udf(*keys))


@dataclass(frozen=True)
class _Flag:
    """Per batch of ``(address, bucket, hash)``: true where the level holds the address, else
    null; each bucket's part read once per task, when a row of it first comes."""

    store: _Store
    listed: Mapping[int, Part]

    def __call__(self, batches: Iterator[tuple[pa.Array, pa.Array, pa.Array]]) -> Iterator[pa.Array]:
        held = _Held(self.store, self.listed)
        for address, bucket, hashed in batches:
            held.load_for(bucket.to_numpy(zero_copy_only=False))
            found = held.find(address, hashed.to_numpy(zero_copy_only=False))
            yield pa.array(found, pa.bool_(), mask=~found)


class _Held:
    """The addresses of the buckets a task has loaded (in the order read), their hashes sorted with
    where each address is (``order``), and an index of those hashes by their leading bits
    (``starts``): a row's hash is found in one or two reads of memory
    rather than a binary search's 23 (at the bottom line, 5.4M addresses per task; the binary
    search's cache misses cost more than the rest of the stage's Python work)."""

    def __init__(self, store: _Store, listed: Mapping[int, Part]) -> None:
        self.store, self.listed = store, listed
        self.loaded = np.zeros(0, dtype=bool)  # by bucket: whether it is loaded
        self.addresses = pa.array([], pa.string())  # as loaded
        self.keys = np.empty(0, np.uint64)  # their hashes (as unsigned numbers: :func:`_unsigned`), sorted
        self.order = np.empty(0, np.intp)  # the address of each of ``keys``: its position in ``addresses``
        self.shift, self.starts = _index(self.keys)

    def load_for(self, buckets: np.ndarray) -> None:
        """Load the buckets of a batch's rows that are not loaded yet. Every batch asks, and after
        a task's first batch the answer is nearly always none: a look at a mask, not a sort of
        the batch's buckets."""
        if len(buckets) and (buckets.max() >= len(self.loaded) or not self.loaded[buckets].all()):
            self.load(np.unique(buckets).tolist())

    def load(self, buckets: list[int]) -> None:
        """Add the parts of ``buckets`` not loaded yet (a bucket the level does not list holds none).
        The addresses stay in the order read (sorting them would copy them again: at the bottom
        line 300 MB more per task); only their hashes are sorted, with where each address is."""
        new = [b for b in buckets if b >= len(self.loaded) or not self.loaded[b]]
        if not new:
            return
        if max(new) >= len(self.loaded):
            self.loaded = np.concatenate([self.loaded, np.zeros(max(new) + 1 - len(self.loaded), dtype=bool)])
        self.loaded[new] = True
        restored = np.empty_like(self.keys)
        restored[self.order] = self.keys  # back in the order loaded
        keys = [restored]
        addresses = [self.addresses]
        for bucket in new:
            part = self.listed.get(bucket)
            if part is None:
                continue
            for batch in self.store.scan(part, ["hash", "address"], None, None):
                if batch.column(0).null_count:  # an address without its hash would never be found
                    raise RangeCacheError(
                        f"range cache part {self.store.directory.uri(part.file)} holds an address "
                        f"without its hash; {self.store.hint}"
                    )
                keys.append(_unsigned(batch.column(0).to_numpy(zero_copy_only=False)))
                addresses.append(batch.column(1))
        self.addresses = pa.concat_arrays(addresses)
        del addresses
        loaded = np.concatenate(keys)
        self.order = np.argsort(loaded)  # equal keys in any order: :meth:`_first` finds the first
        self.keys = loaded[self.order]
        self.shift, self.starts = _index(self.keys)
        pa.default_memory_pool().release_unused()  # the parts' batches, copied into ``addresses``

    def find(self, address: pa.Array, hashes: np.ndarray) -> np.ndarray:
        """Whether each of ``address`` (with its ``hashes``) is held: by hash, then by address."""
        found = np.zeros(len(hashes), dtype=bool)
        keys = _unsigned(hashes)
        at = self._first(keys)
        rows = np.flatnonzero(at >= 0)
        if not len(rows):
            return found
        same = pc.equal(address.take(pa.array(rows)), self.addresses.take(pa.array(self.order[at[rows]])))
        same = same.fill_null(False).to_numpy(zero_copy_only=False)
        found[rows[same]] = True
        for row in rows[~same]:  # another address of the same hash came first: look at the rest
            found[row] = self._later(address[int(row)].as_py(), int(at[row]))
        return found

    def _first(self, keys: np.ndarray) -> np.ndarray:
        """The position of the first held key equal to each of ``keys`` (-1: none), sought only
        among the held keys of its leading bits (about one, :func:`_index`)."""
        slot = (keys >> self.shift).astype(np.intp)
        at, end = self.starts[slot], self.starts[slot + 1]
        first = np.full(len(keys), -1, dtype=np.intp)
        rows = np.flatnonzero(at < end)
        while len(rows):
            hit = self.keys[at[rows]] == keys[rows]
            first[rows[hit]] = at[rows[hit]]
            rows = rows[~hit]
            at[rows] += 1
            rows = rows[at[rows] < end[rows]]
        return first

    def _later(self, address: str | None, at: int) -> bool:
        """Whether ``address`` is among the held addresses after ``at`` that share its hash."""
        end = int(np.searchsorted(self.keys, self.keys[at], side="right"))
        return (
            address is not None
            and address in self.addresses.take(pa.array(self.order[at + 1 : end])).to_pylist()
        )


_SIGN = np.uint64(1 << 63)


def _unsigned(hashes: np.ndarray) -> np.ndarray:
    """Signed 64-bit hashes as unsigned numbers in the same order (the sign bit flipped), so that
    their leading bits index them."""
    unsigned: np.ndarray = hashes.astype(np.int64, copy=False).view(np.uint64) ^ _SIGN
    return unsigned


def _index(keys: np.ndarray) -> tuple[np.uint64, np.ndarray]:
    """For sorted ``keys``: the shift that leaves a key's leading bits (about one key per value
    of them), and where the keys of each value start (one more entry: the end)."""
    bits = min(24, max(1, len(keys).bit_length()))
    shift = np.uint64(64 - bits)
    starts = np.zeros((1 << bits) + 1, dtype=np.intp)
    np.cumsum(np.bincount((keys >> shift).astype(np.intp), minlength=1 << bits), out=starts[1:])
    return shift, starts
