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
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from lakefs_gc.spark.mark.head_trees import HEAD_CONTENTS, HEAD_ENTRIES, LakeFSHeadTrees
from lakefs_gc.spark.mark.range_cache.cache import RangeCache
from lakefs_gc.spark.mark.range_cache.generation import Generation
from lakefs_gc.spark.mark.range_cache.levels import _bucketed, _update_entries
from lakefs_gc.spark.mark.range_cache.lookups import _ContentLookup, _EntryLookup
from lakefs_gc.spark.mark.range_cache.tasks import _MetarangeLookup
from lakefs_gc.spark.mark.references import MetadataReader
from lakefs_gc.spark.runtime.failures import on_executor
from lakefs_gc.spark.runtime.frames import local_frame, task_frame

if TYPE_CHECKING:
    from pyspark import Broadcast
    from pyspark.sql import DataFrame, SparkSession

_log = logging.getLogger(__name__)


#: the most marked sizes whose HEAD entries the contents' lookup filters itself (sorted, broadcast:
#: 8 bytes each); with more, every entry goes to the guard's own filter (:func:`head_keys`)
MAX_PUSHED_SIZES = 4_000_000


@dataclass
class CachedHeadTrees:
    """:class:`lakefs_gc.spark.mark.head_trees.HeadTrees` from ``cache`` (after the mark updated it).

    The entries level is brought up to date once per mark: the guard asks for the entries of the
    same HEAD trees twice (their contents, then the paths of the sizes it resolves by stats), and
    the second lookup reads the generation the first one filled (a range it lacks fails closed)."""

    cache: RangeCache
    reader: MetadataReader
    #: what the guard's reads did: ``head_metaranges_cached`` and the entries level's counts (added
    #: to the mark's: ``head_ranges_read`` counts the HEAD ranges read either way)
    stats: dict[str, Any]
    _filled: Generation | None = field(default=None, init=False, repr=False)

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
        tasks = task_frame(spark, sorted(by_file.items()), "file string, ids array<string>", parallelism)
        lookup = _MetarangeLookup(self.cache.store(), {p.file: p for p in generation.metaranges}, True)
        return tasks.mapInArrow(on_executor(lookup), "metarange string, id string")

    def entries(self, range_ids: DataFrame, *, parallelism: int) -> DataFrame:
        """Every entry of the ranges ``range_ids``, from the entries level (:meth:`_fill`)."""
        bucketed, generation = self._fill(range_ids, parallelism)
        lookup = _EntryLookup(self.cache.store(), generation.entries)
        return bucketed.mapInArrow(on_executor(lookup), HEAD_ENTRIES)

    def _fill(self, range_ids: DataFrame, parallelism: int) -> tuple[DataFrame, Generation]:
        """``range_ids`` bucketed, and the generation whose entries level holds them: the first
        call of a mark reads the HEAD ranges the level lacks into it (a new record), the next
        ones look up what it filled."""
        current = self._filled or self.cache.open(self.reader.repository, self.reader.storage_namespace)
        bucketed = _bucketed(range_ids, current.buckets, parallelism).localCheckpoint()
        if self._filled is not None:
            return bucketed, self._filled
        entries, counts = _update_entries(self.cache.store(), self.reader, current, bucketed)
        for key, value in counts.items():  # added to the HEAD ranges the mark's own update read
            self.stats[f"head_{key}"] = self.stats.get(f"head_{key}", 0) + value
        if dict(entries) != dict(current.entries):  # the newest record again, whole, with them
            current = replace(current, entries=entries)
            self.cache.commit(current)
        _log.info("%s: range cache %s, HEAD entries: %s", self.reader.repository, self.cache.root, counts)
        self._filled = current
        return bucketed, current

    def contents(
        self,
        spark: SparkSession,
        heads: Mapping[str, int],
        *,
        parallelism: int,
        sizes: DataFrame | None = None,
    ) -> DataFrame:
        """``address, size, checksum, heads`` of every entry of the ``heads`` metaranges' ranges
        (each HEAD metarange with the number of branches whose HEAD it is), from the entries
        level: the guard's ``contents``
        (:func:`lakefs_gc.spark.mark.head_contents.split_references`), so that it plans from them
        (:func:`~lakefs_gc.spark.mark.head_contents.head_keys`) as from the batch mark's reading.
        Each entry counts the (branch, path) pairs that hold it: the branches whose HEAD
        metaranges list its range. ``sizes`` (column ``size``): only entries of those sizes are
        needed (the marked objects' distinct sizes), filtered as the level is read when they are at most
        :data:`MAX_PUSHED_SIZES`; the paths are never read."""
        from pyspark.sql import functions as F

        weights = local_frame(spark, sorted(heads.items()), "metarange string, branches long")
        tree = self.tree(spark, list(heads), parallelism=parallelism)
        weighted = tree.join(F.broadcast(weights), "metarange").groupBy("id")
        ranges = weighted.agg(F.sum("branches").alias("heads")).localCheckpoint()  # a row per HEAD range
        bucketed, generation = self._fill(ranges.select("id"), parallelism)
        pushed = _pushed_sizes(spark, sizes)
        self.stats["head_sizes_pushed"] = None if pushed is None else len(pushed.value)
        lookup = _ContentLookup(self.cache.store(), generation.entries, pushed)
        entries = bucketed.mapInArrow(on_executor(lookup), HEAD_CONTENTS)
        return entries.join(F.broadcast(ranges), "id").select("address", "size", "checksum", "heads")


def _pushed_sizes(spark: SparkSession, sizes: DataFrame | None) -> Broadcast[Any] | None:
    """The ``sizes`` (distinct), sorted and broadcast, when there are at most :data:`MAX_PUSHED_SIZES`
    (None: too many, or none asked for)."""
    if sizes is None:
        return None
    found = sizes.select("size").limit(MAX_PUSHED_SIZES + 1).toArrow().column("size")
    if len(found) > MAX_PUSHED_SIZES:
        return None
    values = np.sort(found.drop_null().to_numpy().astype(np.int64))
    return spark.sparkContext.broadcast(values)
