"""The identity-twin guard's work plan: bounded before any pair is built, and failing safe.

A size shared by many marked objects and HEAD entries (empty files, fixed-size chunks, a
synthesized repository's uniform objects) would make the size join quadratic. The plan counts each
size's stats and pairs from per-size aggregates, resolves the cheapest sizes within both budgets
and keeps the objects of every other size unresolved (docs/invariants.md, invariant 6): never a
released object that was not asked about. The plan a small mark makes in memory on the driver
(``lakefs_gc.gc.twin_plan``) is the Spark plan's, budget for budget.
"""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from lakefs_gc.gc import twins as rule
from lakefs_gc.gc.twin_plan import TwinPlan, plan_twins
from lakefs_gc.spark.mark import twin_evidence, twins
from lakefs_gc.spark.runtime.frames import local_frame

#: branch HEAD trees: m1 is the HEAD of a and b, m2 of c; range r1 is in both trees, r2 in m2
HEADS = {"m1": ["a", "b"], "m2": ["c"]}
TREE = [("m1", "r1"), ("m2", "r1"), ("m2", "r2")]
ENTRIES = [("r1", "p0a", 0), ("r1", "p0b", 0), ("r1", "p7", 7), ("r2", "p0c", 0), ("r2", "p9", 9)]
#: five empty objects, one of 7 and 9 bytes, one of a size no HEAD entry has
MARKED = [(f"data/e{i}", 0) for i in range(5)] + [("data/s7", 7), ("data/s9", 9), ("data/s11", 11)]


def plan(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, stats: int, pairs: int
) -> tuple[twins.SizePlan, list[rule.TwinPair]]:
    monkeypatch.setattr(twins, "STAT_BUDGET", stats)
    monkeypatch.setattr(twins, "PAIR_BUDGET", pairs)
    marked = twin_evidence.with_md5(local_frame(spark, MARKED, "address string, size long"))
    tree = local_frame(spark, TREE, "metarange string, id string")
    sized = local_frame(spark, ENTRIES, "id string, path string, size long")
    needed = twin_evidence.needed_entries(marked, twin_evidence.entry_keys(sized, None))  # no evidence
    size_plan = twins.plan_sizes(spark, marked, needed, tree, HEADS)
    rows = twins.twin_pairs(marked, needed, tree, size_plan.checked).collect()
    expanded = [
        rule.TwinPair(r["address"], r["size"], b, r["path"]) for r in rows for b in HEADS[r["metarange"]]
    ]
    on_driver = driver_plan(stats, pairs)
    assert on_driver.pairs == sorted(expanded, key=lambda p: (p.address, p.branch, p.path))
    assert {m.address for m in on_driver.unresolved} == unresolved(size_plan)
    assert on_driver.checked == {r["size"] for r in size_plan.checked.collect()}
    return size_plan, expanded


def driver_plan(stats: int, pairs: int) -> TwinPlan:
    """The same plan made in memory, from the HEAD entries one per branch and path."""
    branches: dict[str, list[str]] = {}
    for metarange, range_id in TREE:
        branches.setdefault(range_id, []).extend(HEADS[metarange])
    entries = [rule.HeadEntry(b, path, size, "") for r, path, size in ENTRIES for b in branches[r]]
    marked = [rule.MarkedObject(a, s) for a, s in MARKED]
    return plan_twins(marked, entries, stat_budget=stats, pair_budget=pairs)


def unresolved(size_plan: twins.SizePlan) -> set[str]:
    return set() if size_plan.unresolved is None else {r["address"] for r in size_plan.unresolved.collect()}


def test_within_the_budgets_every_size_is_resolved(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    size_plan, pairs = plan(spark, monkeypatch, 100, 100)
    assert size_plan.unresolved is None and size_plan.unresolved_objects == 0
    # stats per size: (branch, path) of HEAD entries of it; size 0: p0a, p0b on a, b, c; p0c on c
    assert len(rule.stat_requests(pairs)) == 7 + 3 + 1
    assert {p.address for p in pairs} == {a for a, s in MARKED if s != 11}


def test_a_size_over_the_stat_budget_is_kept_without_a_stat(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    size_plan, pairs = plan(spark, monkeypatch, 5, 100)
    assert unresolved(size_plan) == {f"data/e{i}" for i in range(5)}
    assert (size_plan.unresolved_objects, size_plan.unresolved_bytes, size_plan.unresolved_sizes) == (5, 0, 1)
    assert {p.address for p in pairs} == {"data/s7", "data/s9"}  # the cheap sizes are still resolved
    assert len(rule.stat_requests(pairs)) == 3 + 1 <= 5


def test_the_pair_budget_keeps_the_dearer_sizes(spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    size_plan, pairs = plan(spark, monkeypatch, 100, 3)  # size 9: 1 pair; size 7: 3 more
    assert unresolved(size_plan) == {f"data/e{i}" for i in range(5)} | {"data/s7"}
    assert {p.address for p in pairs} == {"data/s9"}
