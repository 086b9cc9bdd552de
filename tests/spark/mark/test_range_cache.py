"""The range cache: a cached mark marks exactly what an uncached one marks, reads from lakeFS only
the metaranges and ranges it has not seen, and fails closed when the cache is damaged."""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from lakefs_gc import jobs
from lakefs_gc.settings import GcSettings
from lakefs_gc.spark.mark.range_cache import Generation, Part, RangeCache, RangeCacheError, plan_metaranges
from lakefs_gc.spark.mark.range_cache.retention import needed_bytes, plan_retention, trim_range_cache
from lakefs_gc.spark.mark.result import MarkResult
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.testing.context import ServerSettings
from lakefs_gc.testing.faults import Fault
from lakefs_gc.testing.trees import RangeSplit
from tests.support.gc_env import GcEnv, gc_env
from tests.support.jobs import mark as jobs_mark
from tests.testing.unified_gc import DAY, build_unified_gc

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("spark")]

REPO = "unified"
RANGE = r"/metadata/range/[^/]+$"
META_RANGE = r"/metadata/meta_range/[^/]+$"


@pytest.fixture
def env(tmp_path: Path) -> Iterator[GcEnv]:
    """lakeFS's TestUnifiedGC history plus a few commits, in ranges of two entries (many ranges)."""
    small_ranges = ServerSettings(range_split=RangeSplit(min_entries=2, max_entries=2))
    for env in gc_env(tmp_path, StorageOptions(), ("local",), [], small_ranges):
        build_unified_gc(env.lakefs, REPO, f"local://{REPO}")
        env.lakefs.branch(REPO, "wide", "main")
        grow(env, "wide", "w1", 7)
        grow(env, "wide", "w2", 5)
        yield env


def grow(env: GcEnv, branch: str, tag: str, files: int) -> None:
    for i in range(files):
        env.lakefs.upload(REPO, branch, f"{tag}/f{i}", f"{tag}-{i}".encode())
    env.lakefs.commit(REPO, branch, f"add {tag}")


def settings(env: GcEnv, *, trust: bool = False) -> GcSettings:
    info = env.server.connection_info()
    return GcSettings.model_validate(
        {
            "lakefs": {k: info[k] for k in ("endpoint", "access_key_id", "secret_access_key")},
            "storage": {"local_root": str(env.storage_root)},
            "gc": {"unsafe_min_age": "0s", "trust_checksums": trust},
            "spark": {"parallelism": 2},
        }
    )


def mark(
    spark: SparkSession, env: GcEnv, cache: RangeCache | None, *, trust: bool = False
) -> tuple[MarkResult, set[str]]:
    s = settings(env, trust=trust)
    result = jobs_mark(spark, s, REPO, range_cache=cache)
    assert result.success
    marked = jobs.report_table(s, result.storage_namespace, result.mark_id, "deleted")
    return result, set(marked.column("address").to_pylist())


def reports(env: GcEnv) -> Path:
    return env.storage_root / REPO / "_lakefs/retention/gc" / REPO


def recorded(env: GcEnv, result: MarkResult, name: str, column: str) -> set[str]:
    """The ids a mark recorded in its report's ``ranges/`` or ``metaranges/``."""
    files = (reports(env) / result.mark_id / name).glob("*.parquet")
    return {i for f in files for i in pq.read_table(f, columns=[column]).column(0).to_pylist()}


def record_path(cache: RangeCache, result: MarkResult) -> Path:
    """The generation record a mark wrote (its read-ahead's, if any, is the one before)."""
    return cache.root / f"_gen/{result.summary['range_cache']['generation']:08d}.json"


def counting(env: GcEnv) -> tuple[Fault, Fault]:
    """Faults that only count getMetaRange and getRange calls (a zero delay)."""
    faults = env.server.faults
    return faults.inject(Fault(path=META_RANGE, delay=0.0)), faults.inject(Fault(path=RANGE, delay=0.0))


def head_ranges(env: GcEnv, cache: RangeCache) -> set[str]:
    """The ranges of the branch HEADs' trees (from the cache's metarange level, which the mark
    writes): the identity-twin guard reads each into the cache's entries level once."""
    branches = env.lakefs.branches.list_branches(REPO, show_hidden=True).results
    heads = {env.lakefs.commits.get_commit(REPO, b.commit_id).meta_range_id for b in branches} - {""}
    rows = [r for f in (cache.root / "metaranges").glob("*.parquet") for r in pq.read_table(f).to_pylist()]
    assert heads <= {r["metarange_id"] for r in rows}  # the guard finds every HEAD tree in the cache
    return {r["range_id"] for r in rows if r["metarange_id"] in heads and r["range_id"]}


def cache_files(cache: RangeCache) -> set[str]:
    return {p.relative_to(cache.root).as_posix() for p in cache.root.rglob("*") if p.is_file()}


def test_cached_mark_marks_what_an_uncached_one_marks(
    spark: SparkSession, env: GcEnv, tmp_path: Path
) -> None:
    _, uncached = mark(spark, env, None)
    cache = RangeCache.for_repository(tmp_path / "state", REPO, buckets=4)
    meta_calls, range_calls = counting(env)
    result, cached = mark(spark, env, cache)
    assert cached == uncached and uncached  # the scenario has garbage
    metaranges = recorded(env, result, "metaranges", "metarange_id")
    ranges = recorded(env, result, "ranges", "range_id")
    assert len(ranges) == result.summary["num_ranges"] > len(metaranges) > 1
    stats = result.summary["range_cache"]
    assert stats["metaranges_read"] == len(metaranges) and stats["metaranges_cached"] == 0
    assert stats["ranges_read"] == len(ranges) and stats["ranges_cached"] == 0
    assert env.server.faults.hits(meta_calls) == len(metaranges)  # the guard's HEAD trees from the cache
    heads = head_ranges(env, cache)
    assert stats["head_metaranges_cached"] > 0 and stats["head_ranges_read"] == len(heads) > 0
    assert env.server.faults.hits(range_calls) == len(ranges) + len(heads)  # addresses, then HEAD entries
    # read while lakeFS prepared the dump, into a generation of its own: those of the commits the
    # documented rule keeps (the mark reads those only lakeFS's export lists)
    ahead = stats["read_ahead"]
    assert 0 < ahead["metaranges_read"] <= len(metaranges) and 0 < ahead["ranges_read"] <= len(ranges)
    assert ahead["tasks"] > 1  # an empty cache: the whole history, on every task
    assert stats["generation"] == 2 and record_path(cache, result).is_file()


def test_second_mark_reads_only_what_is_new(spark: SparkSession, env: GcEnv, tmp_path: Path) -> None:
    cache = RangeCache.for_repository(tmp_path / "state", REPO, buckets=4)
    first, _ = mark(spark, env, cache)
    first_heads = head_ranges(env, cache)
    grow(env, "wide", "w3", 2)
    grow(env, "main", "m1", 3)
    env.lakefs.delete(REPO, "wide", "w1/f0")
    env.lakefs.commit(REPO, "wide", "drop w1/f0")

    meta_calls, range_calls = counting(env)
    second, cached = mark(spark, env, cache)
    env.server.faults.clear()
    new_metaranges = recorded(env, second, "metaranges", "metarange_id") - recorded(
        env, first, "metaranges", "metarange_id"
    )
    new_ranges = recorded(env, second, "ranges", "range_id") - recorded(env, first, "ranges", "range_id")
    stats = second.summary["range_cache"]
    assert 0 < stats["metaranges_read"] == len(new_metaranges) < second.summary["num_metaranges"]
    assert 0 < stats["ranges_read"] == len(new_ranges) < second.summary["num_ranges"]
    assert stats["ranges_cached"] == second.summary["num_ranges"] - len(new_ranges)
    new_heads = head_ranges(env, cache) - first_heads
    assert env.server.faults.hits(meta_calls) == len(new_metaranges)
    assert 0 < stats["head_ranges_read"] == len(new_heads) < stats["head_ranges_cached"] + len(new_heads)
    assert env.server.faults.hits(range_calls) == len(new_ranges) + len(new_heads)
    assert stats["generation"] == 4  # 3: its read-ahead's
    assert stats["read_ahead"]["metaranges_read"] == stats["metaranges_read"]  # all read ahead

    _, uncached = mark(spark, env, None)
    assert cached == uncached


def test_trusting_checksums_each_new_head_range_is_read_once(
    spark: SparkSession, env: GcEnv, tmp_path: Path
) -> None:
    """A mark that trusts checksums reads a new range of a HEAD tree once, with its entries, and
    writes both levels from that reading: the guard then finds every HEAD range in the entries
    level. The marked sets are still an uncached mark's."""
    cache = RangeCache.for_repository(tmp_path / "state", REPO, buckets=4)
    _, range_calls = counting(env)
    first, cached = mark(spark, env, cache, trust=True)
    ranges = recorded(env, first, "ranges", "range_id")
    heads = head_ranges(env, cache)
    stats = first.summary["range_cache"]
    assert stats["ranges_read"] == len(ranges) and stats["head_ranges_read"] == len(heads) > 0
    assert env.server.faults.hits(range_calls) == len(ranges)  # not len(ranges) + len(heads)
    record = json.loads(record_path(cache, first).read_text())
    assert sum(p["ranges"] for ps in record["head_entries"].values() for p in ps) == len(heads)
    assert cached == mark(spark, env, None, trust=True)[1] and cached

    grow(env, "wide", "w3", 2)
    env.server.faults.clear()
    _, range_calls = counting(env)
    second, cached = mark(spark, env, cache, trust=True)
    new_ranges = recorded(env, second, "ranges", "range_id") - ranges
    stats = second.summary["range_cache"]
    assert 0 < stats["head_ranges_read"] == len(head_ranges(env, cache) - heads) <= len(new_ranges)
    assert env.server.faults.hits(range_calls) == stats["ranges_read"] == len(new_ranges)
    env.server.faults.clear()
    assert cached == mark(spark, env, None, trust=True)[1]


def test_ranges_no_longer_needed_are_evicted(spark: SparkSession, env: GcEnv, tmp_path: Path) -> None:
    env.lakefs.branch(REPO, "old", "main")
    for i in range(30):
        env.lakefs.upload(REPO, "old", f"old/f{i}", b"old")
    env.lakefs.commit(REPO, "old", "add old", date=int(time.time()) - 20 * DAY)
    cache = RangeCache.for_repository(tmp_path / "state", REPO, buckets=1)
    first, _ = mark(spark, env, cache)
    env.lakefs.branches.delete_branch(REPO, "old")  # its commit is past retention: no longer active

    second, cached = mark(spark, env, cache)
    stats = second.summary["range_cache"]
    assert (stats["metaranges_read"], stats["ranges_read"]) == (0, 0)
    assert stats["ranges_evicted"] == first.summary["num_ranges"] - second.summary["num_ranges"] > 0
    _, uncached = mark(spark, env, None)
    assert cached == uncached
    assert stats["read_ahead"]["metaranges_read"] == 0  # none was new: nothing read ahead, or recorded
    assert stats["generation"] == first.summary["range_cache"]["generation"] + 1
    record = json.loads(record_path(cache, second).read_text())
    held = sum(p["ranges"] for parts in record["ranges"].values() for p in parts)
    assert held == second.summary["num_ranges"]
    listed = {p["file"] for p in record["metaranges"]}
    levels = (*record["ranges"].values(), *record["head_entries"].values())
    listed |= {p["file"] for parts in levels for p in parts}
    committed = record["committed_addresses"]
    listed |= {committed["ranges"]["file"], *(p["file"] for p in committed["buckets"].values())}
    cache.open(REPO, second.storage_namespace)  # the next cycle deletes what the rewrite replaced
    assert cache_files(cache) == listed | {str(record_path(cache, second).relative_to(cache.root))}


def test_entries_level_holds_the_content_evidence_and_replaces_an_older_one(
    spark: SparkSession, env: GcEnv, tmp_path: Path
) -> None:
    """The HEAD entries level holds each entry's address and checksum (the guard's content
    evidence). A record of the level before them (``entries``: paths and sizes only) is not read:
    the next mark deletes its parts and reads those HEAD ranges from lakeFS once more."""
    cache = RangeCache.for_repository(tmp_path / "state", REPO, buckets=4)
    first, expected = mark(spark, env, cache)
    path = record_path(cache, first)
    record = json.loads(path.read_text())
    parts = [cache.root / p["file"] for ps in record["head_entries"].values() for p in ps]
    rows = [r for f in parts for r in pq.read_table(f).to_pylist()]
    assert rows and set(rows[0]) == {"range_id", "path", "size", "address", "checksum"}
    uploads = {r["address"]: r["checksum"] for r in rows if r["path"] and r["path"].startswith("w1/")}
    assert len(uploads) == 7 and all(a and c for a, c in uploads.items())  # namespace-relative, recorded
    for f in parts:  # as the older level wrote them
        pq.write_table(pq.read_table(f, columns=["range_id", "path", "size"]), f)
    record["entries"] = record.pop("head_entries")
    path.write_text(json.dumps(record))

    range_calls = env.server.faults.inject(Fault(path=RANGE, delay=0.0))
    second, marked = mark(spark, env, cache)
    stats = second.summary["range_cache"]
    assert marked == expected
    assert stats["ranges_read"] == 0 and stats["head_ranges_read"] == len(head_ranges(env, cache)) > 0
    assert env.server.faults.hits(range_calls) == stats["head_ranges_read"]
    assert not any(f.exists() for f in parts)  # the older level's parts are gone
    newest = json.loads((cache.root / f"_gen/{stats['generation']:08d}.json").read_text())
    assert "entries" not in newest and newest["head_entries"]


def _corrupt(path: Path) -> None:
    path.write_bytes(b"not a parquet file at all")


def _truncate(path: Path) -> None:
    table = pq.read_table(path)
    pq.write_table(table.slice(0, table.num_rows - 1), path)  # valid parquet, one row short


DAMAGES = {"range part corrupt": ("ranges", _corrupt), "range part one row short": ("ranges", _truncate),
           "metarange part missing": ("metaranges", Path.unlink)}  # fmt: skip


def test_damaged_cache_fails_the_mark(spark: SparkSession, env: GcEnv, tmp_path: Path) -> None:
    cache = RangeCache.for_repository(tmp_path / "state", REPO, buckets=4)
    first, expected = mark(spark, env, cache)
    record = json.loads(record_path(cache, first).read_text())
    listed = {
        "metaranges": sorted(p["file"] for p in record["metaranges"]),
        "ranges": sorted(p["file"] for parts in record["ranges"].values() for p in parts),
    }
    for what, (level, damage) in DAMAGES.items():
        victim = cache.root / listed[level][0]
        intact = victim.read_bytes()
        damage(victim)
        before = set(reports(env).iterdir())
        with pytest.raises(RangeCacheError, match=re.escape(victim.name)) as raised:
            jobs_mark(spark, settings(env), REPO, range_cache=cache)
        assert "delete the range cache directory" in str(raised.value), what
        (failed,) = set(reports(env).iterdir()) - before
        summary = json.loads((failed / "summary.json").read_text())
        assert summary["success"] is False and summary["num_deleted_objects"] == 0, what
        assert victim.name in summary["error"], what
        assert not (failed / "deleted").exists(), what
        victim.write_bytes(intact)

    shutil.rmtree(cache.root)  # as the error says: the next mark rebuilds the cache
    rebuilt, marked = mark(spark, env, cache)
    assert marked == expected and rebuilt.summary["range_cache"]["metaranges_cached"] == 0


def test_killed_generation_is_ignored_and_cleaned(spark: SparkSession, env: GcEnv, tmp_path: Path) -> None:
    cache = RangeCache.for_repository(tmp_path / "state", REPO, buckets=4)
    first, expected = mark(spark, env, cache)
    kept = cache_files(cache)
    generation = first.summary["range_cache"]["generation"]
    nxt = f"{generation + 1:08d}"
    # a cycle killed after writing its parts, before its record: they claim every range and
    # metarange holds nothing but an address that would save a garbage object if it were read
    saved = sorted(expected)[0]
    range_ids = sorted(recorded(env, first, "ranges", "range_id"))
    metaranges = sorted(recorded(env, first, "metaranges", "metarange_id"))
    killed = {
        f"ranges/part-{nxt}-b00000-killed.parquet": pa.table(
            {"range_id": range_ids, "address": [saved] * len(range_ids)}
        ),
        f"metaranges/part-{nxt}-killed.parquet": pa.table(
            {"metarange_id": metaranges, "range_id": [range_ids[0]] * len(metaranges)}
        ),
        f"committed/part-{nxt}-b00000-killed.parquet": pa.table({"address": [saved], "count": [1]}),
    }
    for name, table in killed.items():
        pq.write_table(table, cache.root / name)
    (cache.root / f"_gen/{nxt}.json.tmp").write_text("{")

    second, marked = mark(spark, env, cache)
    assert marked == expected
    stats = second.summary["range_cache"]
    assert (stats["metaranges_read"], stats["ranges_read"], stats["generation"]) == (0, 0, generation)
    assert cache_files(cache) == kept


def test_generation_record_round_trip() -> None:
    generation = Generation(
        3, "repo", "s3://bucket/repo", 4,
        (Part("metaranges/part-00000003-a.parquet", 5, ids=("m1", "m2")),),
        {1: (Part("ranges/part-00000002-b00001-x.parquet", 9, ranges=2),)},
    )  # fmt: skip
    assert Generation.from_json(json.loads(generation.to_json())) == generation


def test_metarange_plan_reads_new_and_rewrites_when_mostly_unneeded() -> None:
    a = Part("metaranges/a.parquet", 4, ids=("m1", "m2"))
    b = Part("metaranges/b.parquet", 4, ids=("m3", "m4"))
    c = Part("metaranges/c.parquet", 2, ids=("m5",))
    # m5's part is dropped for free, m3 and m4 stay where they are, m9 is read
    assert plan_metaranges([a, b, c], ["m3", "m4", "m9"]) == ([("m9", None)], (b,))
    # two of the five ids in the parts still needed are unneeded: not worth a rewrite yet
    d = Part("metaranges/d.parquet", 3, ids=("m6", "m7", "m8"))
    assert plan_metaranges([a, d], ["m1", "m2", "m6"]) == ([], (a, d))
    # only one of d's three is needed: it is copied into a new part, and d is dropped
    assert plan_metaranges([a, d], ["m6", "m9"]) == ([("m9", None), ("m6", "metaranges/d.parquet")], ())


def test_unreadable_record_fails_and_a_foreign_one_starts_afresh(tmp_path: Path) -> None:
    cache = RangeCache(tmp_path / "cache")
    cache.open(REPO, "local://unified")  # an empty cache: its directories
    part = Part("metaranges/part-00000001-a.parquet", 1, ids=("m1",))
    pq.write_table(pa.table({"metarange_id": ["m1"], "range_id": ["r1"]}), cache.root / part.file)
    cache.commit(Generation(1, REPO, "local://unified", 4, (part,)))
    assert cache.open(REPO, "local://unified").metaranges == (part,)

    (cache.root / "_gen/00000001.json").write_text('{"format": 1, "generation": 1}')
    with pytest.raises(RangeCacheError, match=r"00000001\.json cannot be read"):
        cache.open(REPO, "local://unified")

    cache.commit(Generation(1, REPO, "local://unified", 4, (part,)))
    recreated = cache.open(REPO, "local://elsewhere")  # a repository of the same name, recreated
    assert (recreated.number, recreated.metaranges, recreated.buckets) == (1, (), 256)
    assert cache_files(cache) == set()  # the next record will be generation 2


def test_retention_drops_what_the_last_mark_did_not_need_then_the_least_recently_used() -> None:
    meta = Part("metaranges/part-00000003-m.parquet", 4, ids=("m1",), used=3)
    old_needed = Part("ranges/part-00000001-b00000-a.parquet", 9, ranges=2, used=3)
    new_needed = Part("ranges/part-00000003-b00000-b.parquet", 9, ranges=2, used=3)
    unneeded = Part("ranges/part-00000002-b00001-c.parquet", 9, ranges=2, used=2)
    older_unneeded = Part("ranges/part-00000001-b00001-d.parquet", 9, ranges=2, used=1)
    generation = Generation(
        3, "repo", "local://repo", 4, (meta,), {0: (old_needed, new_needed), 1: (older_unneeded, unneeded)}
    )
    sizes = dict.fromkeys(generation.files(), 100)
    assert needed_bytes(generation, sizes) == 300  # what the last mark (generation 3) needed
    assert plan_retention(generation, sizes, 500) is generation  # it fits
    # the parts the last mark (generation 3) did not need go first, the least recently needed first
    assert plan_retention(generation, sizes, 400).files() == generation.files() - {older_unneeded.file}
    two = plan_retention(generation, sizes, 300)
    assert two.number == 4 and 1 not in two.ranges
    # then the least recently used: among parts the last mark needed, the oldest written
    assert plan_retention(generation, sizes, 200).files() == {meta.file, new_needed.file}
    assert plan_retention(generation, sizes, 0).files() == set()


def test_byte_cap_is_honoured_between_marks_and_marks_stay_the_same(
    spark: SparkSession, env: GcEnv, tmp_path: Path
) -> None:
    cache = RangeCache.for_repository(tmp_path / "state", REPO, buckets=4)
    _, expected = mark(spark, env, cache)
    current = cache.latest()
    assert current is not None
    full = sum(cache.part_sizes(current).values())
    trimmed = trim_range_cache(cache, full // 2)
    assert trimmed.bytes_before == full and 0 < trimmed.bytes_after <= full // 2 and trimmed.parts_dropped
    assert trimmed.needed_bytes == full  # one mark wrote it all, and needed all of it
    on_disk = sum(f.stat().st_size for f in cache.root.rglob("*.parquet"))
    assert on_disk == trimmed.bytes_after  # the dropped parts are deleted at once
    assert trim_range_cache(cache, full // 2).parts_dropped == 0  # it fits now

    result, marked = mark(spark, env, cache)
    assert marked == expected
    stats = result.summary["range_cache"]
    assert stats["metaranges_read"] + stats["ranges_read"] > 0  # what was dropped is read again
    assert trim_range_cache(cache, 0).bytes_after == 0
    assert not list(cache.root.rglob("*.parquet"))
    _, marked = mark(spark, env, cache)
    assert marked == expected


@pytest.mark.parametrize(
    ("values", "among", "expected"),
    [
        ([5, 1, 9, 7, 12, 0], [1, 7, 9], [False, True, True, True, False, False]),
        ([3, 4], [], [False, False]),  # no marked size: nothing is kept
        ([2**40, -1], [-1, 2**40], [True, True]),
    ],
)
def test_the_contents_lookup_keeps_only_the_pushed_sizes(
    values: list[int], among: list[int], expected: list[bool]
) -> None:
    """The guard's size filter in the entries lookup (a binary search over the sorted marked sizes)
    keeps exactly the entries whose size is among them, at both ends of the sorted array too."""
    import numpy as np

    from lakefs_gc.spark.mark.range_cache.lookups import _among

    mask = _among(np.array(values, dtype=np.int64), np.array(among, dtype=np.int64))
    assert mask.tolist() == expected


def test_a_lookup_reads_only_the_row_groups_that_may_hold_its_ranges(tmp_path: Path) -> None:
    """A part's ranges are in id order: the row groups whose id statistics cannot hold a wanted id
    are skipped, every group that may is read, and a part without statistics is read whole."""
    from lakefs_gc.spark.mark.range_cache.tasks import _row_groups

    ids = [f"{i:04x}" for i in range(0, 100)]
    table = pa.table({"range_id": ids, "address": [f"data/{i}" for i in ids]})
    pq.write_table(table, tmp_path / "part.parquet", row_group_size=10)
    pq.write_table(table, tmp_path / "bare.parquet", row_group_size=10, write_statistics=False)
    metadata = pq.ParquetFile(tmp_path / "part.parquet").metadata
    assert _row_groups(metadata, [ids[3], ids[45], ids[46], "zzzz"]) == [0, 4]
    assert _row_groups(metadata, []) == []
    assert _row_groups(metadata, None) == list(range(10))
    assert _row_groups(pq.ParquetFile(tmp_path / "bare.parquet").metadata, [ids[3]]) == list(range(10))
