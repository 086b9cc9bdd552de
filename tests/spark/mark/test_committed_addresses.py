"""The range cache's committed-address level: after every mark it counts exactly the addresses of
the ranges it says it counts (as the addresses level holds them), a mark through it marks what an
uncached mark marks, and it fails closed: a count that would fall below zero, or a damaged part."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from lakefs_gc.spark.mark.range_cache import Generation, Part, RangeCache, RangeCacheError
from lakefs_gc.spark.mark.range_cache.committed import COUNT_SCHEMA, _CountUpdate, _runs
from lakefs_gc.spark.mark.range_cache.generation import CommittedLevel
from lakefs_gc.spark.mark.range_cache.retention import plan_retention
from lakefs_gc.spark.mark.result import MarkResult
from tests.spark.mark.test_range_cache import REPO, env, grow, mark, recorded
from tests.support.gc_env import GcEnv
from tests.testing.unified_gc import DAY

pytestmark = pytest.mark.usefixtures("spark")
__all__ = ["env"]  # the fixture, shared with the range cache's tests


def newest(cache: RangeCache) -> Generation:
    generation = cache.latest()
    assert generation is not None
    return generation


def expected_counts(cache: RangeCache, generation: Generation, ranges: set[str]) -> Counter[str]:
    """How many entries of ``ranges`` hold each address, read from the addresses level's parts."""
    counts: Counter[str] = Counter()
    for parts in generation.ranges.values():
        for part in parts:
            for row in pq.read_table(cache.root / part.file).to_pylist():
                if row["range_id"] in ranges and row["address"] is not None:
                    counts[row["address"]] += 1
    return counts


def level_counts(cache: RangeCache, level: CommittedLevel) -> dict[str, int]:
    """Every address ``level`` counts, with its count, read from its bucket parts (each once);
    each kept with Spark's own xxhash64 of it, which the lookup finds it by."""
    counts: dict[str, int] = {}
    hashes: dict[str, int] = {}
    for part in level.buckets.values():
        table = pq.read_table(cache.root / part.file)
        assert table.num_rows == part.rows
        addresses, numbers = table.column("address").to_pylist(), table.column("count").to_pylist()
        counts.update(zip(addresses, numbers, strict=True))
        hashes.update(zip(addresses, table.column("hash").to_pylist(), strict=True))
    assert len(counts) == sum(part.rows for part in level.buckets.values())
    assert hashes == spark_hashes(list(hashes))
    return counts


def spark_hashes(addresses: list[str]) -> dict[str, int]:
    """Spark's xxhash64 of each address (the level's ``hash`` column)."""
    from pyspark.sql import functions as F

    spark = SparkSession.getActiveSession()
    assert spark is not None
    frame = spark.createDataFrame([(a,) for a in addresses], "address string")
    return {r["address"]: r["h"] for r in frame.select("address", F.xxhash64("address").alias("h")).collect()}


def counts_table(addresses: list[str], counts: list[int]) -> pa.Table:
    """A level part's rows: ``addresses`` with their ``counts`` and Spark's hashes."""
    hashes = spark_hashes(addresses)
    return pa.table({"address": addresses, "count": counts, "hash": [hashes[a] for a in addresses]},
                    schema=COUNT_SCHEMA)  # fmt: skip


def check_level(env: GcEnv, cache: RangeCache, result: MarkResult) -> Counter[str]:
    """The level of the newest record counts exactly the mark's ranges, entry by entry."""
    generation = newest(cache)
    level = generation.committed
    assert level is not None and level.ranges is not None
    counted = set(pq.read_table(cache.root / level.ranges.file).column("range_id").to_pylist())
    assert counted == recorded(env, result, "ranges", "range_id")  # no retained-only metarange here
    expected = expected_counts(cache, generation, counted)
    assert level_counts(cache, level) == expected and expected
    assert result.summary["range_cache"]["committed_addresses"] == len(expected)
    return expected


def test_the_level_follows_gained_and_lost_ranges(spark: SparkSession, env: GcEnv, tmp_path: Path) -> None:
    env.lakefs.branch(REPO, "old", "main")
    for i in range(12):
        env.lakefs.upload(REPO, "old", f"old/f{i}", f"old-{i}".encode())
    env.lakefs.commit(REPO, "old", "add old", date=int(time.time()) - 20 * DAY)
    cache = RangeCache.for_repository(tmp_path / "state", REPO, buckets=4)
    first, _ = mark(spark, env, cache)
    stats = first.summary["range_cache"]
    assert stats["committed_rebuilt"] == 1 and stats["committed_buckets_written"] > 0
    before = check_level(env, cache, first)

    env.lakefs.branches.delete_branch(REPO, "old")  # its commit is past retention: its ranges are lost
    grow(env, "wide", "w3", 3)  # and new ranges are gained
    second, cached = mark(spark, env, cache)
    stats = second.summary["range_cache"]
    assert stats["committed_rebuilt"] == 0
    assert stats["committed_ranges_gained"] > 0 and stats["committed_ranges_lost"] > 0
    after = check_level(env, cache, second)
    assert any(a not in after for a in before) and any(a not in before for a in after)
    assert cached == mark(spark, env, None)[1]

    third, _ = mark(spark, env, cache)  # nothing changed: the level is read as it is
    stats = third.summary["range_cache"]
    assert (stats["committed_ranges_gained"], stats["committed_ranges_lost"]) == (0, 0)
    assert stats["committed_buckets_written"] == 0
    assert stats["generation"] == second.summary["range_cache"]["generation"]


def test_a_level_the_byte_cap_cut_is_built_again(spark: SparkSession, env: GcEnv, tmp_path: Path) -> None:
    """An older version's record (no level, or one spread over its buckets otherwise) and a byte
    cap that dropped a part all rebuild it."""
    meta = Part("metaranges/part-00000002-m.parquet", 4, ids=("m1",), used=2)
    address = Part("ranges/part-00000001-b00000-a.parquet", 9, ranges=2, used=1)
    level = CommittedLevel(
        Part("committed/ranges-00000002-r.parquet", 2, used=2),
        {0: Part("committed/part-00000002-b00000-c.parquet", 5, used=2)},
    )
    generation = Generation(2, "repo", "local://repo", 4, (meta,), {0: (address,)}, committed=level)
    assert Generation.from_json(json.loads(generation.to_json())) == generation
    sizes = dict.fromkeys(generation.files(), 100)
    trimmed = plan_retention(generation, sizes, 300)  # the address part, least recently used, goes
    assert address.file not in trimmed.files() and trimmed.committed is None
    assert plan_retention(generation, sizes, 400) is generation

    cache = RangeCache.for_repository(tmp_path / "state", REPO, buckets=4)
    _, expected = mark(spark, env, cache)
    record = cache.root / f"_gen/{newest(cache).number:08d}.json"
    body = json.loads(record.read_text())
    body.pop("committed_addresses")  # as a version without the level wrote it
    record.write_text(json.dumps(body))
    again, marked = mark(spark, env, cache)
    assert marked == expected and again.summary["range_cache"]["committed_rebuilt"] == 1
    check_level(env, cache, again)

    record = cache.root / f"_gen/{newest(cache).number:08d}.json"
    body = json.loads(record.read_text())
    body["committed_addresses"].pop("bucketing")  # as the version that spread it by crc32 wrote it
    record.write_text(json.dumps(body))
    assert newest(cache).committed is None  # never looked up in buckets it was not spread over
    third, marked = mark(spark, env, cache)
    assert marked == expected and third.summary["range_cache"]["committed_rebuilt"] == 1
    check_level(env, cache, third)

    record = cache.root / f"_gen/{newest(cache).number:08d}.json"
    body = json.loads(record.read_text())
    body["committed_addresses"]["bucketing"] = "spark-murmur3"  # the version that kept no hashes
    record.write_text(json.dumps(body))
    assert newest(cache).committed is None
    fourth, marked = mark(spark, env, cache)
    assert marked == expected and fourth.summary["range_cache"]["committed_rebuilt"] == 1
    check_level(env, cache, fourth)


def test_a_damaged_level_fails_the_mark(spark: SparkSession, env: GcEnv, tmp_path: Path) -> None:
    cache = RangeCache.for_repository(tmp_path / "state", REPO, buckets=4)
    _, expected = mark(spark, env, cache)
    level = newest(cache).committed
    assert level is not None
    victim = cache.root / sorted(p.file for p in level.buckets.values())[0]
    intact = victim.read_bytes()
    table = pq.read_table(victim)
    pq.write_table(table.slice(0, table.num_rows - 1), victim)  # valid parquet, one row short
    with pytest.raises(RangeCacheError, match=re.escape(victim.name)):
        mark(spark, env, cache)
    victim.write_bytes(intact)
    assert mark(spark, env, cache)[1] == expected


def test_a_count_below_zero_fails(tmp_path: Path) -> None:
    """Subtracting a lost range's entries from counts that never held them is an inconsistent
    level: the update raises, naming the address, and writes nothing the record lists."""
    cache = RangeCache(tmp_path / "cache")
    cache.open(REPO, "local://unified")
    part = Part("committed/part-00000001-b00001-x.parquet", 2)
    pq.write_table(counts_table(["data/a", "data/b"], [1, 2]), cache.root / part.file)
    hashes = spark_hashes(["data/a", "data/b"])
    update = _CountUpdate(cache.store(), 2, {1: part})
    deltas = pa.record_batch({"bucket": pa.array([1, 1], pa.int32()), "address": ["data/a", "data/b"],
                              "delta": pa.array([-1, 1], pa.int64()),
                              "hash": [hashes["data/a"], hashes["data/b"]]})  # fmt: skip
    (status,) = [b.to_pylist()[0] for b in update(iter([deltas]))]
    counts = pq.read_table(cache.root / status["file"]).to_pylist()
    assert counts == [{"address": "data/b", "count": 3, "hash": hashes["data/b"]}]  # data/a reached 0
    assert status["rows"] == 1
    below = pa.record_batch({"bucket": pa.array([1], pa.int32()), "address": ["data/a"],
                             "delta": pa.array([-2], pa.int64()), "hash": [hashes["data/a"]]})  # fmt: skip
    with pytest.raises(RangeCacheError, match=r"data/a .* below zero"):
        list(update(iter([below])))


def test_counts_are_applied_by_hash_as_grouping_by_address_would() -> None:
    """A bucket's update finds each delta's row by hash and compares the address; it answers as
    grouping the bucket by address does, with hashes shared between held addresses, between a
    held and a new one, and between two new ones (xxhash64 collisions, made up here)."""
    import random

    from lakefs_gc.spark.mark.range_cache.committed import _applied, _grouped

    def ordered(table: pa.Table) -> list[dict[str, object]]:
        return sorted(table.to_pylist(), key=lambda row: str(row["address"]))

    rng = random.Random(17)
    for trial in range(400):
        held_addresses = [f"data/h{i}" for i in range(rng.randint(0, 60))]
        hashes = {a: rng.randint(0, 40) for a in [*held_addresses, *(f"data/n{i}" for i in range(20))]}
        held = pa.table(
            [
                held_addresses,
                [rng.randint(1, 3) for _ in held_addresses],
                [hashes[a] for a in held_addresses],
            ],
            schema=COUNT_SCHEMA,
        )
        changed = rng.sample(sorted(hashes), rng.randint(0, 20))
        deltas = pa.table({
            "address": pa.array(changed, pa.string()),
            "delta": pa.array([rng.choice([-2, -1, 1, 2]) for _ in changed], pa.int64()),
            "hash": pa.array([hashes[a] for a in changed], pa.int64()),
        })  # fmt: skip
        assert ordered(_applied(held, deltas)) == ordered(_grouped(held, deltas)), trial


def test_runs_split_sorted_batches_by_bucket() -> None:
    def batch(buckets: list[int]) -> pa.RecordBatch:
        return pa.record_batch({"bucket": pa.array(buckets, pa.int32()), "n": list(range(len(buckets)))})

    batches = [batch([0, 0, 2]), batch([2, 2, 5]), batch([]), batch([7])]
    runs = [(b, t.num_rows) for b, t in _runs(iter(batches))]
    assert runs == [(0, 2), (2, 3), (5, 1), (7, 1)]


def join_above(plan: list[str], node: str) -> str:
    """The nearest join above the first ``node`` of a physical plan's text (one node per line,
    indented under its parent)."""
    at = next(i for i, line in enumerate(plan) if node in line)
    depth = re.search(r"[A-Za-z]", plan[at]).start()  # type: ignore[union-attr]
    for line in reversed(plan[:at]):
        start = re.search(r"[A-Za-z]", line)
        if start is not None and start.start() < depth:
            depth = start.start()
            if "Join" in line[depth:].split(" ")[0]:
                return line[depth:]
    raise AssertionError(f"no join above {node}")


def test_the_classification_never_broadcasts_the_level(spark: SparkSession, tmp_path: Path) -> None:
    """Spark planned the join with the level as a sort-merge join, and its adaptive execution then
    made it a broadcast of the level: at the bottom line 22M addresses, and the driver ran out of
    heap. The classification asks for a sort-merge join on it, which the plan as run keeps (here
    too, without the hint, the level would be broadcast); its answers are the same."""
    from datetime import datetime, timedelta, timezone

    from lakefs_gc.gc import reasons
    from lakefs_gc.gc.cutoff import Cutoff
    from lakefs_gc.spark.mark.algebra import classify
    from lakefs_gc.spark.mark.range_cache.committed import committed_addresses

    cache = RangeCache(tmp_path / "cache")
    cache.open(REPO, "local://unified")
    part = Part("committed/part-00000001-b00000-x.parquet", 2)
    pq.write_table(counts_table(["data/a", "data/b"], [1, 3]), cache.root / part.file)
    level = committed_addresses(spark, cache.store(), CommittedLevel(None, {0: part}), 2)
    old = datetime(2020, 1, 1, tzinfo=timezone.utc)
    listed = spark.createDataFrame(
        [("data/a", 1, old), ("data/c", 1, old)], "address string, size long, last_modified timestamp"
    )
    staged = spark.createDataFrame([], "address string")
    cutoff = Cutoff(old + timedelta(days=1), timedelta(days=1), "test")
    classified = classify(listed, committed=level, uncommitted=staged, cutoff=cutoff, committed_unique=True)
    rows = {r["address"]: r["reason"] for r in classified.collect()}
    # the plan as run: adaptive execution re-plans a join from the sizes its shuffles wrote
    plan = classified._jdf.queryExecution().executedPlan().toString().splitlines()
    assert "isFinalPlan=true" in plan[0]
    assert join_above(plan, "MapInArrow").startswith("SortMergeJoin"), "\n".join(plan)
    assert rows == {"data/a": reasons.COMMITTED, "data/c": reasons.GARBAGE}


def test_the_level_flags_the_candidates_in_their_own_tasks(spark: SparkSession, tmp_path: Path) -> None:
    """Candidates hash-partitioned by address into a divisor or a multiple of the level's bucket
    count are flagged in their own tasks (no join with the level); another count is joined. The
    verdicts are the same either way, and do not depend on the partitioning being as declared:
    a task reads the buckets its rows belong to, as Spark computes them."""
    from collections import defaultdict
    from datetime import datetime, timedelta, timezone

    from lakefs_gc.gc import reasons
    from lakefs_gc.gc.cutoff import Cutoff
    from lakefs_gc.spark.mark.algebra import classify
    from lakefs_gc.spark.mark.range_cache.committed import committed_addresses, committed_bucket
    from lakefs_gc.spark.mark.range_cache.committed_lookup import CommittedLookup

    buckets, committed = 8, [f"data/c/{i}" for i in range(300)]
    others = [f"data/o/{i}" for i in range(200)]
    cache = RangeCache(tmp_path / "cache", buckets=buckets)
    cache.open(REPO, "local://unified")
    spread: defaultdict[int, list[str]] = defaultdict(list)
    addresses = spark.createDataFrame([(a,) for a in committed], "address string")
    for row in addresses.select("address", committed_bucket(buckets).alias("b")).collect():
        spread[row["b"]].append(row["address"])
    parts = {}
    for bucket, held in spread.items():
        parts[bucket] = Part(f"committed/part-00000001-b{bucket:05d}-x.parquet", len(held))
        pq.write_table(counts_table(held, [1] * len(held)), cache.root / parts[bucket].file)
    level = CommittedLevel(None, parts)
    store = cache.store()
    lookup = CommittedLookup(store, level, buckets, committed_addresses(spark, store, level, 2))
    old = datetime(2020, 1, 1, tzinfo=timezone.utc)
    rows = [(a, 1, old) for a in [*committed[::2], *others]]
    listed = spark.createDataFrame(rows, "address string, size long, last_modified timestamp")
    staged = spark.createDataFrame([(a,) for a in others[:50]], "address string")
    cutoff = Cutoff(old + timedelta(days=1), timedelta(days=1), "test")
    expected = {
        **dict.fromkeys(committed[::2], reasons.COMMITTED),
        **dict.fromkeys(others[:50], reasons.UNCOMMITTED),
        **dict.fromkeys(others[50:], reasons.GARBAGE),
    }
    # (partitioned into, declared): 3 fits neither way; 3 declared as 4, the verdicts still hold
    for into, declared in ((2, 2), (8, 8), (16, 16), (3, 3), (3, 4)):
        kept = listed.repartition(into, "address").sortWithinPartitions("address")
        classified = classify(kept, committed=lookup, uncommitted=staged, cutoff=cutoff, partitions=declared)
        assert {r["address"]: r["reason"] for r in classified.collect()} == expected, (into, declared)
        plan = classified._jdf.queryExecution().executedPlan().toString().split("== Initial Plan ==")[0]
        joins = plan.count("Join ")  # in the plan as run
        assert joins == (1 if lookup.fits(declared) else 2), (into, declared, plan)
    assert [lookup.fits(n) for n in (1, 2, 8, 16, 3, None)] == [True, True, True, True, False, False]


def test_the_lookup_compares_addresses_that_share_a_hash(tmp_path: Path) -> None:
    """A row is flagged by its address, not by its hash alone: addresses of one hash (here made
    up, as xxhash64 collisions are too rare to find) are each found or not on their own, in
    buckets loaded as their rows come."""
    from lakefs_gc.spark.mark.range_cache.committed_lookup import _Flag

    cache = RangeCache(tmp_path / "cache")
    cache.open(REPO, "local://unified")
    held = {0: (["data/a", "data/b", "data/c"], [7, 7, 9]), 1: (["data/q"], [7])}
    parts = {}
    for bucket, (addresses, hashes) in held.items():
        parts[bucket] = Part(f"committed/part-00000001-b{bucket:05d}-x.parquet", len(addresses))
        rows = {"address": addresses, "count": [1] * len(addresses), "hash": hashes}
        pq.write_table(pa.table(rows, schema=COUNT_SCHEMA), cache.root / parts[bucket].file)
    flag = _Flag(cache.store(), parts)
    rows = [("data/b", 0, 7), ("data/a", 0, 7), ("data/x", 0, 7), ("data/c", 0, 9), ("data/d", 0, 10),
            ("data/e", 0, 1), (None, 0, 7)]  # fmt: skip
    later = [("data/q", 1, 7), ("data/a", 0, 7), ("data/y", 1, 7), ("data/z", 2, 7)]  # 2: not listed

    def batch(rows: list[tuple[str | None, int, int]]) -> tuple[pa.Array, pa.Array, pa.Array]:
        address, bucket, hashed = zip(*rows, strict=True)
        return pa.array(address, pa.string()), pa.array(bucket, pa.int32()), pa.array(hashed, pa.int64())

    found = [f.to_pylist() for f in flag(iter([batch(rows), batch(later)]))]
    assert found == [[True, True, None, True, None, None, None], [True, True, None, None]]


def test_the_lookup_finds_exactly_the_held_addresses() -> None:
    """The index by leading hash bits answers as a set of (address, hash) pairs would, with
    many hashes shared (every tenth address of the level shares its hash with another), at
    sizes that leave slots empty, single and crowded."""
    import numpy as np

    from lakefs_gc.spark.mark.range_cache.committed_lookup import _Held, _index, _unsigned

    rng = np.random.default_rng(17)
    for n in (1, 7, 1_000, 50_000):
        hashes = rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)
        hashes[: n // 10] = hashes[n // 10 : 2 * (n // 10)]
        addresses = [f"data/{i}" for i in range(n)]
        held = _Held(None, {})  # type: ignore[arg-type]  # nothing to load: its arrays set below
        keys = _unsigned(hashes)
        held.order = np.argsort(keys, kind="stable")
        held.keys, held.addresses = keys[held.order], pa.array(addresses)
        held.shift, held.starts = _index(held.keys)
        asked = [(addresses[i], int(hashes[i])) for i in rng.integers(0, n, 2_000)]
        asked += [(f"data/x{i}", int(h)) for i, h in enumerate(rng.choice(hashes, 500))]  # a held hash
        asked += [(f"data/y{i}", int(rng.integers(-(2**62), 2**62))) for i in range(500)]
        found = held.find(pa.array([a for a, _ in asked]), np.array([h for _, h in asked], dtype=np.int64))
        pairs = set(zip(addresses, hashes.tolist(), strict=True))
        assert found.tolist() == [pair in pairs for pair in asked], n


def test_an_address_without_its_hash_fails_the_lookup(tmp_path: Path) -> None:
    """A level part holding an address without its hash (damaged, or written by a bug) would hide
    that address from the lookup, and its object could be marked: the lookup raises, naming it."""
    from lakefs_gc.spark.mark.range_cache.committed_lookup import _Flag

    cache = RangeCache(tmp_path / "cache")
    cache.open(REPO, "local://unified")
    part = Part("committed/part-00000001-b00000-x.parquet", 2)
    rows = {"address": ["data/a", "data/b"], "count": [1, 1], "hash": [7, None]}
    pq.write_table(pa.table(rows, schema=COUNT_SCHEMA), cache.root / part.file)
    batch = (pa.array(["data/a"]), pa.array([0], pa.int32()), pa.array([7], pa.int64()))
    with pytest.raises(
        RangeCacheError, match=r"part-00000001-b00000-x.parquet holds an address without its hash"
    ):
        list(_Flag(cache.store(), {0: part})(iter([batch])))
