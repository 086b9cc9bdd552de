"""Benchmark: lakeFS's GC design's bottom-line repository, end to end (numbers, not a test).

The bottom line (lakeFS's GC design): 20M objects, 1K branches, 30K commits, 5M uncommitted
objects, 1M garbage, "collected in about 3 hours on a cluster". This run, on local Spark:

1. **synth**: ``lakefs-gc test-server synth --no-objects`` writes the repository's metadata
   (ranges, metaranges, commits, staging), its ground-truth manifest and an S3 Inventory delivery
   (Parquet) describing its objects instead of the objects themselves, the way a namespace of
   that size is marked in production (20M files would need ~100 GB of disk). Synthesized once
   per shape and reused.
2. **mark** with ``--inventory`` and ``--trust-checksums`` (``--no-trust-checksums``: without):
   wall time of each phase (the mark's own progress lines: the
   uncommitted dump, active commits, metaranges, ranges, candidates, classification, report),
   the Spark stages, range entries decoded per second, peak RSS of the Python driver, the driver
   JVM and the Python workers; the marked set against the manifest's garbage set (in DuckDB, so
   this process never holds either set).
3. **the single-machine floor**: what a user could write by hand. The committed addresses of the
   active metaranges decoded in this one process and the staged addresses of the uncommitted
   dump, written as Parquet, then classified by DuckDB against the same inventory (the
   namespace's keys older than the mark's cutoff, minus ``_lakefs/``, anti-joined with the
   referenced addresses). Reported: the decode, the DuckDB classification, their sum beside our
   mark, and whether DuckDB's garbage equals the manifest's.
4. **service cycles** (``--cycles``): the mark with a range cache as the service runs it, first
   on the repository as synthesized (the cache emptied), then after ``--new-fraction`` more
   commits and objects (uploaded and committed through the lakeFS API; they stay in the
   synthesized state, so a later run marks a repository that much larger, with the same
   garbage). Each cycle's marked set is compared with the manifest's garbage. ``--no-mark``: no
   separate mark before them (the first cycle is then the mark). ``--keep-cache``: the first
   cycle starts from the range cache an earlier run left (two incremental cycles, each after
   the earlier run's or this run's new commits). ``--after-sweep``: the second cycle reads the
   delivery S3 would write after the first cycle's sweep (its marked objects gone, the objects
   written since listed), as a service's next cycle does, and its marked set is compared with
   the garbage the sweep left (none, when the first cycle's was exact).
5. **sweep** (``--sweep-objects``, default: the garbage count): that many objects deleted from a
   moto S3 server that adds ``--s3-latency-ms`` (default 100) to each ``DeleteObjects``: by a
   single-threaded loop of 1,000-key requests and by the sweep job (bench/mark.py's sweep
   benchmark; moto answers listings from an index, at about S3's cost, since 2026-12-01).

Aims (issue 17): the whole GC under 30 minutes on 2 cores; driver RSS at 20M within 10% of at 1M;
the incremental cycle at most 10% of the first; our mark within 2x of the decode + DuckDB floor.

    python bench/seed_scale.py [--objects 20000000] [--commits 30000] [--branches 1000]
                               [--uncommitted 5000000] [--garbage 1000000] [--scale F]
                               [--cycles [--keep-cache] [--after-sweep] [--no-mark]] [--new-fraction 0.01]
                               [--sweep-objects N]
                               [--s3-latency-ms 100] [--driver-memory 6g]
                               [--workdir DIR] [--master local[2]] [--json FILE]

``--scale 0.05`` runs the same shape at a twentieth (1M objects, 1,500 commits, 50 branches): the
RSS comparison point and a quick rehearsal. Results: bench/README.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from mark import (
    REPOSITORY,
    Spec,
    bench_mark,
    bench_sweep,
    driver_memory,
    finish,
    gc_settings,
    moto,
    say,
    spark_session,
    test_server,
)

#: the bottom-line shape (lakeFS's GC design)
BOTTOM_LINE = {"objects": 20_000_000, "commits": 30_000, "branches": 1_000, "uncommitted": 5_000_000,
               "garbage": 1_000_000}  # fmt: skip


#: the manifest's garbage set, as DuckDB reads the synthesizer's parquet parts
_GARBAGE_VIEW = (
    "CREATE VIEW {name} AS SELECT address FROM read_parquet('{manifest}/**/*.parquet') WHERE garbage"
)


# ---- 1. synth ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Synthesized:
    storage: Path
    state: Path
    inventory: Path
    manifest: Path
    report: dict[str, Any]


def synthesize(workdir: Path, shape: Spec) -> Synthesized:
    """The repository of ``shape`` with an inventory instead of objects, synthesized on first use
    (its wall and CPU seconds and peak RSS go into ``synth.json``)."""
    base = workdir / shape.tag
    storage, state, done = base / "storage", base / "state", base / "synth.json"
    inventory = state / "inventory"
    if not done.is_file():
        if base.exists():
            raise SystemExit(f"{base} exists but is incomplete (no synth.json): remove it and rerun")
        say(f"synth: {shape.tag} into {base} (20M objects: about 25 minutes and 40 GiB of metadata)")
        argv = [sys.executable, "-m", "lakefs_gc.cli.main", "test-server", "synth", "--storage-root",
                str(storage), "--state", str(state), "--repo", REPOSITORY, "--no-objects",
                "--inventory-to", str(inventory), "--objects", str(shape.objects),
                "--commits", str(shape.commits), "--branches", str(shape.branches),
                "--uncommitted", str(shape.uncommitted), "--garbage", str(shape.garbage)]  # fmt: skip
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True).stdout
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        report = json.loads(out)
        report["wall_seconds"] = round(time.perf_counter() - start, 1)
        report["cpu_seconds"] = round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1)
        done.write_text(json.dumps(report, indent=2))
    report = json.loads(done.read_text())
    return Synthesized(storage, state, inventory, Path(report["manifest"]), report)


# ---- 2. mark -------------------------------------------------------------------------------


def with_inventory(settings: Any, inventory: Path, *, trust_checksums: bool) -> Any:
    """``settings`` marking from the inventory delivery at ``inventory`` (``--inventory``), with
    ``--trust-checksums`` when asked (the synthesized inventory has ETag and EncryptionStatus)."""
    gc = settings.gc.model_copy(update={"inventory": str(inventory), "trust_checksums": trust_checksums})
    return settings.model_copy(update={"gc": gc})


def compare_with_manifest(settings: Any, result: Any, repo: Synthesized, swept: Any = None) -> dict[str, Any]:
    """The marked set beside the manifest's garbage set, joined in DuckDB; ``swept`` (a pyarrow
    array of addresses): the garbage without them (deleted by a sweep)."""
    import duckdb
    import pyarrow as pa

    from lakefs_gc import jobs

    marked = jobs.report_table(settings, result.storage_namespace, result.mark_id, "deleted").select(
        ["address"]
    )
    con = duckdb.connect()
    con.register("marked", marked)
    if swept is None:
        con.execute(_GARBAGE_VIEW.format(name="garbage", manifest=repo.manifest))
    else:
        con.execute(_GARBAGE_VIEW.format(name="manifest_garbage", manifest=repo.manifest))
        con.register("swept", pa.table({"address": swept}))
        remaining = "SELECT address FROM manifest_garbage ANTI JOIN swept USING (address)"
        con.execute(f"CREATE VIEW garbage AS {remaining}")
    return _set_comparison(con, "marked")


def _set_comparison(con: Any, found: str) -> dict[str, Any]:
    """``found`` (a relation with ``address``) beside the view ``garbage``."""
    one = con.execute(f"""
        SELECT (SELECT count(*) FROM garbage), (SELECT count(*) FROM {found}),
               (SELECT count(DISTINCT address) FROM {found}),
               (SELECT count(*) FROM garbage ANTI JOIN {found} USING (address)),
               (SELECT count(*) FROM (SELECT DISTINCT address FROM {found}) ANTI JOIN garbage USING (address))
    """).fetchone()  # fmt: skip
    expected, rows, distinct, missed, wrong = one
    return {
        "expected_garbage": expected,
        "found_rows": rows,
        "found": distinct,
        "missed": missed,  # garbage left behind: a GC that under-collects
        "wrongly_found": wrong,  # live data: a GC that loses data
        "equal": missed == 0 and wrong == 0 and rows == distinct == expected,
    }


# ---- 3. the single-machine floor -------------------------------------------------------------


def bench_floor(settings: Any, repo: Synthesized, mark: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """Decode the referenced addresses in this process, then classify the inventory in DuckDB."""
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lakefs_gc.lakefs.client import LakeFSClient
    from lakefs_gc.lakefs.exports import read_commits_csv, read_uncommitted_addresses
    from lakefs_gc.lakefs.ranges import committed_addresses_of_range, open_sstable, range_ids_of_metaranges
    from lakefs_gc.storage.filesystems import filesystem_for
    from lakefs_gc.storage.locations import parse_location, parse_storage_namespace

    referenced = workdir / "floor-referenced.parquet"
    say("floor: decoding the referenced addresses in one process")
    start = time.perf_counter()
    with LakeFSClient(settings.lakefs, source="bench") as client:
        repository = client.get_repository(REPOSITORY)
        commits = client.prepare_commits(REPOSITORY)
        uncommitted = client.prepare_uncommitted(REPOSITORY)
    exports_seconds = time.perf_counter() - start  # lakeFS's side, as the mark's dump and export are
    namespace = parse_storage_namespace(repository.storage_namespace, local_root=str(repo.storage))
    where = parse_location(commits.location, local_root=str(repo.storage))
    fs, path = filesystem_for(where, settings.storage)
    metaranges = read_commits_csv(fs, path).metarange_ids
    schema = pa.schema([("address", pa.string())])
    entries = 0
    with pq.ParquetWriter(referenced, schema) as writer:
        range_ids = sorted(set(range_ids_of_metaranges(fs, namespace, metaranges)))
        for range_id in range_ids:
            location = namespace.join(f"_lakefs/{range_id}")
            with open_sstable(fs, location, location.fs_path) as reader:
                addresses = list(committed_addresses_of_range(reader, repository.storage_namespace))
            entries += len(addresses)
            writer.write_table(pa.table({"address": pa.array(addresses, pa.string())}))
        if uncommitted.location:
            staged_at = parse_location(uncommitted.location, local_root=str(repo.storage))
            staged = read_uncommitted_addresses(fs, staged_at.fs_path, required=False)
            writer.write_table(staged.select([0]).rename_columns(["address"]).cast(schema))
    decode_seconds = time.perf_counter() - start
    say(
        f"floor: {entries:,} committed entries of {len(range_ids):,} ranges decoded in {decode_seconds:.1f}s "
        f"(lakeFS's exports {exports_seconds:.1f}s of it)"
    )

    cutoff = mark["summary"].get("cutoff") or mark["summary"].get("cutoff_time")
    prefix = namespace.fs_path.strip("/") + "/"
    con = duckdb.connect()
    con.execute("SET threads TO 2")
    start = time.perf_counter()
    con.execute(f"""
        CREATE TABLE floor_garbage AS
        WITH candidates AS (
            SELECT substr(key, {len(prefix) + 1}) AS address
            FROM read_parquet('{repo.inventory}/**/data/*.parquet')
            WHERE starts_with(key, '{prefix}') AND NOT starts_with(key, '{prefix}_lakefs/')
              {f"AND last_modified_date < TIMESTAMPTZ '{cutoff}'" if cutoff else ""}
        )
        SELECT address FROM candidates ANTI JOIN read_parquet('{referenced}') USING (address)
    """)  # fmt: skip
    classify_seconds = time.perf_counter() - start
    con.execute(_GARBAGE_VIEW.format(name="garbage", manifest=repo.manifest))
    say(f"floor: DuckDB classification {classify_seconds:.1f}s")
    return {
        "ranges": len(range_ids),
        "committed_entries": entries,
        "decode_seconds": round(decode_seconds, 2),
        "lakefs_exports_seconds": round(exports_seconds, 2),
        "duckdb_seconds": round(classify_seconds, 2),
        "floor_seconds": round(decode_seconds + classify_seconds, 2),
        "cutoff": cutoff,
        "correctness": _set_comparison(con, "floor_garbage"),
    }


# ---- 4. service cycles ---------------------------------------------------------------------


def bench_cycles(
    spark: Any, settings: Any, server: Any, shape: Spec, repo: Synthesized, args: argparse.Namespace
) -> dict[str, Any]:
    """The service's kind of mark (a range cache kept between cycles), before and after
    ``--new-fraction`` more commits and objects."""
    from stream import add_commits, gc_cycle

    from lakefs_gc.lakefs.commit_graph import CommitCache
    from lakefs_gc.spark.mark.range_cache import RangeCache

    servers = {"lakeFS test server": server.proc.pid}
    commits = CommitCache()  # the service keeps one for its life
    cache = RangeCache.for_repository(args.workdir / "service-state" / shape.tag, REPOSITORY)
    if not args.keep_cache:
        cache.drop()  # the first cycle is a service's first: nothing cached by an earlier run
    say("cycles: first")
    first = gc_cycle(spark, settings, cache, servers, sweep=False, commits=commits)
    first["memory"] = driver_memory()
    first["correctness"] = _cycle_correctness(settings, first, repo)
    say(f"cycles: first cycle's marked set vs the manifest's garbage: {first['correctness']}")
    added = add_commits(server.info, shape, args.new_fraction, int(repo.report.get("tables") or 1))
    say(f"cycles: after the new commits ({added})")
    swept, delivery = None, None
    if args.after_sweep:  # the delivery after the first cycle's sweep, and the objects written since
        settings, swept, delivery = after_sweep(settings, first, repo)
    second = gc_cycle(spark, settings, cache, servers, sweep=False, commits=commits)
    second["memory"] = driver_memory()
    # the new commits add objects under new paths only: the garbage is still the manifest's (less
    # what the first cycle's sweep deleted)
    second["correctness"] = _cycle_correctness(settings, second, repo, swept)
    say(f"cycles: second cycle's marked set vs the manifest's garbage: {second['correctness']}")
    ratio = round(second["seconds"] / first["seconds"], 3) if first["seconds"] else None
    return {"first": first, "added": added, "after_sweep": delivery, "second": second, "ratio": ratio}


def after_sweep(settings: Any, first: dict[str, Any], repo: Synthesized) -> tuple[Any, Any, dict[str, Any]]:
    """``settings`` reading the delivery S3 would write after the first cycle's sweep (its marked
    objects gone, the objects written through lakeFS since listed: ``next_delivery``), as a
    service's next cycle reads; the swept addresses; what writing that delivery took. The sweep
    itself is not run here (``--sweep-objects`` measures one): only its effect on the candidates."""
    import pyarrow.fs as pafs

    from lakefs_gc import jobs
    from lakefs_gc.inventory.s3.manifest import discover
    from lakefs_gc.storage.locations import parse_location, parse_storage_namespace
    from lakefs_gc.testing.synth.outputs import InventoryTarget, next_delivery

    mark = first["mark"]
    report = jobs.report_table(settings, mark["storage_namespace"], mark["mark_id"], "deleted")
    swept = report.column("address").combine_chunks()
    deliveries = discover(pafs.LocalFileSystem(), str(repo.inventory)).complete
    previous = max(deliveries, key=lambda d: d.snapshot_time)
    root = repo.state / "inventory-after-sweep"
    shutil.rmtree(root, ignore_errors=True)
    namespace = parse_storage_namespace(f"local://{REPOSITORY}", local_root=str(repo.storage))
    start = time.perf_counter()
    say(f"cycles: writing the delivery after the sweep of {len(swept):,} objects into {root}")
    manifest = next_delivery(
        previous, InventoryTarget(parse_location(str(root))), namespace, settings.storage,
        datetime.now(timezone.utc), deleted=swept,
    )  # fmt: skip
    delivery = {"swept": len(swept), "manifest": manifest, "seconds": round(time.perf_counter() - start, 1)}
    say(f"cycles: {delivery}")
    return with_inventory(settings, root, trust_checksums=settings.gc.trust_checksums), swept, delivery


def _cycle_correctness(
    settings: Any, cycle: dict[str, Any], repo: Synthesized, swept: Any = None
) -> dict[str, Any]:
    mark = cycle["mark"]
    found = SimpleNamespace(mark_id=mark["mark_id"], storage_namespace=mark["storage_namespace"])
    return compare_with_manifest(settings, found, repo, swept)


# ---- report --------------------------------------------------------------------------------


def print_report(result: dict[str, Any]) -> None:
    w = sys.stdout.write
    w(f"\nlakefs-gc seed-scale benchmark: {result['shape']}\n{result['environment']}\n")
    synth = result["synth"]
    w(f"\nsynth: {synth.get('wall_seconds', '?')} s wall, {synth.get('cpu_seconds', '?')} CPU s, "
      f"{synth.get('physical_objects', 0):,} objects, {synth.get('ranges_written', 0):,} ranges, "
      f"peak RSS {synth.get('peak_rss_mib')} MiB\n")  # fmt: skip
    mark = result.get("mark")
    if mark:
        s = mark["summary"]
        w(f"\nmark: {mark['seconds']:.1f} s, {s.get('num_deleted_objects', 0):,} marked, "
          f"{s.get('num_listed_objects', 0):,} candidates; memory {mark['memory']}\n")  # fmt: skip
        for phase in mark["phases"]:
            w(f"  {phase['seconds']:>8.1f} s  {phase['phase']}\n")
        w(f"  marked set = manifest garbage: {mark['correctness']}\n")
    floor = result.get("floor")
    if floor and mark:
        exports = floor.get("lakefs_exports_seconds", 0)
        rate = floor["committed_entries"] / max(floor["decode_seconds"] - exports, 1e-9)
        w(f"\nfloor (one-process decode + DuckDB): decode {floor['decode_seconds']:.1f} s "
          f"(lakeFS's exports {exports:.1f} s of it; "
          f"{floor['committed_entries']:,} entries of {floor['ranges']:,} ranges, "
          f"{rate:,.0f}/s decoded), DuckDB "
          f"{floor['duckdb_seconds']:.1f} s; our mark / floor = "
          f"{mark['seconds'] / floor['floor_seconds']:.2f}x\n"
          f"  DuckDB garbage = manifest garbage: {floor['correctness']}\n")  # fmt: skip
    cycles = result.get("cycles")
    if cycles:
        w(f"\ncycles: first {cycles['first']['seconds']:.1f} s, after {cycles['added']} "
          f"{cycles['second']['seconds']:.1f} s ({cycles['ratio']:.2f}x)\n")  # fmt: skip
        for name in ("first", "second"):
            marking = cycles[name]["mark"]
            w(f"  {name}: memory {cycles[name].get('memory')}; range cache {marking.get('range_cache')}\n")
            for phase in marking["phases"]:
                w(f"  {phase['seconds']:>8.1f} s  {phase['phase']}\n")
            w(f"  marked set = manifest garbage: {cycles[name].get('correctness')}\n")
    sweep = result.get("sweep")
    if sweep:
        loop, ours = sweep["loop"], sweep["sweep"]
        w(f"\nsweep of {sweep['objects']:,} objects, {result['s3_latency_ms']} ms per DeleteObjects: "
          f"loop {loop['seconds']:.1f} s, ours {ours['seconds']:.1f} s "
          f"({loop['seconds'] / ours['seconds']:.1f}x), deleted {ours['deleted']:,}, "
          f"failed {ours['failed']}\n")  # fmt: skip
        if ours.get("deleting_seconds"):
            phase = ours["deleting_seconds"]
            w(f"  its deleting phase: {phase:.1f} s ({loop['seconds'] / phase:.1f}x the loop)\n")
    # the first cycle is the mark when there is no separate one (--no-mark)
    marking = mark["seconds"] if mark else (cycles["first"]["seconds"] if cycles else 0.0)
    total = marking + (sweep["sweep"]["seconds"] if sweep else 0.0)
    w(f"\nwhole GC (mark + sweep): {total:.1f} s = {total / 60:.1f} min\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, value in BOTTOM_LINE.items():
        parser.add_argument(f"--{name}", type=int, default=value, help=f"default {value:,}")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply objects, commits, branches, "
                        "uncommitted and garbage (0.05: 1M objects, the RSS comparison point)")  # fmt: skip
    parser.add_argument("--cycles", action="store_true", help="also the service's first and next cycle")
    parser.add_argument("--new-fraction", type=float, default=0.01, help="new commits and objects before "
                        "the second cycle, as a fraction of the repository's (default 0.01)")  # fmt: skip
    parser.add_argument("--sweep-objects", type=int, help="objects the sweep deletes (default: the "
                        "garbage count; 0: no sweep)")  # fmt: skip
    parser.add_argument("--s3-latency-ms", type=int, default=100, help="added to each DeleteObjects")
    parser.add_argument("--sweep-partitions", type=int)
    parser.add_argument("--no-floor", action="store_true", help="skip the decode + DuckDB floor")
    parser.add_argument("--keep-cache", action="store_true", help="with --cycles: the first cycle starts "
                        "from the range cache an earlier run left in --workdir (a restarted service's "
                        "cycle; the ratio then compares two incremental cycles)")  # fmt: skip
    parser.add_argument("--after-sweep", action="store_true", help="with --cycles: the second cycle reads "
                        "the delivery S3 would write after the first cycle's sweep (its marked objects "
                        "gone), as a service's next cycle does, instead of the same delivery")  # fmt: skip
    parser.add_argument("--no-mark", action="store_true", help="with --cycles: no separate mark (the "
                        "first cycle is the mark, with the range cache); implies --no-floor")  # fmt: skip
    parser.add_argument(
        "--no-trust-checksums", dest="trust_checksums", action="store_false",
        help="mark without --trust-checksums (the identity-twin guard pairs on size alone)",
    )  # fmt: skip
    parser.add_argument("--inventory", type=Path, help="with --cycles --no-mark: mark from the deliveries "
                        "under this directory instead of the synthesized one (e.g. an earlier "
                        "--after-sweep run's state/inventory-after-sweep)")  # fmt: skip
    parser.add_argument("--driver-memory", default="6g", help="spark.driver.memory (the JVM heap)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/lakefs-gc-seed-scale"))
    parser.add_argument("--json", type=Path, help="also write all numbers to this file")
    args = parser.parse_args()
    if importlib.util.find_spec("duckdb") is None:  # checked before minutes of synthesis, not after
        parser.error("DuckDB compares the marked sets with the ground truth: pip install -e '.[test,bench]'")
    if args.inventory and not (args.no_mark and not args.after_sweep):
        parser.error("--inventory needs --cycles --no-mark, without --after-sweep (which writes its own)")
    if (args.no_mark or args.after_sweep or args.keep_cache) and not args.cycles:
        parser.error("--no-mark (the first cycle is the mark), --after-sweep and --keep-cache need --cycles")
    args.workdir = args.workdir.resolve()
    args.workdir.mkdir(parents=True, exist_ok=True)
    shape = Spec(*(max(1, round(getattr(args, name) * args.scale)) for name in BOTTOM_LINE))
    result: dict[str, Any] = {
        "shape": shape.__dict__,
        "environment": f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start, "
        f"Spark master {args.master}, driver memory {args.driver_memory}",
        "s3_latency_ms": args.s3_latency_ms,
    }
    repo = synthesize(args.workdir, shape)
    result["synth"] = repo.report
    spark = spark_session(args.master, args.workdir, {"spark.driver.memory": args.driver_memory},
                          app="lakefs-gc bench/seed_scale.py")  # fmt: skip
    try:
        with test_server(repo.storage, repo.state, None) as server:
            settings = with_inventory(
                gc_settings(server.info, repo.storage), args.inventory or repo.inventory,
                trust_checksums=args.trust_checksums,
            )  # fmt: skip
            if not args.no_mark:
                result["mark"] = bench_mark(spark, settings, lambda s, r: compare_with_manifest(s, r, repo))
                say(f"mark: marked set vs the manifest's garbage: {result['mark']['correctness']}")
            if not (args.no_floor or args.no_mark):
                result["floor"] = bench_floor(settings, repo, result["mark"], args.workdir)
                say(f"floor: DuckDB's garbage vs the manifest's: {result['floor']['correctness']}")
            if args.cycles:
                result["cycles"] = bench_cycles(spark, settings, server, shape, repo, args)
        sweep_objects = shape.garbage if args.sweep_objects is None else args.sweep_objects
        if sweep_objects:
            with moto(args.s3_latency_ms) as moto_server:
                result["sweep"] = bench_sweep(
                    spark, args.workdir, moto_server, sweep_objects, args.sweep_partitions
                )
    finally:
        spark.stop()
    return finish(result, print_report, args.json)


if __name__ == "__main__":
    sys.exit(main())
