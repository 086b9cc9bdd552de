"""The identity-twin guard's verdicts: the stats that resolve its twin pairs, and what it keeps.

Both ways of planning the guard end here (:mod:`.twins` with Spark, :mod:`.twins_driver` in
memory): the pairs of the sizes checked are resolved by one ``statObject`` per distinct (branch,
path) and :func:`lakefs_gc.gc.twins.decide`; the objects of the sizes over the budgets are kept
unresolved.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakefs_gc.errors import GcError
from lakefs_gc.gc import twins
from lakefs_gc.gc.ports import CommitGraphReader
from lakefs_gc.gc.twin_plan import TwinPlan
from lakefs_gc.lakefs.addresses import normalize_committed_address
from lakefs_gc.spark.mark.references import MetadataReader
from lakefs_gc.spark.runtime.frames import local_frame
from lakefs_gc.storage.locations import parse_location, uri_scheme

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Say = Callable[[str], None]

#: stats in flight at once (each is a round trip to lakeFS; one at a time, 10,000 took 22 s against
#: the test server, bench/README.md)
STAT_THREADS = 8


@dataclass(frozen=True)
class TwinGuard:
    """The guard's outcome: ``kept`` addresses (a DataFrame, column ``address``) and the counts."""

    kept: DataFrame | None
    counts: dict[str, Any]


@dataclass(frozen=True)
class Unresolved:
    """The marked objects the guard keeps without a stat: their sizes are over the budgets."""

    frame: DataFrame | None  # ``address`` of the objects
    objects: int
    bytes: int
    sizes: int


def decide_twins(
    spark: SparkSession,
    pair_list: list[twins.TwinPair],
    unresolved: Unresolved,
    *,
    budgets: tuple[int, int],
    reader: MetadataReader,
    lakefs: CommitGraphReader,
    say: Say,
) -> TwinGuard:
    """The verdicts on the twin ``pair_list``: one ``statObject`` per distinct (branch, path),
    :data:`STAT_THREADS` in flight, turned into verdicts by :func:`lakefs_gc.gc.twins.decide`; the
    ``unresolved`` objects (over the ``budgets``: stats, pairs) are kept with the live and the
    unanswered ones."""
    requests = twins.stat_requests(pair_list)
    if requests:
        say(f"identity twins: {len(pair_list)} pairs, {len(requests)} stats")
    with ThreadPoolExecutor(STAT_THREADS, thread_name_prefix="twin-stat") as pool:
        served = list(pool.map(lambda r: lakefs.served_address(reader.repository, *r), requests))
    answers = {request: namespace_relative(s, reader) for request, s in zip(requests, served, strict=True)}
    decisions = twins.decide(pair_list, answers)
    keep = sorted(d.address for d in decisions if d.verdict is not twins.TwinVerdict.GARBAGE)
    counts: dict[str, Any] = dict(twins.count(pair_list, decisions).summary())
    kept = local_frame(spark, [(a,) for a in keep], "address string") if keep else None
    if unresolved.frame is not None:
        say(
            f"identity twins: {unresolved.objects} objects of {unresolved.sizes} sizes need more "
            f"than the budgets ({budgets[0]} stats, {budgets[1]} pairs): keeping them unresolved"
        )
        counts["kept"] += unresolved.objects
        counts["kept_bytes"] += unresolved.bytes
        counts["unresolved"] = (
            f"{unresolved.objects} objects of {unresolved.sizes} sizes over the budgets "
            f"({budgets[0]} stats, {budgets[1]} pairs)"
        )
        kept = unresolved.frame if kept is None else kept.unionByName(unresolved.frame)
    return TwinGuard(kept, counts)


def decide_driver_plan(
    spark: SparkSession,
    plan: TwinPlan,
    *,
    budgets: tuple[int, int],
    reader: MetadataReader,
    lakefs: CommitGraphReader,
    say: Say,
) -> tuple[TwinGuard, tuple[int, int]]:
    """:func:`decide_twins` of a plan made on the driver (:mod:`.twins_driver`), and the objects and
    bytes it ruled out by content evidence."""
    left = plan.unresolved
    frame = local_frame(spark, [(m.address,) for m in left], "address string") if left else None
    unresolved = Unresolved(frame, len(left), sum(m.size for m in left), len({m.size for m in left}))
    guard = decide_twins(
        spark, plan.pairs, unresolved, budgets=budgets, reader=reader, lakefs=lakefs, say=say
    )
    return guard, (len(plan.ruled_out), sum(m.size for m in plan.ruled_out))


def namespace_relative(answer: twins.StatAnswer, reader: MetadataReader) -> twins.StatAnswer:
    """The served address as a namespace-relative key (None: outside the namespace).

    lakeFS spells it as the namespace does (``<ns>/data/...``), or as a full location (the local
    blockstore's absolute path, an ``https://`` blob URL): both are mapped through the namespace's
    storage location, so a spelling difference can never make a served object look unserved.
    """
    if answer.kind != "address" or answer.address is None:
        return answer
    address = answer.address
    key = normalize_committed_address(address, "FULL", reader.storage_namespace)
    if key is not None and not uri_scheme(key):
        return twins.StatAnswer.at(key)
    try:
        location = parse_location(address, local_root=reader.options.local_root)
    except (GcError, ValueError) as e:
        return twins.StatAnswer.unknown(f"served address {address!r} cannot be parsed: {e}")
    ns = reader.namespace
    base = ns.key.rstrip("/") + "/"
    same_store = (location.kind, location.container, location.account) == (ns.kind, ns.container, ns.account)
    if same_store and location.key.startswith(base):
        return twins.StatAnswer.at(location.key[len(base) :])
    return twins.StatAnswer.at(None)


def guard_twins_none() -> dict[str, Any]:
    """The counts of a guard that found nothing to check."""
    return {"pairs": 0, "stats": 0, **_zero(), "head_trees_read": False}


def _zero() -> dict[str, int]:
    return {
        "live": 0, "live_bytes": 0, "kept": 0, "kept_bytes": 0, "released": 0, "released_bytes": 0,
        "ruled_out": 0, "ruled_out_bytes": 0,
    }  # fmt: skip
