"""The range cache's new metaranges and ranges, read while lakeFS prepares the uncommitted dump.

A mark waits minutes for lakeFS's dump (1.8 min at the bottom-line repository, bench/README.md),
and the cluster idles once the candidates are read. Without a read-ahead, the new commits'
metaranges and ranges are read after the dump, on the mark's critical path (about 14 s of a
173-186 s cycle there).
:class:`RangeCacheReadAhead` reads them in that wait, on a thread of its own: the commit graph
from the branches and tags (as the retention cross-check reads it, through the same cache of
commits), the metaranges of the commits lakeFS's documented retention rule keeps that the range
cache lacks, and the ranges those list that it lacks, HEAD ranges with their entries (as the
mark's update would). It only adds: nothing is evicted, every part's ``used`` stays as the newest
mark left it (a new part's is that mark's, for the byte cap), and the committed-address level is
not touched. It records a generation of its own; the mark's update then opens that one and
finds those ranges cached.

Reading early takes nothing out of the mark's guarantees. Metaranges and ranges are named by
their contents, so when one is read does not matter. Which of them are live is still decided by
the mark's own update, from lakeFS's active-commits export after the dump and the cross-check
(docs/invariants.md, invariants 1 and 6), and whatever it needs that the cache lacks is read then
(invariant 4). So a read-ahead that fails is logged and ignored: the parts it wrote and did not
record are leftovers that the mark's update deletes when it opens the cache, and the update reads
what the read-ahead did not. The mark waits for the read-ahead to end before the cross-check: one
reader of the commit cache and one writer of the range cache at a time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lakefs_gc.gc.ports import CommitGraphReader
from lakefs_gc.gc.retention import active_commits
from lakefs_gc.spark.mark.range_cache.cache import RangeCache, _range_ids, _update_metaranges
from lakefs_gc.spark.mark.range_cache.levels import _bucketed, _update_ranges
from lakefs_gc.spark.mark.range_cache.tasks import RangeCacheError
from lakefs_gc.spark.mark.references import MetadataReader
from lakefs_gc.spark.runtime.background import BackgroundJobs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_log = logging.getLogger(__name__)

#: up to this many new metaranges (a cycle's new commits), the read-ahead runs one task at a time:
#: it still ends well before the dump (at the bottom line, 300 metaranges and their ~340 new
#: ranges took ~20 s once the candidates were read, 76 s into a 117-119 s dump), and leaves the
#: other cores to whatever shares them. On the benchmark's 2 cores that is lakeFS itself,
#: preparing the dump: with both cores the dump took 127 s and the cycle 180 s, against 167 s
#: (bench/README.md). More, or more than the cache holds already, use every task: see
#: :func:`read_ahead_tasks`
ONE_TASK_METARANGES = 1_000
#: the summary's ``range_cache`` keys counting what was read from lakeFS, to which the read-ahead's
#: are added, and the key counting the same things as cached, from which they are taken (None: none)
_READ_KEYS: dict[str, str | None] = {
    "metaranges_read": "metaranges_cached",
    "ranges_read": "ranges_cached",
    "head_ranges_read": None,
}


class RangeCacheReadAhead:
    """What the range cache will need of the newest commits, read on a thread from creation on."""

    def __init__(
        self,
        spark: SparkSession,
        cache: RangeCache,
        reader: MetadataReader,
        graph: CommitGraphReader,
        *,
        now: datetime,
        heads: bool,
        parallelism: int,
        say: Callable[[str], None],
    ) -> None:
        self._spark, self._cache, self._reader, self._graph = spark, cache, reader, graph
        self._now, self._heads, self._parallelism, self._say = now, heads, parallelism, say
        self._stats: dict[str, Any] = {}
        self._jobs = BackgroundJobs(spark, self._run, name="range read-ahead")
        self._jobs.start()  # last: ``_run`` uses everything above

    def wait(self) -> dict[str, Any]:
        """Wait for the read-ahead to end; what it read (empty: nothing, or it failed)."""
        self._jobs.join()
        return dict(self._stats)

    def close(self) -> None:
        """Cancel a read-ahead still running and wait for its thread (a mark that ends early)."""
        self._jobs.close()

    def _run(self) -> None:
        began = time.monotonic()
        try:
            graph = self._graph.commit_graph(self._reader.repository, ())
            kept = active_commits(graph.commits, graph.branches, graph.rules, self._now).commits
            metaranges = sorted({graph.metaranges[c] for c in kept if graph.metaranges.get(c)})
            heads = {graph.metaranges.get(h, "") for h in graph.branches.values()} if self._heads else set()
            if not self._jobs.open():
                return
            self._say(f"range cache: reading ahead what it lacks of {len(metaranges)} retained metaranges")
            stats: dict[str, Any] = read_ahead(
                self._spark, self._cache, self._reader, metaranges, heads - {""}, self._parallelism,
                record=self._jobs.open,  # a closed read-ahead records nothing
            )  # fmt: skip
        except Exception as e:  # the mark's own update reads what this did not (module docstring)
            if self._jobs.open():
                _log.warning("%s: the range cache's read-ahead failed: %s", self._reader.repository, e)
                self._say(f"reading the range cache ahead failed; the mark reads what it lacks ({e})")
            return
        stats["seconds"] = round(time.monotonic() - began, 1)
        self._stats = stats
        if stats["metaranges_read"]:
            self._say(
                f"range cache: read {stats['metaranges_read']} new metaranges and "
                f"{stats['ranges_read']} new ranges ahead, in {stats['seconds']} s"
            )


def read_ahead(
    spark: SparkSession,
    cache: RangeCache,
    reader: MetadataReader,
    metarange_ids: Collection[str],
    heads: Collection[str],
    parallelism: int,
    *,
    record: Callable[[], bool] = lambda: True,
) -> dict[str, int]:
    """Add to ``cache`` those of ``metarange_ids`` it lacks, and the ranges they list that it
    lacks (those of ``heads`` with their entries too); one new generation records them, unless
    ``record()`` says no by then (a mark that ended: its next one may have opened the cache). What
    was read: ``metaranges_read``, ``ranges_read``, ``head_ranges_read``, and in how many ``tasks``
    (:func:`read_ahead_tasks`)."""
    current = cache.open(reader.repository, reader.storage_namespace)
    held = {m for p in current.metaranges for m in p.ids}
    new = [m for m in dict.fromkeys(metarange_ids) if m not in held]
    if not new:
        return {"metaranges_read": 0, "ranges_read": 0, "head_ranges_read": 0}
    parallelism = read_ahead_tasks(len(new), len(held), parallelism)
    metaranges, stats = _update_metaranges(spark, cache, reader, current, new, parallelism, evict=False)
    ids = _range_ids(spark, cache, metaranges, new, parallelism, only=set(), heads=set(heads))
    bucketed = _bucketed(ids.select("id", "head"), current.buckets, parallelism)
    ranges, range_stats, entries = _update_ranges(cache.store(), reader, current, bucketed, evict=False)
    generation = replace(
        current, number=current.number + 1, metaranges=metaranges, ranges=ranges, entries=entries
    )
    if not record():
        raise RangeCacheError(f"range cache {cache.root}: read ahead for a mark that has ended; not recorded")
    cache.commit(generation)
    return {
        "metaranges_read": stats["metaranges_read"],
        "ranges_read": range_stats["ranges_read"],
        "head_ranges_read": range_stats["head_ranges_read"],
        "tasks": parallelism,
    }


def read_ahead_tasks(new: int, held: int, parallelism: int) -> int:
    """The read-ahead's tasks for ``new`` metaranges the cache lacks when it holds ``held``: one
    for a cycle's new commits (a few, and fewer than the cache holds), else ``parallelism``.

    The count of new metaranges stands for the work only when most of their ranges are cached
    already, as in a cycle after others. A first cycle (an empty cache, or one the byte cap
    emptied) reads the whole history, whatever its size: at 1M objects, 515 metaranges and their
    2,009 ranges on one task took 36 s of a 65 s cycle while the other core idled, and on a
    cluster one task would leave every other executor idle.
    """
    return 1 if new <= min(ONE_TASK_METARANGES, held) else parallelism


def with_read_ahead(stats: Mapping[str, int], ahead: Mapping[str, Any]) -> dict[str, Any]:
    """The mark's range cache ``stats`` counting what its read-ahead read as read by the mark (and
    not as cached), as if the mark had read it in line; ``read_ahead`` says what it read and when."""
    merged: dict[str, Any] = dict(stats)
    for read, cached in _READ_KEYS.items():
        extra = int(ahead.get(read, 0))
        if read in merged:
            merged[read] += extra
        if cached is not None and cached in merged:
            merged[cached] = max(0, merged[cached] - extra)
    if ahead:
        merged["read_ahead"] = dict(ahead)
    return merged
