"""The range cache's two range levels brought up to date: the addresses, and the HEAD entries.

Each update runs one job (:class:`~.tasks._RangeIngest` per bucket): the ranges a level lacks are
read from lakeFS into new parts, and a bucket due for a rewrite is copied to the ranges still
needed; the driver turns the tasks' status rows into the level's parts (:mod:`.cache`'s docstring
has the layout and the rules). An update of the addresses also fills the entries level with the
HEAD ranges it read (one reading for both); the guard's update of the entries level
(:mod:`.heads`) reads only the HEAD ranges still missing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from lakefs_gc.spark.mark.range_cache.generation import Generation
from lakefs_gc.spark.mark.range_cache.lookups import _RangeLookup
from lakefs_gc.spark.mark.range_cache.tasks import RANGE_STATUS, Part, RangeCacheError, _RangeIngest, _Store
from lakefs_gc.spark.mark.references import ADDRESS_SCHEMA, MetadataReader
from lakefs_gc.spark.runtime.failures import on_executor

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def _update_ranges(
    store: _Store, reader: MetadataReader, current: Generation, bucketed: DataFrame, *, evict: bool = True
) -> tuple[dict[int, tuple[Part, ...]], dict[str, int], dict[int, tuple[Part, ...]]]:
    """Reads the ranges of ``bucketed`` the addresses level lacks; its new parts, its stats, and
    the entries level with what the same reading added to it (the ranges ``bucketed`` flags
    ``head``: :class:`~.tasks._RangeIngest`). ``evict`` false (a read-ahead, :mod:`.ahead`): no
    bucket is rewritten or dropped, and the parts' ``used`` stay as the newest mark left them."""
    ranges, stats, statuses = _ingest(store, reader, current, bucketed, entries=False, evict=evict)
    heads = dict(current.entries)
    for s in statuses:
        if s["entries_file"] is not None:
            part = Part(
                s["entries_file"],
                int(s["entries_rows"]),
                ranges=int(s["entries_ranges"]),
                used=current.used_by_update(evict=evict),
            )
            heads[int(s["bucket"])] = (*heads.get(int(s["bucket"]), ()), part)
    stats["head_ranges_read"] = sum(int(s["entries_ranges"]) for s in statuses)
    return ranges, stats, heads


def _update_entries(
    store: _Store, reader: MetadataReader, current: Generation, bucketed: DataFrame
) -> tuple[dict[int, tuple[Part, ...]], dict[str, int]]:
    """Reads the HEAD ranges of ``bucketed`` the entries level lacks; the level's parts, and stats."""
    entries, stats, _ = _ingest(store, reader, current, bucketed, entries=True)
    return entries, stats


def _ingest(
    store: _Store,
    reader: MetadataReader,
    current: Generation,
    bucketed: DataFrame,
    *,
    entries: bool,
    evict: bool = True,
) -> tuple[dict[int, tuple[Part, ...]], dict[str, int], list[Any]]:
    """One level's update (the addresses, or ``entries``): its parts, stats, and the tasks' status
    rows. ``evict`` false: only added to (a read-ahead's, :func:`_update_ranges`)."""
    level = current.entries if entries else current.ranges
    head_parts = {} if entries else current.entries
    ingest = _RangeIngest(store, reader, current.number + 1, level, entries, head_parts, evict)
    statuses = bucketed.mapInArrow(on_executor(ingest), RANGE_STATUS).collect()
    ranges: dict[int, tuple[Part, ...]] = {} if evict else dict(level)
    if len({s["bucket"] for s in statuses}) != len(statuses):  # repartition(n, "bucket") forbids it
        raise RangeCacheError(f"range cache {store.root}: a bucket was written by two tasks")
    # the addresses level belongs to the generation being made; the entries level is added to
    # the newest one (:mod:`.heads` rewrites its record), whose mark is the one that needs them
    used = current.number if entries else current.used_by_update(evict=evict)
    for s in statuses:
        needed_in = set(s["used_files"] or ()) if evict else set()
        listed = () if s["replaced"] else level.get(s["bucket"], ())
        parts = [replace(p, used=used) if p.file in needed_in else p for p in listed]
        if s["file"] is not None:
            parts.append(Part(s["file"], int(s["rows"]), ranges=int(s["ranges"]), used=used))
        if parts:
            ranges[int(s["bucket"])] = tuple(parts)
    needed, read = sum(int(s["needed"]) for s in statuses), sum(int(s["read"]) for s in statuses)
    before = sum(p.ranges for ps in level.values() for p in ps)
    after = sum(p.ranges for ps in ranges.values() for p in ps)
    stats = {"ranges_cached": needed - read, "ranges_read": read, "ranges_evicted": before + read - after}
    return ranges, stats, statuses


def _bucketed(range_ids: DataFrame, buckets: int, parallelism: int) -> DataFrame:
    """``range_ids`` with its ``bucket``, every bucket in one partition."""
    from pyspark.sql import functions as F

    bucket = F.pmod(F.crc32(F.col("id").cast("binary")), F.lit(buckets)).cast("int")
    return range_ids.withColumn("bucket", bucket).repartition(parallelism, "bucket")


def range_addresses(store: _Store, generation: Generation, ids: DataFrame, parallelism: int) -> DataFrame:
    """``ADDRESS_SCHEMA``: the addresses (one row per entry) of the ranges ``ids`` (column ``id``,
    each once), looked up in ``generation``'s addresses level by the tasks of their buckets."""
    lookup = on_executor(_RangeLookup(store, generation.ranges))
    return _bucketed(ids, generation.buckets, parallelism).mapInArrow(lookup, ADDRESS_SCHEMA)
