"""The identity-twin guard of the mark (docs/invariants.md, invariant 6; the rule: :mod:`lakefs_gc.gc.twins`).

lakeFS's uncommitted dump leaves out a staged entry whose identity (size, ETag, metadata, content
type) equals the committed entry it shadows, so an identical re-upload over a committed path is in
no export while its branch serves it. Here, after the classification:

1. the HEAD trees of every branch (hidden ones included, from the cross-check's commit graph) are
   read on the executors, each distinct range once, as ``(range, path, size)``;
2. the objects about to be marked are joined with them on size: the *twin pairs*
   ``(address, branch, path)``; the join is on size because the listing cannot tell an object's
   ETag, and size is the one identity field a store certainly shares with lakeFS's record;
3. one ``statObject`` per distinct ``(branch, path)`` on the driver says which address the branch
   serves there; :func:`lakefs_gc.gc.twins.decide` turns the answers into verdicts: **live** (kept),
   **kept** (could not be ruled out: a failed stat, or more pairs than the stat budget) or
   **released** (every pair answered with another address or "no such path").

Objects kept get the reason ``identity_twin``; ``summary.json``'s ``identity_twins`` counts every
twin kept or released. Only objects that would otherwise be marked are considered, so the guard
costs nothing when there is no garbage, and it can only keep more.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakefs_gc.errors import GcError
from lakefs_gc.gc import twins
from lakefs_gc.gc.ports import CommitGraphReader
from lakefs_gc.gc.retention import CommitGraph
from lakefs_gc.lakefs.addresses import normalize_committed_address
from lakefs_gc.lakefs.client import LakeFSClient
from lakefs_gc.lakefs.ranges import open_sstable
from lakefs_gc.spark.mark.references import RANGE_READER_SOURCE, MetadataReader
from lakefs_gc.spark.runtime.failures import on_executor
from lakefs_gc.sstable.graveler import iter_range_entries
from lakefs_gc.storage.filesystems import filesystem_for
from lakefs_gc.storage.locations import parse_location, uri_scheme

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: at most this many distinct (branch, path) stats per mark; beyond it every twin is kept unresolved
STAT_BUDGET = 10_000
#: at most this many twin pairs are brought to the driver; beyond it every twin is kept unresolved
PAIR_BUDGET = 200_000

Say = Callable[[str], None]
_ENTRIES = pa.schema([("id", pa.string()), ("path", pa.string()), ("size", pa.int64())])


@dataclass(frozen=True)
class TwinGuard:
    """The guard's outcome: ``kept`` addresses (a DataFrame, column ``address``) and the counts."""

    kept: DataFrame | None
    counts: dict[str, Any]


def head_metaranges(graph: CommitGraph) -> dict[str, list[str]]:
    """Metarange of every branch HEAD → the branches whose HEAD has that tree."""
    heads: dict[str, list[str]] = {}
    for branch, head in sorted(graph.branches.items()):
        metarange = graph.metaranges.get(head, "")
        if metarange:
            heads.setdefault(metarange, []).append(branch)
    return heads


def guard_twins(
    spark: SparkSession,
    marked: DataFrame,
    *,
    reader: MetadataReader,
    graph: CommitGraph,
    lakefs: CommitGraphReader,
    parallelism: int,
    say: Say,
) -> TwinGuard:
    """Which of ``marked`` (``address, size``) are identity twins to keep; see the module docstring."""
    heads = head_metaranges(graph)
    if not heads:
        return TwinGuard(None, guard_twins_none())
    pairs = twin_pairs(spark, marked, reader, list(heads), parallelism=parallelism)
    pairs.persist()
    try:
        return _decide(spark, pairs, heads, reader, lakefs, say)
    finally:
        pairs.unpersist()


def twin_pairs(
    spark: SparkSession, marked: DataFrame, reader: MetadataReader, metaranges: list[str], *, parallelism: int
) -> DataFrame:
    """``(address, size, metarange, path)``: marked objects of the size of a HEAD entry."""
    heads = spark.createDataFrame([(m,) for m in metaranges], "metarange string")
    heads = heads.repartition(max(1, min(parallelism, len(metaranges))))
    # read once: the query below uses the tree twice, and Spark would read every metarange again
    tree = heads.mapInArrow(on_executor(_HeadRanges(reader)), "metarange string, id string").localCheckpoint()
    entries = (
        tree.select("id").distinct().repartition(parallelism)
        .mapInArrow(on_executor(_RangeEntries(reader)), "id string, path string, size long")
    )  # fmt: skip
    sized = entries.join(marked.select("size").distinct(), "size", "left_semi")
    return marked.select("address", "size").join(sized, "size").join(tree, "id").drop("id")


def _decide(
    spark: SparkSession,
    pairs: DataFrame,
    heads: Mapping[str, list[str]],
    reader: MetadataReader,
    lakefs: CommitGraphReader,
    say: Say,
) -> TwinGuard:
    paths = pairs.select("metarange", "path").distinct()
    num_paths, num_pairs = paths.count(), pairs.count()
    stats_needed = num_paths  # at least; each path is one stat per branch sharing the tree
    if num_paths <= STAT_BUDGET:
        stats_needed = sum(len(heads[r["metarange"]]) for r in paths.collect())
    if stats_needed > STAT_BUDGET or num_pairs > PAIR_BUDGET:
        say(f"{num_pairs} twin pairs need {stats_needed}+ stats (budget {STAT_BUDGET}): keeping them all")
        return _keep_unresolved(pairs, num_pairs)
    pair_list = [
        twins.TwinPair(r["address"], int(r["size"]), branch, r["path"])
        for r in pairs.collect()
        for branch in heads[r["metarange"]]
    ]
    requests = twins.stat_requests(pair_list)
    if requests:
        say(f"identity twins: {len(pair_list)} pairs, {len(requests)} stats")
    answers = {
        (branch, path): namespace_relative(lakefs.served_address(reader.repository, branch, path), reader)
        for branch, path in requests
    }
    decisions = twins.decide(pair_list, answers)
    keep = sorted(d.address for d in decisions if d.verdict is not twins.TwinVerdict.GARBAGE)
    counts = twins.count(pair_list, decisions).summary()
    if not keep:
        return TwinGuard(None, dict(counts))
    return TwinGuard(spark.createDataFrame([(a,) for a in keep], "address string"), dict(counts))


def _keep_unresolved(pairs: DataFrame, num_pairs: int) -> TwinGuard:
    """Every twin kept without a stat: more pairs than the budgets allow (never released unasked)."""
    kept = pairs.select("address", "size").distinct()
    objects, size = kept.groupBy().agg({"address": "count", "size": "sum"}).collect()[0]
    counts: dict[str, Any] = {"pairs": num_pairs, "stats": 0, **_zero()}
    counts.update(kept=int(objects), kept_bytes=int(size or 0), unresolved="over the stat budget")
    return TwinGuard(kept.select("address"), counts)


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
    return {"pairs": 0, "stats": 0, **_zero()}


def _zero() -> dict[str, int]:
    return {"live": 0, "live_bytes": 0, "kept": 0, "kept_bytes": 0, "released": 0, "released_bytes": 0}


class _HeadRanges:
    """Per partition: ``(metarange, range id)`` of each HEAD metarange."""

    def __init__(self, reader: MetadataReader) -> None:
        self.reader = reader

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, _ = filesystem_for(self.reader.namespace, self.reader.options)
        with LakeFSClient(self.reader.connection, source=RANGE_READER_SOURCE) as client:
            for batch in batches:
                for metarange in batch.column("metarange").to_pylist():
                    ids = self.reader.read_metarange(client, fs, metarange)
                    yield pa.RecordBatch.from_pydict({"metarange": [metarange] * len(ids), "id": ids})


class _RangeEntries:
    """Per partition: ``(range id, path, size)`` of every entry of each range."""

    def __init__(self, reader: MetadataReader) -> None:
        self.reader = reader

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        r = self.reader
        fs, _ = filesystem_for(r.namespace, r.options)
        with LakeFSClient(r.connection, source=RANGE_READER_SOURCE) as client:
            for batch in batches:
                for range_id in batch.column("id").to_pylist():
                    location = r.resolve(range_id, client.range_location(r.repository, range_id))
                    with open_sstable(fs, location, location.fs_path) as table:
                        rows = [(key.decode("utf-8"), e.size) for key, e in iter_range_entries(table)]
                    yield pa.RecordBatch.from_pydict(
                        {
                            "id": [range_id] * len(rows),
                            "path": [p for p, _ in rows],
                            "size": [s for _, s in rows],
                        },
                        schema=pa.schema([("id", pa.string()), ("path", pa.string()), ("size", pa.int64())]),
                    )
