"""The range cache's committed-address level: every address the active ranges hold, once, kept between marks.

The classification asks one thing of the committed data: is a listed object's address held by an
active range? Asked of the addresses level, that means reading every active range's addresses and a
``distinct`` over them in every cycle: at the bottom line (bench/README.md) 250M rows for 20M
distinct addresses, the largest stage of a cycle after a sweep. This level keeps the answer between
marks: one row per address with the number of entries of the counted ranges that hold it (a count,
so that losing one of two ranges that hold an address keeps it), spread over buckets by Spark's
hash of the address (:func:`committed_bucket`, the hash Spark partitions by).

The classification need not join with it (:class:`~.committed_lookup.CommittedLookup`): its
candidates are hash-partitioned by address already, so each of their tasks reads the few buckets
its rows fall in and flags them in place (at the bottom line, 22M addresses no longer shuffled and
sorted every cycle). Each row of the level also keeps Spark's 64-bit hash of its address
(:func:`committed_hash`), so that a task looks its rows up in a sorted array of numbers instead
of hashing every address again in Python. A level recorded with another bucketing, or without
those hashes, reads as none, and is built afresh.

A mark counts exactly the active ranges of its main metaranges (the retained-only ones stay apart,
:func:`~.cache.committed_frames_cached`). It applies only their change: each entry of a range it
gained adds 1 to its address, each entry of a range it lost subtracts 1 (the lost ranges are read from
the previous generation's address parts, which stay on disk until the next mark opens the cache); an
address whose count reaches 0 is dropped, and only the buckets the change falls in are rewritten.
What a range holds never changes (:mod:`.cache`), so the counts depend on the set of counted ranges
alone, which the level records::

    committed/part-<gen>-b<bucket>-<uuid>.parquet   address, count, hash
    committed/ranges-<gen>-<uuid>.parquet           range_id: the ranges counted

Fail closed (docs/invariants.md, invariant 4): a count that would fall below zero (a change applied
to counts of other ranges), a part that is missing or holds another number of rows than recorded,
and a lost range the addresses level lacks all raise :class:`~.tasks.RangeCacheError`. A record
without the level (a new cache, an older version's, or a byte cap that dropped any of its parts or of
the address parts, :mod:`.retention`) builds it afresh from the addresses level: one full reading,
as every mark without this level made.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakefs_gc.spark.mark.range_cache.generation import CommittedLevel, Generation
from lakefs_gc.spark.mark.range_cache.levels import range_addresses
from lakefs_gc.spark.mark.range_cache.tasks import (
    COMMITTED_DIR,
    Part,
    RangeCacheError,
    _PartWriter,
    _rows,
    _Store,
)
from lakefs_gc.spark.mark.references import ADDRESS_SCHEMA
from lakefs_gc.spark.runtime.failures import on_executor
from lakefs_gc.spark.runtime.frames import local_frame, task_frame

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

COUNT_SCHEMA = pa.schema([("address", pa.string()), ("count", pa.int64()), ("hash", pa.int64())])
COUNTED_SCHEMA = pa.schema([("range_id", pa.string())])
_STATUS = "bucket int, file string, rows long"
_STATUS_ARROW = pa.schema([("bucket", pa.int32()), ("file", pa.string()), ("rows", pa.int64())])


def update_committed(
    spark: SparkSession,
    store: _Store,
    current: Generation,
    generation: Generation,
    counted: DataFrame,
    parallelism: int,
) -> tuple[CommittedLevel, dict[str, int]]:
    """The committed-address level of ``generation`` (the one being made, whose addresses level
    holds every range of ``counted``, column ``id``), brought from ``current``'s; and its stats.
    ``current``'s own level when the counted ranges are the same."""
    from pyspark.sql import functions as F

    ids = {row["id"] for row in counted.collect()}  # range ids: tens of thousands at the bottom line
    previous = _counted(store, current.committed)
    number = generation.number
    stats = {"committed_rebuilt": int(previous is None)}
    if previous is None:
        addresses = range_addresses(store, generation, counted, parallelism)
        deltas = addresses.groupBy("address").agg(F.count(F.lit(1)).alias("delta"))
        listed: Mapping[int, Part] = {}
    else:
        gained, lost = sorted(ids - previous), sorted(previous - ids)
        stats.update(committed_ranges_gained=len(gained), committed_ranges_lost=len(lost))
        assert current.committed is not None
        if not gained and not lost:
            return current.committed, {**stats, "committed_buckets_written": 0}
        plus = _addresses(spark, store, generation, gained, parallelism).withColumn("delta", F.lit(1))
        minus = _addresses(spark, store, current, lost, parallelism).withColumn("delta", F.lit(-1))
        deltas = plus.unionByName(minus).groupBy("address").agg(F.sum("delta").alias("delta"))
        listed = current.committed.buckets
    bucket = committed_bucket(generation.buckets)
    deltas = deltas.where(F.col("delta") != 0)
    deltas = deltas.select(bucket.alias("bucket"), "address", "delta", committed_hash().alias("hash"))
    deltas = deltas.repartition(parallelism, "bucket").sortWithinPartitions("bucket")
    update = on_executor(_CountUpdate(store, number, listed))
    buckets = dict(listed)
    statuses = deltas.mapInArrow(update, _STATUS).collect()
    for s in statuses:
        if s["file"] is None:
            buckets.pop(int(s["bucket"]), None)
        else:
            buckets[int(s["bucket"])] = Part(s["file"], int(s["rows"]), used=number)
    stats["committed_buckets_written"] = len(statuses)
    return CommittedLevel(_write_counted(store, number, ids), buckets), stats


def committed_bucket(buckets: int) -> Column:
    """The committed-address level's bucket of the ``address`` column (generation.BUCKETING):
    Spark's Murmur3 hash, the one its hash partitioning by address uses, so that a task of a frame
    partitioned by address into a divisor or a multiple of ``buckets`` partitions holds the
    addresses of few buckets (:class:`~.committed_lookup.CommittedLookup`). Whatever the
    partitioning, a level is written and looked up with this one expression, computed by Spark on
    both sides."""
    from pyspark.sql import functions as F

    return F.pmod(F.hash(F.col("address")), F.lit(buckets)).cast("int")


def committed_hash() -> Column:
    """Spark's 64-bit hash (xxhash64) of the ``address`` column, kept beside each address of the
    level and computed by Spark for the rows looked up in it (generation.BUCKETING): a task then
    finds its rows' candidates among the level's addresses by number, and compares only those
    addresses (:class:`~.committed_lookup.CommittedLookup`)."""
    from pyspark.sql import functions as F

    return F.xxhash64(F.col("address"))


def committed_addresses(
    spark: SparkSession, store: _Store, level: CommittedLevel, parallelism: int
) -> DataFrame:
    """``ADDRESS_SCHEMA``: every address ``level`` counts, each once."""
    buckets = sorted(level.buckets)
    tasks = task_frame(spark, [(b,) for b in buckets], "bucket int", parallelism)
    return tasks.mapInArrow(on_executor(_CountLookup(store, level.buckets)), ADDRESS_SCHEMA)


def _addresses(
    spark: SparkSession, store: _Store, generation: Generation, ids: list[str], parallelism: int
) -> DataFrame:
    """The addresses (one row per entry) of the ranges ``ids``, from ``generation``'s addresses level."""
    frame = local_frame(spark, [(i,) for i in ids], "id string")
    return range_addresses(store, generation, frame, parallelism)


def _counted(store: _Store, level: CommittedLevel | None) -> set[str] | None:
    """The range ids ``level`` counts (None: no level)."""
    if level is None:
        return None
    if level.ranges is None:
        return set()
    found = store.ids(level.ranges)
    if len(found) != level.ranges.rows:
        raise RangeCacheError(
            f"range cache part {store.directory.uri(level.ranges.file)} lists {level.ranges.rows} "
            f"range ids, {len(found)} distinct; {store.hint}"
        )
    return found


def _write_counted(store: _Store, number: int, ids: set[str]) -> Part | None:
    writer = _PartWriter(store, f"{COMMITTED_DIR}/ranges-{number:08d}", COUNTED_SCHEMA)
    for range_id in sorted(ids):
        writer.add(range_id)
    part = writer.close()
    return None if part is None else Part(part.file, part.rows, used=number)


@dataclass(frozen=True)
class _CountUpdate:
    """Per bucket of the task (its rows sorted by bucket): the bucket's counts plus the deltas,
    written as the bucket's new part; one status row per bucket (``file`` None: it is empty now)."""

    store: _Store
    gen: int
    listed: Mapping[int, Part]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for bucket, deltas in _runs(batches):
            yield self._bucket(bucket, deltas)

    def _bucket(self, bucket: int, deltas: pa.Table) -> pa.RecordBatch:
        part = self.listed.get(bucket)
        held = COUNT_SCHEMA.empty_table()
        if part is not None:
            held = pa.Table.from_batches(
                list(self.store.scan(part, COUNT_SCHEMA.names, None, None)), COUNT_SCHEMA
            )
        kept = _applied(held, deltas)
        below = kept.filter(pc.less(kept.column("count"), 0))
        if below.num_rows:
            raise RangeCacheError(
                f"range cache {self.store.root}: address {below.column('address')[0].as_py()} of "
                f"committed-address bucket {bucket} would be counted below zero (a lost range it never "
                f"counted); {self.store.hint}"
            )
        kept = kept.filter(pc.greater(kept.column("count"), 0))
        writer = _PartWriter(self.store, f"{COMMITTED_DIR}/part-{self.gen:08d}-b{bucket:05d}", COUNT_SCHEMA)
        for batch in kept.to_batches():
            writer.add_batch(batch)
        written = writer.close()
        file, rows = (written.file, written.rows) if written is not None else (None, 0)
        status = {"bucket": bucket, "file": file, "rows": rows}
        return pa.RecordBatch.from_pylist([status], schema=_STATUS_ARROW)


def _applied(held: pa.Table, deltas: pa.Table) -> pa.Table:
    """``COUNT_SCHEMA``: the counts ``held`` (one row per address) with ``deltas`` (``address,
    delta, hash``, one row per address) added, rows at 0 or below kept for the caller to judge.
    A delta finds its address's row by hash, and the address is compared: a delta's address
    is new when its hash is not held. A bucket holds about 90K addresses at the bottom line and
    a cycle's deltas touch every bucket: matching its few hundred deltas by number took 4 ms
    there, grouping the whole bucket by address 10 ms. Where a held hash belongs to another
    address (a collision of xxhash64), the bucket is grouped by address."""
    at = pc.index_in(deltas.column("hash"), value_set=held.column("hash"))
    found = pc.is_valid(at)
    matched = deltas.filter(found)
    positions = at.filter(found)
    same = pc.equal(held.column("address").take(positions), matched.column("address"))
    if not pc.all(same, min_count=0).as_py():  # (no delta matched: true)
        return _grouped(held, deltas)
    counts = held.column("count").to_numpy().copy()
    counts[positions.to_numpy()] += matched.column("delta").to_numpy()
    added = _as_counts(deltas.filter(pc.invert(found)))
    updated = pa.table(
        [held.column("address"), pa.array(counts, pa.int64()), held.column("hash")], schema=COUNT_SCHEMA
    )
    return pa.concat_tables([updated, added])


def _grouped(held: pa.Table, deltas: pa.Table) -> pa.Table:
    """:func:`_applied` by grouping every row by address (the hash is the address's: grouping by
    both is grouping by the address)."""
    merged = pa.concat_tables([held, _as_counts(deltas)])
    merged = merged.group_by(["address", "hash"]).aggregate([("count", "sum")])
    return pa.table([merged.column(n) for n in ("address", "count_sum", "hash")], schema=COUNT_SCHEMA)


def _as_counts(deltas: pa.Table) -> pa.Table:
    """``deltas`` (``address, delta, hash``) as a ``COUNT_SCHEMA`` table, each delta its count."""
    columns = [deltas.column("address"), deltas.column("delta"), deltas.column("hash")]
    return pa.table(columns, schema=COUNT_SCHEMA)


def _runs(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, pa.Table]]:
    """``(bucket, its rows)`` from batches whose first column, ``bucket``, is sorted."""
    bucket: int | None = None
    chunks: list[pa.RecordBatch] = []
    for batch in batches:
        values = batch.column(0).to_numpy(zero_copy_only=False)
        starts = [0, *(np.flatnonzero(np.diff(values)) + 1).tolist(), len(values)]
        for low, high in itertools.pairwise(starts):
            if high == low:
                continue
            if int(values[low]) != bucket and chunks:
                assert bucket is not None
                yield bucket, pa.Table.from_batches(chunks)
                chunks = []
            bucket = int(values[low])
            chunks.append(batch.slice(low, high - low))
    if chunks:
        assert bucket is not None
        yield bucket, pa.Table.from_batches(chunks)


@dataclass(frozen=True)
class _CountLookup:
    """The addresses of the task's buckets (``bucket`` rows), from their parts."""

    store: _Store
    listed: Mapping[int, Part]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for row in _rows(batches):
            for batch in self.store.scan(self.listed[row["bucket"]], ["address"], None, None):
                yield pa.RecordBatch.from_arrays([batch.column(0)], names=["address"])
