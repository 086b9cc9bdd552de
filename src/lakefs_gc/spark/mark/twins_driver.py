"""The identity-twin guard of a small mark, planned on the driver (:mod:`lakefs_gc.gc.twin_plan`).

The guard's Spark plan (:mod:`.twins`) is built for a million marked objects against the HEAD
entries of a thousand branches: its questions (which objects may have a twin, what each size
costs, which to resolve) are a dozen Spark actions of a few shuffles each. A mark with few
marked objects pays ~0.2 s per action whatever the rows: 2.5-5 s of a 10-15 s mark (in the test
suite, 446 s of the 1,336 s its 168 marks took; the demo's guard, 5.1 s in 36 Spark jobs, takes
1.6 s in 10 this way). When the marked objects and the HEAD entries of their sizes
are few (:data:`DRIVER_MARKED`, :data:`DRIVER_ENTRIES`), both are collected in one query each and
the same plan is made in memory; the HEAD trees are read once, as the Spark plan reads them, so
that a mark over either bound carries on with the Spark plan from the trees already read. With
content evidence, the HEAD entries' contents the classification read are collected instead,
counted by size and content key (:func:`keys_on_driver`), and the trees are read only for the
sizes the plan checks, as the Spark plan does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lakefs_gc.gc.twin_plan import TwinPlan, plan_twins
from lakefs_gc.gc.twins import HeadEntry, MarkedObject
from lakefs_gc.spark.runtime.frames import local_frame

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import DataFrame, SparkSession

#: at most this many marked objects are planned on the driver (a few MiB of rows)
DRIVER_MARKED = 10_000
#: ... against at most this many HEAD entries (one per branch and path) of their sizes
DRIVER_ENTRIES = 100_000


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
    return sizes_of(spark, sorted({m.size for m in marked}))


def sizes_of(spark: SparkSession, sizes: list[int]) -> DataFrame:
    """``sizes`` as a frame of column ``size``."""
    return local_frame(spark, [(s,) for s in sizes], "size long")


def keys_on_driver(keys: DataFrame) -> dict[int, dict[str | None, int]] | None:
    """:func:`~lakefs_gc.spark.mark.head_contents.head_keys`' rows (``size, key, heads``) as
    size -> key -> (branch, path) entries, for :func:`lakefs_gc.gc.twin_plan.plan_keys`, when
    they are at most :data:`DRIVER_ENTRIES` rows (None: more)."""
    rows = keys.select("size", "key", "heads").limit(DRIVER_ENTRIES + 1).toArrow()
    if rows.num_rows > DRIVER_ENTRIES:
        return None
    weights: dict[int, dict[str | None, int]] = {}
    for r in rows.to_pylist():
        by_key = weights.setdefault(int(r["size"]), {})
        by_key[r["key"]] = by_key.get(r["key"], 0) + int(r["heads"])
    return weights


def plan_on_driver(
    marked: list[MarkedObject],
    tree: DataFrame,
    keyed: DataFrame,
    *,
    heads: Mapping[str, list[str]],
    budgets: tuple[int, int],
) -> TwinPlan | None:
    """The guard's plan for ``marked`` from the HEAD ``tree`` (``metarange, id``) and the
    ``keyed`` entries of the marked objects' sizes (``id, path, size, key``:
    :func:`~lakefs_gc.spark.mark.twin_evidence.entry_keys`), when those are at most
    :data:`DRIVER_ENTRIES` once counted per branch (None: more; the caller keeps ``keyed``
    persisted, so that its Spark plan does not read the trees again). ``budgets``: (stats, pairs)."""
    head_entries = _head_entries(tree, keyed, heads=heads)
    if head_entries is None:
        return None
    stat_budget, pair_budget = budgets
    return plan_twins(marked, head_entries, stat_budget=stat_budget, pair_budget=pair_budget)


def _head_entries(
    tree: DataFrame, keyed: DataFrame, *, heads: Mapping[str, list[str]]
) -> list[HeadEntry] | None:
    rows = (
        keyed.join(tree, "id").select("metarange", "path", "size", "key").limit(DRIVER_ENTRIES + 1).toArrow()
    )
    if sum(len(heads[m]) for m in rows.column("metarange").to_pylist()) > DRIVER_ENTRIES:
        return None  # as Arrow until counted: over the bound, no row became an object
    return [_entry(r, branch) for r in rows.to_pylist() for branch in heads[r["metarange"]]]


def _entry(row: dict[str, Any], branch: str) -> HeadEntry:
    """The entry as the rule takes it: a proven ``key`` is the entry's checksum and its own
    object's MD5 at once (``entry_keys`` set it so: the object's lower-case MD5, equal to the
    checksum), so :func:`lakefs_gc.gc.twins.entry_key` gives it back; an unproven one, neither."""
    key = row["key"]
    return HeadEntry(branch, row["path"], int(row["size"]), key or "", object_md5=key)
