"""The identity-twin guard's content evidence, in Spark, agrees with the rule and with lakeFS.

The guard's Spark plan (:mod:`lakefs_gc.spark.mark.twin_evidence`, then ``plan_sizes`` and
``twin_pairs``) must build exactly the twin pairs of the in-memory rule
(:func:`lakefs_gc.gc.twins.find_twins` in ``content`` mode) on random worlds of HEAD trees, proven
and unproven entries and marked objects with and without a proven MD5. Then, end to end through the
test server and ``mark --inventory``: an S3 inventory that carries ETags and EncryptionStatus rules
out a same-size garbage object of other bytes without a stat, still keeps an identical re-upload
(a live twin), and proves nothing when the objects are KMS-encrypted.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import DataFrame, SparkSession

from lakefs_gc.events.model import EVENT_DDL
from lakefs_gc.gc import twins as rule
from lakefs_gc.gc.twin_plan import TwinPlan, plan_keys, plan_twins
from lakefs_gc.inventory.generate import list_namespace, write_inventory
from lakefs_gc.inventory.mapping import NamespaceRoute, route_rows
from lakefs_gc.settings import GcSettings
from lakefs_gc.spark.ingest.inventory.table import CANDIDATE_DDL
from lakefs_gc.spark.mark import head_contents, twin_evidence, twins, twins_driver
from lakefs_gc.spark.mark.range_cache import RangeCache
from lakefs_gc.spark.mark.sources.candidate_set import CandidateSetSource, Snapshot, with_content_md5
from lakefs_gc.spark.mark.sources.listing import ListingSource
from lakefs_gc.spark.runtime.frames import local_frame
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import StorageLocation, parse_location, parse_storage_namespace
from tests.support.gc_env import GcEnv, gc_env, run_cli
from tests.support.jobs import mark as jobs_mark

#: a few minutes of Spark plans over the six worlds and marks end to end (``-m 'not slow'`` leaves
#: it out of a quick run)
pytestmark = pytest.mark.slow

CONTENTS = [b"x" * 10, b"y" * 10, b"z" * 10]
ENTRIES = "id string, path string, size long, address string, checksum string"
MD5S = [hashlib.md5(c).hexdigest() for c in CONTENTS]


def world(seed: int) -> tuple[dict[str, list[str]], list[tuple[str, str]], list[Any], list[Any], list[Any]]:
    """HEAD metaranges → branches, the tree, entries (id, path, size, address, checksum), the
    namespace's objects (address, md5) and the marked objects (address, size, md5)."""
    rnd = random.Random(seed)
    heads = {"m1": ["main", "dev"], "m2": ["h-hidden"]}
    tree = [("m1", "r1"), ("m2", "r1"), ("m2", "r2")]
    entries, objects = [], []
    for n in range(rnd.randint(2, 8)):
        size = rnd.choice([10, 10, 11])
        content = rnd.randrange(3)
        address = f"data/committed-{n}"
        proven = rnd.random() < 0.6
        checksum = rnd.choice([MD5S[content], MD5S[content].upper(), "client-chosen"])
        entries.append((rnd.choice(["r1", "r2"]), f"p{n}", size, address, checksum))
        objects.append((address, MD5S[content] if proven else None))
    marked = []
    for k in range(rnd.randint(1, 8)):
        md5 = rnd.choice([*MD5S, None])
        marked.append((f"data/marked-{k}", rnd.choice([10, 11, 12]), md5))
        objects.append((f"data/marked-{k}", md5))
    return heads, tree, entries, objects, marked


@dataclass(frozen=True)
class TreeSide:
    """A world's frames as the guard reads them from the HEAD trees: the marked objects, the tree
    (metarange, range id) and the needed HEAD entries (checkpointed, as the guard does)."""

    heads: dict[str, list[str]]
    marked: DataFrame
    tree: DataFrame
    needed: DataFrame

    def plan(self, spark: SparkSession) -> twins.SizePlan:
        return twins.plan_sizes(spark, self.marked, self.needed, self.tree, self.heads)

    def exposed(self) -> set[str]:
        return {r["address"] for r in twin_evidence.exposed(self.marked, self.needed).collect()}


def tree_side(spark: SparkSession, seed: int, *, evidence: bool = True) -> TreeSide:
    heads, tree, entries, objects, marked = world(seed)
    marked_df = local_frame(spark, marked, "address string, size long, md5 string")
    tree_df = local_frame(spark, tree, "metarange string, id string")
    entries_df = local_frame(spark, entries, ENTRIES)
    objects_df = local_frame(spark, objects, "address string, md5 string") if evidence else None
    sized = entries_df.join(marked_df.select("size").distinct(), "size", "left_semi")
    needed = twin_evidence.needed_entries(marked_df, twin_evidence.entry_keys(sized, objects_df))
    return TreeSide(heads, marked_df, tree_df, needed.localCheckpoint())


def spark_pairs(
    spark: SparkSession, seed: int, *, evidence: bool = True
) -> tuple[set[tuple[str, str, str]], set[str], twins.SizePlan]:
    """The guard's twin pairs, exposed objects and size plan, from the HEAD trees."""
    side = tree_side(spark, seed, evidence=evidence)
    plan = side.plan(spark)
    rows = twins.twin_pairs(side.marked, side.needed, side.tree, plan.checked).collect()
    pairs = {(r["address"], b, r["path"]) for r in rows for b in side.heads[r["metarange"]]}
    return pairs, side.exposed(), plan


def rule_inputs(seed: int, *, evidence: bool = True) -> tuple[list[rule.MarkedObject], list[rule.HeadEntry]]:
    """The world's marked objects and HEAD entries (one per branch and path) as the rule takes them."""
    heads, tree, entries, objects, marked = world(seed)
    md5_of = dict(objects) if evidence else {}
    ranges: dict[str, list[str]] = {}
    for metarange, range_id in tree:
        ranges.setdefault(range_id, []).extend(heads[metarange])
    head_entries = [
        rule.HeadEntry(branch, path, size, checksum, object_md5=md5_of.get(address))
        for range_id, path, size, address, checksum in entries
        for branch in ranges[range_id]
    ]
    return [rule.MarkedObject(a, s, md5=m if evidence else None) for a, s, m in marked], head_entries


def rule_pairs(seed: int, *, evidence: bool = True) -> set[tuple[str, str, str]]:
    objs, head_entries = rule_inputs(seed, evidence=evidence)
    return {(p.address, p.branch, p.path) for p in rule.find_twins(objs, head_entries, "content")}


def driver_plan(seed: int, *, evidence: bool, stats: int, pairs: int = 10**6) -> TwinPlan:
    """The plan a small mark makes on the driver (:mod:`lakefs_gc.gc.twin_plan`) for the world: its
    marked objects keep their MD5s, as in the Spark plan's frames; ``evidence`` proves the entries."""
    objs, head_entries = rule_inputs(seed, evidence=evidence)
    md5s = {a: m for a, _, m in world(seed)[4]}
    objs = [rule.MarkedObject(o.address, o.size, md5=md5s[o.address]) for o in objs]
    return plan_twins(objs, head_entries, stat_budget=stats, pair_budget=pairs)


def driver_keys_plan(seed: int, *, evidence: bool, stats: int) -> TwinPlan:
    """The plan a small mark makes on the driver from the HEAD entries' contents (no paths): each
    entry's content key weighted by the branch HEADs holding its range (:func:`contents_of`)."""
    objs, _ = rule_inputs(seed, evidence=evidence)
    md5s = {a: m for a, _, m in world(seed)[4]}
    objs = [rule.MarkedObject(o.address, o.size, md5=md5s[o.address]) for o in objs]
    md5_of = dict(world(seed)[3]) if evidence else {}
    weights: dict[int, dict[str | None, int]] = {}
    for address, size, checksum, heads in contents_of(seed):
        by_key = weights.setdefault(size, {})
        key = rule.entry_key(checksum, md5_of.get(address))
        by_key[key] = by_key.get(key, 0) + heads
    return plan_keys(objs, weights, stat_budget=stats, pair_budget=10**6)


def driver_planned(plan: TwinPlan) -> tuple[set[int], set[str]]:
    return set(plan.checked), {m.address for m in plan.unresolved}


@pytest.mark.parametrize("seed", range(6))
def test_spark_pairs_are_the_rules(spark: SparkSession, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    monkeypatch.setattr(twins, "STAT_BUDGET", 10**6)
    monkeypatch.setattr(twins, "PAIR_BUDGET", 10**6)
    pairs, exposed, plan = spark_pairs(spark, seed)
    assert pairs == rule_pairs(seed)
    assert exposed == {a for a, _, _ in pairs}, "an object with a pair is exposed, one without is not"
    assert plan.unresolved is None
    without, _, _ = spark_pairs(spark, seed, evidence=False)
    assert without == rule_pairs(seed, evidence=False) >= pairs  # evidence only ever removes pairs
    for evidence, expected in ((True, pairs), (False, without)):  # the plan made on the driver
        on_driver = driver_plan(seed, evidence=evidence, stats=10**6)
        assert {(p.address, p.branch, p.path) for p in on_driver.pairs} == expected, evidence
        assert not on_driver.unresolved, evidence
    objs, head_entries = rule_inputs(seed)
    head_sized = {m.address for m in objs if m.size in {e.size for e in head_entries}}
    ruled_out = driver_plan(seed, evidence=True, stats=10**6).ruled_out
    assert {m.address for m in ruled_out} == head_sized - exposed, "of a HEAD entry's size, without a pair"
    # the guard's one pass over the marked objects counts the same (twins.py: pair_counts)
    side = tree_side(spark, seed)
    head_sizes = local_frame(spark, [(e.size,) for e in head_entries], "size long").distinct()
    counted = twin_evidence.pair_counts(twin_evidence.pairing(side.marked, side.needed, head_sizes))
    sizes = {a: s for a, s, _ in world(seed)[4]}
    assert counted == (len(exposed), (len(ruled_out), sum(sizes[m.address] for m in ruled_out)))


def contents_of(seed: int) -> list[tuple[str, int, str, int]]:
    """The world's HEAD entries as the classification reads them: ``(address, size, checksum,
    heads)``, no path or range, each entry's range weighted by the branch HEADs holding it, and
    each content given twice, split as a task's window gives what it gathered."""
    heads, tree, entries, _, _ = world(seed)
    weight: dict[str, int] = {}
    for metarange, range_id in tree:
        weight[range_id] = weight.get(range_id, 0) + len(heads[metarange])
    rows = []
    for range_id, _, size, address, checksum in entries:
        w = weight[range_id]
        rows += [(address, size, checksum, w // 2), (address, size, checksum, w - w // 2)]
    return rows


def planned(plan: twins.SizePlan) -> tuple[set[int], set[str]]:
    unresolved = set() if plan.unresolved is None else {r["address"] for r in plan.unresolved.collect()}
    return {r["size"] for r in plan.checked.collect()}, unresolved


@pytest.mark.parametrize("seed", range(6))
def test_the_classifications_reading_plans_what_the_trees_do(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """The guard's first questions (which marked objects may have a twin at all; which sizes to
    resolve by stats within the budgets, and which to keep), answered from the HEAD entries'
    contents as the classification reads them, are the ones the trees answer. Each world is
    planned with the objects' MD5s (even seeds) or without them (odd seeds): half the Spark jobs
    of planning every world both ways, and each way still meets three worlds. With no stat to
    spend, every exposed object stays unresolved."""
    _, _, _, objects, marked = world(seed)
    marked_df = local_frame(spark, marked, "address string, size long, md5 string")
    contents_df = local_frame(
        spark, contents_of(seed), "address string, size long, checksum string, heads long"
    )
    ways = [(True, (10**6, 0, 3)), (False, (10**6, 0, 2))]
    evidence, budgets = ways[seed % 2]
    objects_df = local_frame(spark, objects, "address string, md5 string") if evidence else None
    keys = head_contents.head_keys(twin_evidence.marked_sizes(marked_df), contents_df, objects_df)
    keys = keys.localCheckpoint()  # as the guard keeps them (and its paired objects)
    paired = twin_evidence.exposed(marked_df, keys).localCheckpoint()
    side = tree_side(spark, seed, evidence=evidence)
    exposed = side.exposed()
    assert {r["address"] for r in paired.collect()} == exposed, evidence
    needed = twin_evidence.needed_entries(marked_df, keys)
    for budget in budgets:
        monkeypatch.setattr(twins, "STAT_BUDGET", budget)
        from_contents = twins.plan_weighted(marked_df, needed, paired)
        tree_plan = side.plan(spark)
        from_trees = planned(tree_plan)
        assert planned(from_contents) == from_trees, (evidence, budget)
        on_driver = driver_plan(seed, evidence=evidence, stats=budget)
        assert driver_planned(on_driver) == from_trees, (evidence, budget)
        from_keys = driver_keys_plan(seed, evidence=evidence, stats=budget)
        assert driver_planned(from_keys) == from_trees, (evidence, budget)
        if budget == 0:  # no size is checked, and exactly the exposed objects stay unresolved
            assert from_trees == (set(), exposed), evidence
            assert tree_plan.unresolved_objects == len(exposed)


# ---- end to end: mark --inventory on the test server --------------------------------------------

REPO = "evidence"
Capsys = pytest.CaptureFixture[str]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[GcEnv]:
    yield from gc_env(tmp_path, StorageOptions(), ("local",), [])


def build(env: GcEnv) -> tuple[str, str, str]:
    """``main`` commits ``a`` (10 bytes), then stages the same bytes again over it (a live twin) and
    an upload of other 10 bytes it resets (garbage). Returns (committed, twin, garbage) addresses."""
    env.lakefs.create_repo(REPO, f"local://{REPO}")
    lakefs = env.lakefs
    lakefs.set_rules(REPO, 7)
    committed = lakefs.upload(REPO, "main", "a", CONTENTS[0]).physical_address
    lakefs.commit(REPO, "main", "a")
    lakefs.branch(REPO, "dev", "main")
    garbage = lakefs.upload(REPO, "dev", "b", CONTENTS[1]).physical_address
    lakefs.reset(REPO, "dev")
    twin = lakefs.upload(REPO, "main", "a", CONTENTS[0]).physical_address
    return tuple(a[a.index("/data/") + 1 :] for a in (committed, twin, garbage))  # type: ignore[return-value]


def build_without_twin(env: GcEnv) -> str:
    """:func:`build` without the twin: ``main`` commits ``a``, ``dev`` resets an upload of other
    bytes of the same size. Returns the garbage's physical address."""
    env.lakefs.create_repo(REPO, f"local://{REPO}")
    env.lakefs.set_rules(REPO, 7)
    env.lakefs.upload(REPO, "main", "a", CONTENTS[0])
    env.lakefs.commit(REPO, "main", "a")
    env.lakefs.branch(REPO, "dev", "main")
    garbage = env.lakefs.upload(REPO, "dev", "b", CONTENTS[1]).physical_address
    env.lakefs.reset(REPO, "dev")
    return garbage


def inventory_rows(env: GcEnv, encryption: str | None) -> pa.Table:
    """S3 inventory rows of the namespace with each object's MD5 as its ETag, as S3 lists a
    single-part object, and ``encryption`` as every row's EncryptionStatus (None: the field not
    configured)."""
    rows = list_namespace(namespace_of(env), env.options)
    prefix = (
        len(namespace_of(env).key.strip("/")) + 1
    )  # inventory keys are the namespace's key, then the address
    root = env.storage_root / REPO
    keys = rows.column("key").to_pylist()
    etags = [hashlib.md5((root / k[prefix:]).read_bytes()).hexdigest() for k in keys]
    rows = rows.set_column(rows.schema.get_field_index("etag"), "etag", pa.array(etags, pa.string()))
    statuses = pa.array([encryption] * rows.num_rows, pa.string())
    rows = rows.set_column(rows.schema.get_field_index("encryption"), "encryption", statuses)
    assert pc.all(pc.is_valid(rows.column("etag"))).as_py()
    return rows


def namespace_of(env: GcEnv) -> StorageLocation:
    return parse_storage_namespace(f"local://{REPO}", local_root=str(env.storage_root))


def deliver(env: GcEnv, destination: Path, encryption: str | None) -> None:
    """An S3 inventory delivery of :func:`inventory_rows`."""
    write_inventory(
        inventory_rows(env, encryption), namespace_of(env), env.options, parse_location(str(destination)),
        flavour="s3", format="csv",
        snapshot_time=datetime.now(timezone.utc) - timedelta(minutes=1), rows_per_file=100,
    )  # fmt: skip


def mark(env: GcEnv, capsys: Capsys, destination: Path, *extra: str) -> dict[str, Any]:
    argv = ["mark", "--repo", REPO, "--unsafe-min-age", "0s", "--output", "json", *extra]
    code, lines, err = run_cli(capsys, *argv, "--inventory", str(destination), *env.args())
    assert code == 0, err
    return lines[0]


@pytest.mark.parametrize(
    ("encryption", "trusted", "ruled_out", "over"),
    [
        ("SSE-S3", True, 1, None), ("NOT-SSE", True, 1, None), ("SSE-KMS", True, 0, None),
        (None, True, 0, None), ("SSE-S3", False, 0, None),
        ("SSE-S3", False, 0, "DRIVER_MARKED"), ("SSE-S3", False, 0, "DRIVER_ENTRIES"),
        ("SSE-S3", True, 1, "DRIVER_MARKED"),
    ],
)  # fmt: skip
def test_an_inventory_with_etags_and_encryption_rules_garbage_out_and_keeps_the_twin(
    env: GcEnv, capsys: Capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    encryption: str | None, trusted: bool, ruled_out: int, over: str | None,
) -> None:  # fmt: skip
    """With ``--trust-checksums`` only: the guard is opt-in (a client could link bytes under the MD5
    of other bytes), and without proofs (KMS, no EncryptionStatus) it pairs on size as before.
    This small mark is planned on the driver, from the HEAD trees or, with proofs, from the HEAD
    entries' contents; ``over``: a bound of that path set below this mark's marked objects or
    HEAD entries, so that the Spark plan makes it."""
    if over is not None:
        monkeypatch.setattr(twins_driver, over, 1)
    committed, twin, garbage = build(env)
    destination = tmp_path / "inventory"
    deliver(env, destination, encryption)
    summary = mark(env, capsys, destination, *(["--trust-checksums"] if trusted else []))["summary"]
    found = summary["identity_twins"]
    assert summary["num_deleted_objects"] == 1  # the reset upload, and only it
    assert summary["kept"]["identity_twin"]["objects"] == 1  # the twin main serves
    assert (found["live"], found["kept"], found["ruled_out"]) == (1, 0, ruled_out), found
    assert found["stats"] == 2  # (main, a) and (dev, a), for the twin: dev branched from the commit
    assert found["released"] == 1 - ruled_out  # without evidence the reset upload is released by a stat
    assert (found["pairs"], found["ruled_out_bytes"]) == (4 - 2 * ruled_out, 10 * ruled_out)
    assert found["head_trees_read"], "the twin may be one: its HEAD entries are read for their paths"
    assert all((env.storage_root / REPO / a).exists() for a in (committed, twin, garbage)), (
        "marks delete nothing"
    )


@pytest.mark.parametrize(("encryption", "trusted"), [("SSE-S3", True), ("SSE-KMS", True), ("SSE-S3", False)])
def test_garbage_content_evidence_rules_out_needs_no_second_reading(
    env: GcEnv, capsys: Capsys, tmp_path: Path, encryption: str, trusted: bool
) -> None:
    """Without a twin, the proofs release the reset upload from what the classification read of the
    HEAD ranges: no HEAD tree is read again, no stat is made. Without proofs the trees are read and
    the stats release it."""
    garbage = build_without_twin(env)
    destination = tmp_path / "inventory"
    deliver(env, destination, encryption)
    summary = mark(env, capsys, destination, *(["--trust-checksums"] if trusted else []))["summary"]
    found = summary["identity_twins"]
    proven = trusted and encryption == "SSE-S3"
    assert summary["num_deleted_objects"] == 1 and summary["kept"]["identity_twin"]["objects"] == 0
    assert (found["ruled_out"], found["head_trees_read"], found["stats"]) == (
        (1, False, 0) if proven else (0, True, 2)
    ), found
    assert (env.storage_root / REPO / garbage[garbage.index("/data/") + 1 :]).exists(), "marks delete nothing"


@pytest.mark.parametrize("twin", [True, False])
def test_the_service_cycle_carries_the_evidence(
    spark: SparkSession, env: GcEnv, tmp_path: Path, twin: bool
) -> None:
    """The service's path: candidates from an ingested snapshot's rows (the candidate table's, with
    each row's ETag and EncryptionStatus) plus events, HEAD entries through the range cache. Both
    cycles rule the reset upload out by content; the second reads the HEAD entries from the cache.
    The guard plans from the cached entries' contents, as the batch mark from its reading: without
    a twin it reads no HEAD tree's paths and makes no stat."""
    build(env) if twin else build_without_twin(env)
    taken = datetime.now(timezone.utc) - timedelta(minutes=1)
    routes = [NamespaceRoute.of(REPO, namespace_of(env))]
    rows = route_rows(inventory_rows(env, "SSE-S3"), routes, delivery_id="d-1", snapshot_time=taken)

    def objects(spark: SparkSession, _parallelism: int) -> DataFrame:
        return with_content_md5(spark.createDataFrame(rows.to_pylist(), CANDIDATE_DDL))

    def source() -> CandidateSetSource:
        return CandidateSetSource(
            REPO, Snapshot("d-1", taken, objects), ListingSource(namespace_of(env), env.options),
            events=lambda spark, _p: local_frame(spark, [], EVENT_DDL), swept=lambda _s, _p: None,
        )  # fmt: skip

    info = env.server.connection_info()
    settings = GcSettings.model_validate({
        "lakefs": {k: info[k] for k in ("endpoint", "access_key_id", "secret_access_key")},
        "storage": {"local_root": str(env.storage_root)},
        "gc": {"unsafe_min_age": "0s", "trust_checksums": True},
        "spark": {"parallelism": 2},
    })  # fmt: skip
    cache = RangeCache.for_repository(tmp_path / "state", REPO, buckets=2)
    for cycle in (1, 2):
        summary = jobs_mark(spark, settings, REPO, range_cache=cache, source=source()).summary
        found = summary["identity_twins"]
        assert summary["num_deleted_objects"] == 1, cycle  # the reset upload, and only it
        expected = (1, 1, 2, 0, True) if twin else (0, 1, 0, 0, False)
        got = tuple(found[k] for k in ("live", "ruled_out", "stats", "released", "head_trees_read"))
        assert got == expected, found
        assert summary["range_cache"]["head_ranges_read"] == (cycle == 1), summary["range_cache"]
        # the contents' lookup filtered the HEAD entries to the marked sizes as it read them
        assert summary["range_cache"]["head_sizes_pushed"] >= 1, summary["range_cache"]
