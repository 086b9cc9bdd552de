"""The identity-twin guard of a small mark, planned on the driver (:mod:`lakefs_gc.gc.twin_plan`).

The guard's Spark plan (:mod:`.twins`) is built for a million marked objects against the HEAD
entries of a thousand branches: its questions (which objects may have a twin, what each size
costs, which to resolve) are a dozen Spark actions of a few shuffles each. A mark with few
marked objects pays ~0.2 s per action whatever the rows: 2.5-5 s of a 10-15 s mark (in the test
suite, 446 s of the 1,336 s its 168 marks took; the demo's guard, 5.1 s in 36 Spark jobs, takes
1.6 s in 10 this way). When the marked objects and the HEAD entries of their sizes
are few (:data:`DRIVER_MARKED`, :data:`DRIVER_ENTRIES`), both are collected in one query each and
the same plan is made in memory; the HEAD trees are read once, as the Spark plan reads them, so
that a mark over either bound carries on with the Spark plan from the trees already read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakefs_gc.gc.twin_plan import TwinPlan, plan_twins
from lakefs_gc.gc.twins import HeadEntry, MarkedObject
from lakefs_gc.spark.mark.sources.base import CONTENT_MD5
from lakefs_gc.spark.mark.twin_evidence import of_sizes
from lakefs_gc.spark.runtime.frames import local_frame

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import DataFrame, SparkSession

#: at most this many marked objects are planned on the driver (a few MiB of rows)
DRIVER_MARKED = 10_000
#: ... against at most this many HEAD entries (one per branch and path) of their sizes
DRIVER_ENTRIES = 100_000


@dataclass(frozen=True)
class DriverPlan:
    """A plan made on the driver, with the marked objects it was made for."""

    plan: TwinPlan
    marked: list[MarkedObject]


def marked_on_driver(marked: DataFrame) -> list[MarkedObject] | None:
    """``marked`` (``address, size, md5``) as objects, when they are at most :data:`DRIVER_MARKED`
    (None: more; the guard plans with Spark)."""
    # as Arrow: a large mark's first rows, looked at only to be counted, stay a few buffers
    rows = marked.select("address", "size", "md5").limit(DRIVER_MARKED + 1).toArrow()
    if rows.num_rows > DRIVER_MARKED:
        return None
    return [MarkedObject(r["address"], int(r["size"]), md5=r["md5"]) for r in rows.to_pylist()]


def sizes_frame(spark: SparkSession, marked: list[MarkedObject]) -> DataFrame:
    """The distinct sizes (column ``size``) of ``marked``, without a Spark job."""
    return local_frame(spark, [(s,) for s in sorted({m.size for m in marked})], "size long")


def plan_on_driver(
    marked: list[MarkedObject],
    tree: DataFrame,
    entries: DataFrame,
    *,
    sizes: DataFrame,
    objects: DataFrame | None,
    heads: Mapping[str, list[str]],
    budgets: tuple[int, int],
) -> DriverPlan | None:
    """The guard's plan for ``marked`` from the HEAD ``tree`` (``metarange, id``) and its
    ``entries``, when the entries of the marked ``sizes`` are at most :data:`DRIVER_ENTRIES` once
    counted per branch (None: more). ``objects``: where the entries' own objects' MD5s are looked
    up (:func:`~lakefs_gc.spark.mark.twin_evidence.entry_keys`); ``budgets``: (stats, pairs)."""
    head_entries = _head_entries(tree, entries, sizes=sizes, objects=objects, heads=heads)
    if head_entries is None:
        return None
    stat_budget, pair_budget = budgets
    return DriverPlan(
        plan_twins(marked, head_entries, stat_budget=stat_budget, pair_budget=pair_budget), marked
    )


def _head_entries(
    tree: DataFrame,
    entries: DataFrame,
    *,
    sizes: DataFrame,
    objects: DataFrame | None,
    heads: Mapping[str, list[str]],
) -> list[HeadEntry] | None:
    from pyspark.sql import functions as F

    sized = entries.join(F.broadcast(sizes), "size", "left_semi")
    if objects is not None and CONTENT_MD5 in objects.columns:
        looked_up = of_sizes(objects, sizes)
        assert looked_up is not None  # it is None only without objects
        proven = looked_up.where(F.col(CONTENT_MD5).isNotNull())
        sized = sized.join(
            proven.select("address", F.col(CONTENT_MD5).alias("object_md5")), "address", "left"
        )
    else:
        sized = sized.withColumn("object_md5", F.lit(None).cast("string"))
    columns = ("metarange", "path", "size", "checksum", "object_md5")
    rows = sized.join(tree, "id").select(*columns).limit(DRIVER_ENTRIES + 1).toArrow()
    if sum(len(heads[m]) for m in rows.column("metarange").to_pylist()) > DRIVER_ENTRIES:
        return None  # as Arrow until counted: over the bound, no row became an object
    return [_entry(r, branch) for r in rows.to_pylist() for branch in heads[r["metarange"]]]


def _entry(row: dict[str, Any], branch: str) -> HeadEntry:
    return HeadEntry(branch, row["path"], int(row["size"]), row["checksum"], object_md5=row["object_md5"])
