"""The identity-twin guard of the mark (docs/invariants.md, invariant 6; the rule: :mod:`lakefs_gc.gc.twins`).

lakeFS's uncommitted dump leaves out a staged entry whose identity (size, ETag, metadata, content
type) equals the committed entry it shadows, so an identical re-upload over a committed path is in
no export while its branch serves it. Here, after the classification:

1. the HEAD trees of every branch (hidden ones included, from the cross-check's commit graph) are
   read on the executors, each distinct range once, as ``(range, path, size)`` with each entry's
   address and recorded checksum (from lakeFS, or from the service's range cache when the mark has
   one: :class:`HeadTrees`). With content evidence, the classification has read them already,
   without paths (:mod:`.head_contents`), or the range cache holds them: steps 2 and 3 are taken
   from those contents, and the trees are read here only for the paths of the sizes step 3 checks;
2. content evidence (:mod:`.twin_evidence`) leaves out the pairs whose two objects' bytes are
   proven different (an S3 inventory's MD5 ETags; docs/formats/lakefs-export-hazards.md, "Ruling
   twins out by content"): only the *needed* HEAD entries remain, all of them without proofs;
3. the work is planned per size before any pair is built (:func:`plan_sizes`): a size costs one
   stat per (branch, path) of a needed HEAD entry of that size, and as many pairs as those times
   the marked objects each entry may be a twin of. Sizes are taken cheapest first while both
   budgets hold; the marked objects of every other size that have a pair are **kept** unresolved
   (a size shared by thousands of objects and entries, such as empty files, would otherwise make
   the join quadratic). The objects of the sizes taken are joined with the needed entries on
   size: the *twin pairs* ``(address, branch, path)``; the join is on size because size is the one
   identity field a store certainly shares with lakeFS's record: the checksum lakeFS records is
   often not the object's ETag (docs/formats/lakefs-export-hazards.md, "The checksum lakeFS
   records, per way of writing"), so an ETag alone cannot rule a twin out;
4. one ``statObject`` per distinct ``(branch, path)`` on the driver (:data:`STAT_THREADS` in
   flight) says which address the branch serves there; :func:`lakefs_gc.gc.twins.decide` turns
   the answers into verdicts: **live** (kept), **kept** (could not be ruled out: a failed stat) or
   **released** (every pair answered with another address or "no such path").

A mark with few marked objects, whose sizes have few HEAD entries (or, with content evidence,
few distinct contents), makes steps 2 and 3 in memory on the driver instead
(:mod:`.twins_driver`): the same plan, without a dozen Spark actions over a few rows. Step 4
is shared (:mod:`.twin_verdicts`).

Objects kept get the reason ``identity_twin``; ``summary.json``'s ``identity_twins`` counts every
twin kept or released, and ``ruled_out`` the objects content evidence released without a stat.
Only objects that would otherwise be marked are considered, so the guard costs nothing when there
is no garbage, and it can only keep more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from lakefs_gc.gc import twins
from lakefs_gc.gc.ports import CommitGraphReader
from lakefs_gc.gc.retention import CommitGraph
from lakefs_gc.gc.twin_plan import TwinPlan, plan_keys
from lakefs_gc.spark.mark.head_contents import head_keys
from lakefs_gc.spark.mark.head_trees import HeadTrees, LakeFSHeadTrees, head_metaranges
from lakefs_gc.spark.mark.references import MetadataReader
from lakefs_gc.spark.mark.twin_evidence import (
    entry_keys,
    exposed,
    marked_sizes,
    needed_entries,
    of_sizes,
    pair_condition,
    pair_counts,
    pairing,
    with_md5,
)
from lakefs_gc.spark.mark.twin_verdicts import (
    Say,
    TwinGuard,
    Unresolved,
    decide_driver_plan,
    decide_twins,
    guard_twins_none,
)
from lakefs_gc.spark.mark.twins_driver import (
    keys_on_driver,
    marked_on_driver,
    plan_on_driver,
    sizes_frame,
    sizes_of,
)
from lakefs_gc.spark.runtime.frames import local_frame

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: at most this many distinct (branch, path) stats per mark; the sizes beyond it are kept unresolved
STAT_BUDGET = 10_000
#: at most this many (address, branch, path) pairs per mark; the sizes beyond it are kept unresolved
PAIR_BUDGET = 200_000

__all__ = ["TwinGuard", "guard_twins", "guard_twins_none", "plan_sizes", "plan_weighted", "twin_pairs"]


def guard_twins(
    spark: SparkSession,
    marked: DataFrame,
    *,
    reader: MetadataReader,
    graph: CommitGraph,
    lakefs: CommitGraphReader,
    parallelism: int,
    say: Say,
    trees: HeadTrees | None = None,
    objects: DataFrame | None = None,
    contents: DataFrame | None = None,
    sizes: DataFrame | None = None,
) -> TwinGuard:
    """Which of ``marked`` (``address, size``, optionally ``md5``) are identity twins to keep; see
    the module docstring.

    ``trees``: where the HEAD trees are read (default: from lakeFS through ``reader``).
    ``objects``: ``address, size, md5`` of the namespace's objects (the mark's candidates), where the
    HEAD entries' own objects are looked up for content evidence (None: no evidence).
    ``contents``: ``address, size, checksum, heads`` of the HEAD trees' entries, as the mark's
    classification read them (:mod:`.head_contents`): which marked objects may have a twin and
    what each size costs are then known without reading the trees again, and they are read only
    for the paths of the sizes resolved by stats. ``sizes``: ``marked``'s distinct sizes when the
    caller has them (:func:`~.twin_evidence.marked_sizes`)."""
    heads = head_metaranges(graph)
    if not heads:
        return TwinGuard(None, guard_twins_none())
    guard = _Guard(spark, heads, reader, lakefs, parallelism, say, trees or LakeFSHeadTrees(reader), objects)
    marked = with_md5(marked)
    on_driver = marked_on_driver(marked)
    if sizes is None:
        sizes = marked_sizes(marked) if on_driver is None else sizes_frame(spark, on_driver)
    if contents is None:
        result, ruled_out, read = *guard.read_trees(marked, sizes, on_driver), True
    else:
        result, ruled_out, read = guard.from_contents(marked, sizes, contents, on_driver)
    result.counts["ruled_out"], result.counts["ruled_out_bytes"] = ruled_out
    result.counts["head_trees_read"] = read
    counts = result.counts  # the guard's end, for a mark's progress (and a benchmark's phases)
    say(
        f"identity twins: {counts['live']} live, {counts['kept']} kept unresolved, {counts['released']} "
        f"released; {ruled_out[0]} objects ruled out by content evidence (their bytes' MD5)"
    )
    return result


@dataclass(frozen=True)
class _Guard:
    """What the guard reads and asks with: :meth:`read_trees` reads the HEAD trees for everything,
    :meth:`from_contents` plans from what the classification read and reads them only for paths."""

    spark: SparkSession
    heads: Mapping[str, list[str]]
    reader: MetadataReader
    lakefs: CommitGraphReader
    parallelism: int
    say: Say
    trees: HeadTrees
    objects: DataFrame | None

    def from_contents(
        self,
        marked: DataFrame,
        sizes: DataFrame,
        contents: DataFrame,
        on_driver: list[twins.MarkedObject] | None,
    ) -> tuple[TwinGuard, tuple[int, int], bool]:
        """The guard's verdicts on ``marked``, the objects and bytes content evidence ruled out, and
        whether the trees were read: which objects may have a twin and the plan come from the HEAD
        entries' ``contents`` (:func:`head_keys`); the trees are read only for the paths of the
        needed entries of the sizes the plan checks, and not at all when it checks none. Planned
        on the driver when ``on_driver`` holds the marked objects and the keys are few too."""
        keys = head_keys(sizes, contents, self.objects).localCheckpoint()
        if on_driver is not None and (weights := keys_on_driver(keys)) is not None:
            return self.keys_on_driver(marked, on_driver, weights)
        flagged = pairing(marked, keys)
        exposed_objects, ruled_out = pair_counts(flagged)
        if not exposed_objects:  # no marked object may have a twin: no size to plan
            return self.decide_none(), ruled_out, False
        paired = flagged.where("paired").select("address").localCheckpoint()
        plan = plan_weighted(marked, needed_entries(marked, keys), paired)
        if not plan.checked.take(1):
            return self.decide(None, plan), ruled_out, False
        return self.decide(self.checked_pairs(marked, plan.checked), plan), ruled_out, True

    def keys_on_driver(
        self,
        marked: DataFrame,
        on_driver: list[twins.MarkedObject],
        weights: dict[int, dict[str | None, int]],
    ) -> tuple[TwinGuard, tuple[int, int], bool]:
        """:meth:`from_contents` planned on the driver from the HEAD entries' ``weights`` (size ->
        content key -> entries): the trees are read only for the pairs of the sizes it checks."""
        stats, pair_budget = _budgets()
        planned = plan_keys(on_driver, weights, stat_budget=stats, pair_budget=pair_budget)
        checked = sorted(planned.checked)
        pairs = self.checked_pairs(marked, sizes_of(self.spark, checked)) if checked else None
        guard, ruled_out = self.driver_verdicts(replace(planned, pairs=self.pair_list(pairs)))
        return guard, ruled_out, bool(checked)

    def checked_pairs(self, marked: DataFrame, checked: DataFrame) -> DataFrame:
        """:func:`twin_pairs` of the ``checked`` sizes, their HEAD entries read from the trees now."""
        from pyspark.sql import functions as F

        tree, entries = self.read()
        sized = entries.join(F.broadcast(checked), "size", "left_semi")  # at most STAT_BUDGET sizes
        needed = needed_entries(marked, entry_keys(sized, of_sizes(self.objects, checked)))
        return twin_pairs(marked, needed, tree, checked)

    def read(self) -> tuple[DataFrame, DataFrame]:
        """``(tree, entries)`` of the HEAD trees; the tree read once, now (the queries use it
        several times, and Spark would read it again each time), the entries lazily."""
        tree = self.trees.tree(self.spark, list(self.heads), parallelism=self.parallelism).localCheckpoint()
        return tree, self.trees.entries(tree.select("id").distinct(), parallelism=self.parallelism)

    def decide_none(self) -> TwinGuard:
        """The verdicts when no marked object has a twin pair: none, without planning the sizes."""
        return self.verdicts([], Unresolved(None, 0, 0, 0))

    def pair_list(self, pairs: DataFrame | None) -> list[twins.TwinPair]:
        """:func:`twin_pairs`' rows, one pair per branch whose HEAD holds the entry."""
        return [
            twins.TwinPair(r["address"], int(r["size"]), branch, r["path"])
            for r in (pairs.collect() if pairs is not None else [])  # within PAIR_BUDGET by the plan
            for branch in self.heads[r["metarange"]]
        ]

    def decide(self, pairs: DataFrame | None, plan: SizePlan) -> TwinGuard:
        return self.verdicts(self.pair_list(pairs), plan.kept())

    def verdicts(self, pair_list: list[twins.TwinPair], unresolved: Unresolved) -> TwinGuard:
        """:func:`decide_twins` on this guard's lakeFS, within the budgets."""
        return decide_twins(
            self.spark, pair_list, unresolved, budgets=_budgets(), reader=self.reader, lakefs=self.lakefs,
            say=self.say,
        )  # fmt: skip

    def driver_verdicts(self, plan: TwinPlan) -> tuple[TwinGuard, tuple[int, int]]:
        """:func:`decide_driver_plan` on this guard's lakeFS, within the budgets."""
        return decide_driver_plan(
            self.spark, plan, budgets=_budgets(), reader=self.reader, lakefs=self.lakefs, say=self.say
        )

    def read_trees(
        self, marked: DataFrame, sizes: DataFrame, on_driver: list[twins.MarkedObject] | None
    ) -> tuple[TwinGuard, tuple[int, int]]:
        """The guard's verdicts on ``marked`` (of distinct ``sizes``) from the HEAD trees read now,
        and the objects and bytes content evidence ruled out among them; planned on the driver
        when ``on_driver`` holds the marked objects and their sizes' HEAD entries are few too
        (:mod:`.twins_driver`)."""
        tree, entries = self.read()
        sized = entries.join(sizes, "size", "left_semi")
        # the HEAD trees and the lookup of their objects' MD5s, read once for the things taken from
        # them; every query below uses ``needed`` (few rows with evidence), some several times
        keyed = entry_keys(sized, of_sizes(self.objects, sizes)).persist()
        try:
            if on_driver is not None:
                found = plan_on_driver(on_driver, tree, keyed, heads=self.heads, budgets=_budgets())
                if found is not None:
                    return self.driver_verdicts(found)
            needed = needed_entries(marked, keyed).localCheckpoint()
            head_sizes = keyed.select("size").distinct().localCheckpoint()
        finally:
            keyed.unpersist()
        # which marked objects have a twin pair (the plan's unresolved ones need their addresses)
        # and the ruled-out count, from one pass over the marked objects
        flagged = pairing(marked, needed, head_sizes)
        exposed_objects, ruled_out = pair_counts(flagged)
        if not exposed_objects:  # no marked object may have a twin: no size to plan, no pair to build
            return self.decide_none(), ruled_out
        paired = flagged.where("paired").select("address").localCheckpoint()
        plan = plan_sizes(self.spark, marked, needed, tree, self.heads, paired=paired)
        pairs = twin_pairs(marked, needed, tree, plan.checked)
        return self.decide(pairs, plan), ruled_out


def _budgets() -> tuple[int, int]:
    """(stats, pairs) the guard may spend: read when used, so a change of the module's budgets
    (a test's, or a caller's) holds for the next mark."""
    return STAT_BUDGET, PAIR_BUDGET


@dataclass(frozen=True)
class SizePlan:
    """Which sizes the guard resolves with stats (``checked``: a DataFrame of ``size``) and what it
    keeps unresolved: the marked objects of every other size a HEAD entry has."""

    checked: DataFrame
    unresolved: DataFrame | None  # ``address`` of the objects kept without a stat
    unresolved_objects: int
    unresolved_bytes: int
    unresolved_sizes: int

    def kept(self) -> Unresolved:
        return Unresolved(
            self.unresolved, self.unresolved_objects, self.unresolved_bytes, self.unresolved_sizes
        )


def plan_sizes(
    spark: SparkSession,
    marked: DataFrame,
    needed: DataFrame,
    tree: DataFrame,
    heads: Mapping[str, list[str]],
    *,
    paired: DataFrame | None = None,
) -> SizePlan:
    """Sizes to resolve, cheapest first, within both budgets; the rest are kept without a stat.

    The work of a size is known before any pair is built: its stats are the (branch, path) pairs of
    the needed HEAD entries of that size (each range weighted by the branches whose HEAD tree holds
    it), its pairs, per entry, those stats times the marked objects it may be a twin of. A size
    shared by many objects and entries (empty files, fixed-size chunks) would make the join
    quadratic; it is kept instead, and only it: its objects that have a twin pair at all
    (``paired``: their addresses, :func:`exposed`, if the caller has them already).
    """
    from pyspark.sql import functions as F

    weights = local_frame(spark, [(m, len(b)) for m, b in heads.items()], "metarange string, branches long")
    range_weight = tree.join(weights, "metarange").groupBy("id").agg(F.sum("branches").alias("heads"))
    weighted = needed.join(range_weight, "id").select("size", "key", "heads")
    return plan_weighted(marked, weighted, exposed(marked, needed) if paired is None else paired)


def plan_weighted(marked: DataFrame, needed: DataFrame, paired: DataFrame) -> SizePlan:
    """:func:`plan_sizes` from rows ``size, key, heads`` of the needed HEAD entries, each standing for
    ``heads`` (branch, path) pairs (one per entry and branch whose HEAD holds it): the same plan,
    whether the rows are the entries read from the trees or their contents as the classification
    read them (:func:`lakefs_gc.spark.mark.head_contents.head_keys`)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    objects = marked.groupBy("size").agg(
        F.count("*").alias("objects"), F.sum(F.col("md5").isNull().cast("long")).alias("unknown")
    )
    same = (
        marked.where(F.col("md5").isNotNull())
        .groupBy("size", F.col("md5").alias("key"))
        .agg(F.count("*").alias("same"))
    )
    # the marked objects an entry may be a twin of: all of its size without a key, else those
    # without an MD5 and those with its key
    matches = F.when(F.col("key").isNull(), F.col("objects")).otherwise(
        F.col("unknown") + F.coalesce(F.col("same"), F.lit(0))
    )
    per_size = (
        needed.join(objects, "size").join(same, ["size", "key"], "left")
        .groupBy("size")
        .agg(F.sum("heads").alias("stats"), F.sum(F.col("heads") * matches).alias("pairs"))
    )  # fmt: skip
    order = Window.orderBy("stats", "size").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    planned = per_size.select(
        "size",
        ((F.sum("stats").over(order) <= STAT_BUDGET)
         & (F.sum("pairs").over(order) <= PAIR_BUDGET)).alias("checked"),
    ).localCheckpoint()  # fmt: skip
    checked = planned.where("checked").select("size")
    over = planned.where("not checked").select("size")
    unresolved = marked.join(over, "size", "left_semi").join(paired, "address", "left_semi")
    row = unresolved.agg(F.count("*"), F.sum("size"), F.countDistinct("size")).collect()[0]
    if not row[0]:
        return SizePlan(checked, None, 0, 0, 0)
    return SizePlan(checked, unresolved.select("address"), int(row[0]), int(row[1] or 0), int(row[2]))


def twin_pairs(marked: DataFrame, needed: DataFrame, tree: DataFrame, checked: DataFrame) -> DataFrame:
    """``(address, size, metarange, path)``: marked objects of a checked size and the needed HEAD
    entries of that size content evidence does not rule out."""
    from pyspark.sql import functions as F

    sizes = F.broadcast(checked)  # at most STAT_BUDGET rows
    entries = needed.join(sizes, "size", "left_semi")
    return (
        marked.select("address", "size", "md5")
        .join(sizes, "size", "left_semi")
        .join(entries, "size")
        .where(pair_condition())
        .join(tree, "id")
        .select("address", "size", "metarange", "path")
    )
