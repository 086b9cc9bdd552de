"""The identity-twin guard's HEAD trees through the range cache (:class:`CachedHeadTrees`).

The guard (:mod:`lakefs_gc.spark.mark.twins`) needs each HEAD range's ``(path, size)`` entries,
with each entry's address and recorded checksum for its content evidence
(:mod:`lakefs_gc.spark.mark.twin_evidence`), which the address level of the cache does not hold.
They are a third level, ``entries/``, laid
out and kept as the ranges are (buckets by crc32 of the range id, parts listed by the generation
record, the same rewrite and eviction rules), filled only with the ranges of branch HEAD trees.
A mark that trusts checksums fills it as it reads new ranges for the address level: a new range
of a HEAD tree is read once, with its entries, and both levels are written from that reading
(:func:`~.cache.committed_frames_cached`'s ``heads``); otherwise the guard fills it, only when
the mark has garbage to guard (the HEAD range then read a second time). The HEAD metaranges'
range ids come from the metarange level, which the mark has just brought up to date (a HEAD tree
outside the mark's metaranges is read from lakeFS, as without a cache). So a cycle reads from
lakeFS only the HEAD ranges its new commits brought, and the guard of a cycle with nothing new
reads nothing.
With content evidence the guard plans from the entries' contents, each weighted by the branches
whose HEAD holds its range (:meth:`CachedHeadTrees.contents`), as the batch mark's guard plans
from the classification's reading (:mod:`lakefs_gc.spark.mark.head_contents`).

The level is recorded in the generation the mark has just written: its record is written again,
whole, listing the new entries parts too (parts a killed guard wrote stay unlisted and are
deleted by the next open, as a killed cycle's).

Fail closed as the rest of the cache: a listed part that is missing or unreadable, or a range the
record says it holds but does not, raises :class:`~.tasks.RangeCacheError`.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from lakefs_gc.spark.mark.head_trees import HEAD_ENTRIES, LakeFSHeadTrees
from lakefs_gc.spark.mark.range_cache.cache import RangeCache, _bucketed, _update_ranges
from lakefs_gc.spark.mark.range_cache.tasks import _EntryLookup, _MetarangeLookup
from lakefs_gc.spark.mark.references import MetadataReader
from lakefs_gc.spark.runtime.failures import on_executor

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_log = logging.getLogger(__name__)


@dataclass
class CachedHeadTrees:
    """:class:`lakefs_gc.spark.mark.head_trees.HeadTrees` from ``cache`` (after the mark updated it)."""

    cache: RangeCache
    reader: MetadataReader
    #: what the guard's reads did: ``head_metaranges_cached`` and the entries level's counts,
    #: summed over its readings (one for the contents, one more for paths when it makes stats)
    stats: dict[str, Any]

    def tree(self, spark: SparkSession, metaranges: list[str], *, parallelism: int) -> DataFrame:
        generation = self.cache.open(self.reader.repository, self.reader.storage_namespace)
        where = {m: p.file for p in reversed(generation.metaranges) for m in p.ids}
        if any(m not in where for m in metaranges):  # a HEAD no active commit has: read them all
            self.stats["head_metaranges_cached"] = 0
            return LakeFSHeadTrees(self.reader).tree(spark, metaranges, parallelism=parallelism)
        self.stats["head_metaranges_cached"] = len(metaranges)
        by_file: dict[str, list[str]] = defaultdict(list)
        for m in metaranges:
            by_file[where[m]].append(m)
        tasks = spark.createDataFrame(sorted(by_file.items()), "file string, ids array<string>")
        tasks = tasks.repartition(max(1, min(parallelism, len(by_file))))
        lookup = _MetarangeLookup(self.cache.store(), {p.file: p for p in generation.metaranges}, True)
        return tasks.mapInArrow(on_executor(lookup), "metarange string, id string")

    def entries(self, range_ids: DataFrame, *, parallelism: int) -> DataFrame:
        """Reads the HEAD ranges the entries level lacks into it (a new generation), then looks
        every one up there."""
        current = self.cache.open(self.reader.repository, self.reader.storage_namespace)
        bucketed = _bucketed(range_ids, current.buckets, parallelism).localCheckpoint()
        entries, counts, _ = _update_ranges(self.cache, self.reader, current, bucketed, entries=True)
        for key, value in counts.items():
            self.stats[f"head_{key}"] = self.stats.get(f"head_{key}", 0) + value
        generation = current
        if dict(entries) != dict(current.entries):  # the newest record again, whole, with them
            generation = replace(current, entries=entries)
            self.cache.commit(generation)
        _log.info("%s: range cache %s, HEAD entries: %s", self.reader.repository, self.cache.root, counts)
        lookup = _EntryLookup(self.cache.store(), generation.entries)
        return bucketed.mapInArrow(on_executor(lookup), HEAD_ENTRIES)

    def contents(self, spark: SparkSession, heads: Mapping[str, int], *, parallelism: int) -> DataFrame:
        """``address, size, checksum, heads`` of every entry of the ``heads`` metaranges' ranges
        (each HEAD metarange with the number of branches whose HEAD it is), from the entries
        level (:meth:`entries`): the guard's ``contents``
        (:func:`lakefs_gc.spark.mark.head_contents.split_references`), so that it plans from them
        (:func:`~lakefs_gc.spark.mark.head_contents.head_keys`) as from the batch mark's reading.
        Each entry counts the (branch, path) pairs that hold it: the branches whose HEAD
        metaranges list its range."""
        from pyspark.sql import functions as F

        weights = spark.createDataFrame(sorted(heads.items()), "metarange string, branches long")
        tree = self.tree(spark, list(heads), parallelism=parallelism)
        weighted = tree.join(F.broadcast(weights), "metarange").groupBy("id")
        ranges = weighted.agg(F.sum("branches").alias("heads")).localCheckpoint()  # a row per HEAD range
        entries = self.entries(ranges.select("id"), parallelism=parallelism)
        return entries.join(F.broadcast(ranges), "id").select("address", "size", "checksum", "heads")
