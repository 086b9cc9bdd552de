"""Benchmark: the 1M-object mark on ``local[2]`` and on a standalone cluster (2 workers × 1 core), in one run.

The synthetic repository of ``bench/mark.py`` (``lakefs-gc test-server synth``, reused) is marked
twice, each time by a fresh driver process (``--only``, a child of this script) with its own
lakeFS test server: once on ``local[2]`` (driver and executor one JVM), once on the standalone
cluster of the tests (:mod:`tests.support.spark_cluster`: a master and two 1-core workers, each in
its own mount namespace with a private ``/tmp``). The same Spark settings otherwise (4 shuffle
partitions, default parallelism 4). The namespace is a local directory every worker sees, so
``--workdir`` must not be under ``/tmp`` (the workers' ``/tmp`` is their own).

Reported for each: mark wall time, its Spark stages (bench/mark.py's table), and where the tasks'
time went, summed over every task of the mark from the event log (the UI is off): executor run
time (which includes the Python workers), deserialisation of the task on the executor, result
serialisation, fetching results, scheduler delay (what the task's wall time leaves over: shipping
it, queueing, sending the result back), JVM GC, shuffle bytes written, read locally and over the
network, and the time tasks waited for shuffle fetches. The cluster needs root (``unshare -m``).

The mark runs without its identity-twin guard unless ``--twin-guard`` (:func:`without_twin_guard`).

    python bench/cluster.py [--objects N] [--workdir DIR] [--json FILE] [--twin-guard]

Results: the "Cluster vs local[2]" section of bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1]))  # the test kit: tests/support

from mark import (  # noqa: E402  (bench/ is the script's directory)
    REPOSITORY,
    Spec,
    bench_mark,
    gc_settings,
    print_stages,
    say,
    spark_session,
    synthesized,
    test_server,
)

#: the settings both runs share (the cluster adds its own: executors, event log, shuffle over the network)
SHARED = {"spark.sql.shuffle.partitions": "4", "spark.default.parallelism": "4"}


def task_metrics(event_log: Path, since_ms: float) -> dict[str, Any]:
    """Sums over the tasks that ended after ``since_ms`` in one application's event log."""
    totals: dict[str, float] = {}
    executors: dict[str, int] = {}

    def add(name: str, value: float) -> None:
        totals[name] = totals.get(name, 0) + value

    for line in event_log.read_text().splitlines():
        if '"SparkListenerTaskEnd"' not in line:
            continue
        event = json.loads(line)
        info, m = event["Task Info"], event.get("Task Metrics") or {}
        if info["Launch Time"] < since_ms:
            continue
        executors[info["Executor ID"]] = executors.get(info["Executor ID"], 0) + 1
        duration = info["Finish Time"] - info["Launch Time"]
        getting = info["Finish Time"] - info["Getting Result Time"] if info.get("Getting Result Time") else 0
        run, deserialize = m.get("Executor Run Time", 0), m.get("Executor Deserialize Time", 0)
        serialize = m.get("Result Serialization Time", 0)
        read, write = m.get("Shuffle Read Metrics", {}), m.get("Shuffle Write Metrics", {})
        add("tasks", 1)
        add("task_wall_s", duration / 1000)
        add("executor_run_s", run / 1000)
        add("executor_cpu_s", m.get("Executor CPU Time", 0) / 1e9)
        add("deserialize_s", deserialize / 1000)
        add("result_serialize_s", serialize / 1000)
        add("getting_result_s", getting / 1000)
        add("scheduler_delay_s", max(0, duration - run - deserialize - serialize - getting) / 1000)
        add("jvm_gc_s", m.get("JVM GC Time", 0) / 1000)
        add("result_mb", m.get("Result Size", 0) / 2**20)
        add("shuffle_written_mb", write.get("Shuffle Bytes Written", 0) / 2**20)
        add("shuffle_write_s", write.get("Shuffle Write Time", 0) / 1e9)
        add("shuffle_local_read_mb", read.get("Local Bytes Read", 0) / 2**20)
        add("shuffle_remote_read_mb", read.get("Remote Bytes Read", 0) / 2**20)
        add("shuffle_fetch_wait_s", read.get("Fetch Wait Time", 0) / 1000)
    return {"executors": executors, **{k: round(v, 2) for k, v in totals.items()}}


def without_twin_guard() -> None:
    """Skip the mark's identity-twin guard in this process (the driver decides whether it runs).

    Every object ``test-server synth`` writes has 16 bytes, and the guard joins the garbage with
    every HEAD entry of the same size before its budgets apply: garbage × entries × HEAD trees
    rows (issue 17), hours at 1M objects. Skipped, the mark is the one ``bench/mark.py`` measured
    before the guard existed, and the marked set must still equal the manifest's garbage.
    """
    from lakefs_gc.spark.mark import job
    from lakefs_gc.spark.mark.twins import guard_twins_none

    def skip(self: Any, classified: Any, checked: Any) -> Any:
        self.stats["identity_twins"] = guard_twins_none()
        return classified

    job._MarkRun._guard_twins = skip  # type: ignore[method-assign]


def mark_once(args: argparse.Namespace) -> dict[str, Any]:
    """One mark in this process (the child's side): ``args.master`` with ``args.conf``."""
    if not args.twin_guard:
        without_twin_guard()
    spec = Spec(args.objects, 1_000, 100, args.objects // 10, args.objects // 10)
    storage, state, _ = synthesized(args.workdir, spec)
    conf = {**SHARED, **json.loads(args.conf)}
    started = time.perf_counter()
    spark = spark_session(args.only, args.workdir, conf, app=f"lakefs-gc bench/cluster.py {args.only}")
    result: dict[str, Any] = {"master": args.only, "session_start_s": round(time.perf_counter() - started, 1)}
    try:
        with test_server(storage, state, None) as server:
            since_ms = time.time() * 1000
            result["mark"] = bench_mark(spark, gc_settings(server.info, storage), state)
        app = spark.sparkContext.applicationId
        event_dir = Path(urlparse(spark.sparkContext.getConf().get("spark.eventLog.dir")).path)
    finally:
        spark.stop()
    (log,) = [p for p in event_dir.iterdir() if p.name.startswith(app)]
    result["tasks"] = task_metrics(log, since_ms)
    return result


def run_child(master: str, conf: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    argv = [sys.executable, str(HERE), "--only", master, "--conf", json.dumps(conf), "--objects",
            str(args.objects), "--workdir", str(args.workdir), "--json", str(out),
            *(["--twin-guard"] if args.twin_guard else [])]  # fmt: skip
    say(f"mark on {master}")
    subprocess.run(argv, check=True, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    result: dict[str, Any] = json.loads(out.read_text())
    out.unlink()
    return result


def report(runs: list[dict[str, Any]], environment: str) -> None:
    w = sys.stdout.write
    w(f"\n{environment}\n")
    for run in runs:
        mark = run["mark"]
        right = mark["correctness"]
        w(f"\n{run['master']}: mark {mark['seconds']:.1f} s (session start {run['session_start_s']} s), "
          f"{mark['summary'].get('num_deleted_objects', '?'):,} marked, correct: {right}\n")  # fmt: skip
        print_stages(w, mark["stages"])
    keys = [k for k in runs[0]["tasks"] if k != "executors"]
    w(f"\n  {'task metrics (sums)':<24}" + "".join(f"{r['master'][:22]:>24}" for r in runs) + "\n")
    w(
        f"  {'tasks per executor':<24}"
        + "".join(f"{json.dumps(r['tasks']['executors']):>24}" for r in runs)
        + "\n"
    )
    for key in keys:
        w(f"  {key:<24}" + "".join(f"{r['tasks'].get(key, 0):>24,.2f}" for r in runs) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--objects", type=int, default=1_000_000, help="committed objects")
    parser.add_argument("--workdir", type=Path, default=Path("/var/tmp/lakefs-gc-bench"),
                        help="synthetic repositories (reused); not under /tmp")  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write all numbers to this file")
    parser.add_argument(
        "--twin-guard", action="store_true", help="keep the identity-twin guard (issue 17: slow on synth)"
    )
    parser.add_argument("--only", help=argparse.SUPPRESS)  # a child: one mark on this master
    parser.add_argument("--conf", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.workdir = args.workdir.resolve()
    if args.only:
        result = mark_once(args)
        if args.json:
            args.json.write_text(json.dumps(result, indent=2, default=str))
        return 0
    if args.workdir.is_relative_to("/tmp"):
        raise SystemExit("--workdir must not be under /tmp: the cluster's workers have a /tmp of their own")
    from tests.support.spark_cluster import isolation_problem, start_cluster

    problem = isolation_problem()
    if problem:
        raise SystemExit(problem)
    args.workdir.mkdir(parents=True, exist_ok=True)
    spec = Spec(args.objects, 1_000, 100, args.objects // 10, args.objects // 10)
    synthesized(args.workdir, spec)  # once, before either mark
    environment = f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start"
    runs = [run_child("local[2]", {}, args)]
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as base:
        cluster = start_cluster(Path(base))
        try:
            # executors of 1 GiB (all a worker offers), as bench/mark.py's local-cluster[2,1,1024]
            conf = {**cluster.conf(), "spark.executor.memory": "1g"}
            runs.append(run_child(cluster.master_url, conf, args))
        finally:
            cluster.stop()
    environment += f", {os.getloadavg()[0]:.1f} at end; repository {spec.tag} ({REPOSITORY})"
    report(runs, environment)
    if args.json:
        args.json.write_text(json.dumps({"environment": environment, "runs": runs}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
