"""Soak: ``lakefs-gc serve`` for a long time under steady load; is its memory and state flat?

Numbers, not a test. Two worlds:

* ``--world moto`` (default, the issue's shape; :mod:`soak_moto`): the storage namespace in a moto
  S3 bucket whose notifications moto sends to an SQS queue, which the service drains; moto, the
  lakeFS test server, the load generator (its own process, ``--threads`` writers at ``--rate``
  writes/s overwriting a fixed pool of paths, deleting one write in four, committing every
  ``--commit-every`` s, replacing its branches every ``--branch-every`` s) and the service are four
  processes. The repository retains ``--retention-days`` (0: commits expire within the run), the
  test server's grace period and the service's min age are ``--grace``. An S3 Inventory delivery of
  the namespace every ``--inventory-every`` s. After ``--minutes`` of load the load stops, the
  service runs two more cycles past the cutoff, and :func:`soak_moto.final_check` checks the bucket:
  every object an active commit or a branch references is there, every other object older than
  the load's end is gone.
* ``--world demo`` (the first runs): the embedded demo's world (:mod:`lakefs_gc.testing.serve_demo`),
  a local namespace, notifications through the test server's directory queue, load threads in this
  process; the check is the demo story's.

The service marks (and sweeps) every minute and compacts every ``--compaction-every``. Every
``--sample-every`` seconds ``/metrics`` is read: driver RSS, JVM heap in use and after the last
GC, state bytes per table, event table rows, dedupe keys held, ingest lag, the mean mark and sweep
time of the interval. At the end: the table, a Markdown summary every 5 minutes, the slope of
each series after ``--warmup`` (percent per 10 minutes of its mean, load phase only), a PNG of
each series when matplotlib is installed, and the check.

    python bench/soak.py --minutes 30 --dedupe-horizon 5m --keep-reports 10m --json soak.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from lakefs_gc.service.maintenance import STATE_TABLES  # noqa: E402
from lakefs_gc.testing.demo import REPOSITORY  # noqa: E402
from lakefs_gc.testing.serve_demo import demo_setting, fates  # noqa: E402

SERIES = {
    "rss_mb": ("lakefs_gc_driver_rss_bytes", 1 / 2**20),
    "descriptors": ("lakefs_gc_driver_open_descriptors", 1.0),  # 0 on a service without the gauge
    "heap_mb": ("lakefs_gc_jvm_heap_used_bytes", 1 / 2**20),
    "heap_gc_mb": ("lakefs_gc_jvm_heap_after_gc_bytes", 1 / 2**20),  # 0 on a service without the gauge
    "state_mb": ("lakefs_gc_state_bytes", 1 / 2**20),
    "events_mb": ('lakefs_gc_state_bytes{table="events"}', 1 / 2**20),
    "event_rows": ("lakefs_gc_event_table_rows", 1.0),
    "dedupe_keys": ("lakefs_gc_dedupe_keys", 1.0),
    "lag_s": ("lakefs_gc_ingest_lag_seconds", 1.0),
    "ingested": ("lakefs_gc_events_ingested_total", 1.0),
}


def metric(text: str, selector: str) -> float:
    """Sum of the samples matching ``selector`` (a name, optionally with one label filter)."""
    name, _, label = selector.partition("{")
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        m = re.match(r"^(\w+)(\{[^}]*\})?\s+(\S+)$", line)
        if m and m.group(1) == name and (not label or label.rstrip("}") in (m.group(2) or "")):
            value = float(m.group(3))
            total += 0.0 if value != value else value
    return total


class Load:
    """Writers through the lakeFS API: objects, deletes, commits, branch churn."""

    def __init__(
        self, configuration: Any, workdir: Path, rate: float, commit_every: float, branch_every: float
    ):
        self.configuration, self.workdir, self.rate = configuration, workdir, rate
        self.commit_every, self.branch_every = commit_every, branch_every
        self.stop, self.written, self.errors = threading.Event(), 0, 0
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(4)]

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)

    def _run(self, worker: int) -> None:
        from lakefs_sdk.api.branches_api import BranchesApi
        from lakefs_sdk.api.commits_api import CommitsApi
        from lakefs_sdk.api.objects_api import ObjectsApi
        from lakefs_sdk.api_client import ApiClient
        from lakefs_sdk.models.branch_creation import BranchCreation
        from lakefs_sdk.models.commit_creation import CommitCreation

        content = self.workdir / f"soak-{worker}"
        content.write_bytes(b"soak object\n")
        per_thread = self.rate / len(self.threads)
        with ApiClient(self.configuration) as client:
            objects, branches, commits = ObjectsApi(client), BranchesApi(client), CommitsApi(client)
            generation, n = 0, 0
            branch = f"soak-{worker}-{generation}"
            branches.create_branch(REPOSITORY, BranchCreation.from_dict({"name": branch, "source": "main"}))
            last_commit = last_branch = start = time.monotonic()
            while not self.stop.is_set():
                try:
                    n += 1
                    objects.upload_object(REPOSITORY, branch, f"soak/{worker}/{n}", content=str(content))
                    if n % 3 == 0:  # an uncommitted overwrite-then-delete: garbage once old enough
                        objects.delete_object(REPOSITORY, branch, f"soak/{worker}/{n - 1}")
                    self.written += 1
                    now = time.monotonic()
                    if now - last_commit >= self.commit_every:
                        commits.commit(REPOSITORY, branch, CommitCreation.from_dict({"message": f"soak {n}"}))
                        last_commit = now
                    if now - last_branch >= self.branch_every:
                        branches.delete_branch(REPOSITORY, branch)
                        generation += 1
                        branch = f"soak-{worker}-{generation}"
                        branches.create_branch(
                            REPOSITORY, BranchCreation.from_dict({"name": branch, "source": "main"})
                        )
                        last_branch = now
                except Exception:
                    self.errors += 1
                behind = start + n / per_thread - time.monotonic()
                if behind > 0:
                    self.stop.wait(behind)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope as percent of the mean per 10 minutes (xs in seconds)."""
    if len(xs) < 3:
        return float("nan")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0 or my == 0:
        return 0.0
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var
    return 100 * b * 600 / my


def period_peaks(rows: list[dict[str, Any]], key: str, period: float) -> list[float]:
    """The maximum of ``key`` in each complete ``period`` from the first row on."""
    xs, ys = finite(rows, key)
    if not xs:
        return []
    start, peaks = xs[0], []
    while start + period <= xs[-1]:
        window = [y for x, y in zip(xs, ys, strict=True) if start <= x < start + period]
        peaks.append(round(max(window), 2) if window else float("nan"))
        start += period
    return peaks


def main() -> None:
    args = parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="lakefs-gc-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.world == "moto":
        run_moto(args, workdir)
    else:
        report(*run_demo(args, workdir), args)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", choices=("moto", "demo"), default="moto",
                   help="moto: S3 + SQS on moto, load in its own process (the issue's shape); "
                   "demo: the embedded demo's world (local namespace, directory queue)")  # fmt: skip
    p.add_argument("--minutes", type=float, default=30, help="minutes of load after /readyz")
    p.add_argument("--rate", type=float, default=50, help="object writes per second")
    p.add_argument("--threads", type=int, default=8, help="writer threads (moto: in the load process)")
    p.add_argument("--live-keys", type=int, default=750, help="moto: paths per writer (the live set)")
    p.add_argument("--commit-every", type=float, default=20)
    p.add_argument("--branch-every", type=float, default=120)
    p.add_argument("--inventory-every", type=float, default=600)
    p.add_argument("--compaction-every", default="5m")
    p.add_argument("--retention-days", type=int, default=0, help="moto: the repository's default retention")
    p.add_argument("--grace", default="1m", help="moto: the test server's grace period and the min age")
    p.add_argument("--dedupe-horizon", help="service.dedupe_horizon (default: the service's, 1h)")
    p.add_argument("--keep-reports", help="service.keep_reports (default: the service's, 30d)")
    p.add_argument("--sample-every", type=float, default=30)
    p.add_argument("--batch", type=int, default=2000, help="service.max_messages_per_batch")
    p.add_argument("--warmup", type=float, default=10, help="minutes left out of the slopes")
    p.add_argument("--trace-memory", type=int, metavar="FRAMES",
                   help="run serve with --trace-memory FRAMES and save its /debug/memory "
                   "(allocation sites, growth) every 5 min to <workdir>/memory.txt")  # fmt: skip
    p.add_argument("--workdir", type=Path)
    p.add_argument("--json", type=Path)
    p.add_argument("--png", type=Path, default=Path("soak.png"))
    return p.parse_args()


def tune(config: dict[str, Any], args: argparse.Namespace) -> None:
    """The options common to both worlds."""
    config["service"]["compaction_interval"] = args.compaction_every
    config["service"]["compaction_margin"] = "2m"
    for key in ("dedupe_horizon", "keep_reports"):  # shorter than the run: their plateau shows
        if getattr(args, key):
            config["service"][key] = getattr(args, key)
    config["service"]["max_messages_per_batch"] = args.batch  # a drain ends at this or an empty queue
    # a loaded machine starts Python workers slowly (Spark's default wait is 15 s)
    config.setdefault("spark", {})["conf"] = {"spark.python.authenticate.socketTimeout": "300s"}


def start_service(config: dict[str, Any], workdir: Path, trace_frames: int | None) -> subprocess.Popen[bytes]:
    (workdir / "soak.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    trace = ["--trace-memory", str(trace_frames)] if trace_frames else []
    log = open(workdir / "serve.log", "w")  # noqa: SIM115
    return subprocess.Popen(
        [sys.executable, "-m", "lakefs_gc", "serve", "--config", str(workdir / "soak.yaml"), *trace],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def stop_service(serve: subprocess.Popen[bytes]) -> None:
    serve.send_signal(signal.SIGTERM)
    try:
        serve.wait(timeout=180)
    except subprocess.TimeoutExpired:
        serve.kill()


class Sampler:
    """Reads ``/metrics`` every ``--sample-every`` s; mark and sweep time are per-interval means."""

    def __init__(
        self,
        port: int,
        serve: subprocess.Popen[bytes],
        workdir: Path,
        started: float,
        trace_memory: int | None,
    ) -> None:
        self.port, self.serve, self.workdir, self.started = port, serve, workdir, started
        self.samples: list[dict[str, Any]] = []
        self.text = ""
        self._sums: dict[str, tuple[float, float]] = {}
        self.last_mark = float("nan")
        self.memory_every = 300 if trace_memory else None  # seconds between /debug/memory reports
        self._next_memory = 0.0

    def scrape(self) -> str:
        if self.serve.poll() is not None:
            raise SystemExit(f"serve exited {self.serve.returncode}: see {self.workdir / 'serve.log'}")
        url = f"http://127.0.0.1:{self.port}/metrics"
        self.text = urllib.request.urlopen(url, timeout=10).read().decode()
        return self.text

    def _interval_mean(self, text: str, name: str) -> float:
        s, c = metric(text, f"{name}_sum"), metric(text, f"{name}_count")
        s0, c0 = self._sums.get(name, (0.0, 0.0))
        self._sums[name] = (s, c)
        return (s - s0) / (c - c0) if c > c0 else float("nan")

    def sample(self, phase: str, counts: dict[str, int]) -> None:
        try:
            text = self.scrape()
        except OSError:
            return  # not listening
        row: dict[str, Any] = {"t_s": round(time.monotonic() - self.started), "phase": phase, **counts}
        row["mark_s"] = self._interval_mean(text, "lakefs_gc_mark_duration_seconds")
        row["sweep_s"] = self._interval_mean(text, "lakefs_gc_sweep_duration_seconds")
        if row["mark_s"] == row["mark_s"]:
            self.last_mark = row["mark_s"]
        row["last_mark_s"] = self.last_mark  # the latest interval with a mark, carried forward
        row |= {k: metric(text, sel) * scale for k, (sel, scale) in SERIES.items()}
        for table in STATE_TABLES:
            row[f"st_{table}_mb"] = metric(text, f'lakefs_gc_state_bytes{{table="{table}"}}') / 2**20
        row |= resident_by_kind(self.serve.pid)
        self.samples.append(row)
        print(json.dumps(row), flush=True)
        if self.memory_every and row["t_s"] >= self._next_memory:
            self._next_memory = row["t_s"] + self.memory_every
            self.save_memory_report(row["t_s"])

    def save_memory_report(self, t_s: float) -> None:
        """Append the service's ``/debug/memory`` (its allocation sites and their growth since the
        previous report) to ``memory.txt``."""
        url = f"http://127.0.0.1:{self.port}/debug/memory"
        try:
            text = urllib.request.urlopen(url, timeout=120).read().decode()
        except OSError as e:
            text = f"unavailable: {e}\n"
        with open(self.workdir / "memory.txt", "a") as out:
            out.write(f"==== t = {t_s:.0f} s ====\n{text}\n")


def run_moto(args: argparse.Namespace, workdir: Path) -> None:
    """The issue's shape: moto S3 + SQS, the test server and the load each in its own process."""
    from soak_moto import LoadProcess, LoadShape, final_check, moto_world

    with moto_world(workdir, grace=args.grace, retention_days=args.retention_days) as world:
        world.deliver_inventory()
        port = free_port()
        config = world.service_config(metrics_port=port, min_age=args.grace)
        tune(config, args)
        serve = start_service(config, workdir, args.trace_memory)
        try:
            _wait_ready(port, serve, workdir)
            started = time.monotonic()
            sampler = Sampler(port, serve, workdir, started, args.trace_memory)
            next_inventory = started + args.inventory_every
            shape = LoadShape(args.rate, args.threads, args.live_keys, args.commit_every, args.branch_every)
            with LoadProcess(world.connection, shape, workdir) as load:
                while time.monotonic() - started < args.minutes * 60:
                    time.sleep(args.sample_every)
                    if time.monotonic() >= next_inventory:
                        next_inventory += deliver(world.deliver_inventory, args.inventory_every)
                    sampler.sample("load", {n: load.count(n) for n in LoadProcess.COUNTERS})
                counts = {n: load.count(n) for n in LoadProcess.COUNTERS}
            load_end = time.time()
            print(f"load stopped: {json.dumps(counts)}", flush=True)
            cycles_after(sampler, load_end + parse_seconds(args.grace) + 30, counts)
            verdict = final_check(world, load_end)
            verdict["load"] = counts
            verdict["ingested"] = metric(sampler.text, "lakefs_gc_events_ingested_total")
            verdict["deleted"] = metric(sampler.text, "lakefs_gc_objects_deleted_total")
            report(sampler.samples, verdict, args)  # before the service's shutdown (up to 2 min)
        finally:
            stop_service(serve)


#: glibc's non-main malloc arenas are mappings of up to 64 MiB aligned on 64 MiB (HEAP_MAX_SIZE)
_ARENA_ALIGN = 64 * 2**20


def resident_by_kind(pid: int) -> dict[str, float]:
    """The resident MiB of ``pid`` by kind of mapping, from ``/proc/<pid>/smaps``: ``rss_brk_mb``
    (glibc's main arena, ``[heap]``), ``rss_arena_mb`` (64 MiB-aligned anonymous mappings: glibc's
    thread arenas), ``rss_anon_mb`` (other anonymous memory: large ``mmap`` allocations, Arrow's
    jemalloc, thread stacks) and ``rss_file_mb`` (libraries and mapped files). Which of them grows
    says where to look; empty where there is no ``/proc``."""
    try:
        text = Path(f"/proc/{pid}/smaps").read_text()
    except OSError:
        return {}
    kinds = {"rss_brk_mb": 0.0, "rss_arena_mb": 0.0, "rss_anon_mb": 0.0, "rss_file_mb": 0.0}
    kind = "rss_anon_mb"
    for line in text.splitlines():
        first = line.split(maxsplit=6)
        if "-" in first[0] and not first[0].endswith(":"):
            start = int(first[0].split("-")[0], 16)
            name = first[5] if len(first) > 5 else ""
            kind = ("rss_brk_mb" if name == "[heap]"
                    else "rss_file_mb" if name.startswith("/")
                    else "rss_arena_mb" if start % _ARENA_ALIGN == 0 and not name
                    else "rss_anon_mb")  # fmt: skip
        elif first[0] == "Rss:":
            kinds[kind] += int(first[1]) / 1024
    return kinds


def deliver(delivery: Any, every: float) -> float:
    """Deliver an inventory; seconds until the next one: ``every``, or 60 after a failure (moto,
    saturated by the load, can time a listing out: the harness goes on, the service too)."""
    try:
        print("inventory:", delivery(), flush=True)
    except Exception as e:  # a benchmark harness reports and carries on
        print(f"inventory delivery failed, tried again in 60 s: {e}", flush=True)
        return 60.0
    return every


def parse_seconds(duration: str) -> float:
    from lakefs_gc.durations import parse_duration

    return parse_duration(duration).total_seconds()


def cycles_after(sampler: Sampler, after: float, counts: dict[str, int]) -> None:
    """Until two cycles succeeded after ``after`` (unix s): the second one started after it."""
    deadline, first = time.monotonic() + 900, None
    while time.monotonic() < deadline:
        time.sleep(10)
        sampler.sample("drain", counts)
        last = metric(sampler.text, "lakefs_gc_last_successful_cycle_timestamp_seconds")
        if first is None and last > after:
            first = last
        elif first is not None and last > first:
            return
    print("(no two cycles after the load's end within 15 min: the check may find garbage left)")


def run_demo(args: argparse.Namespace, workdir: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The embedded demo's world (the first runs): local namespace, the test server's directory queue."""
    with demo_setting(workdir) as setting:
        port = free_port()
        config = setting.settings(metrics_port=port, interval="1m", tick="15s")
        tune(config, args)
        serve = start_service(config, workdir, args.trace_memory)
        configuration = _sdk_configuration(setting.connection)
        try:
            _wait_ready(port, serve, workdir)
            started = time.monotonic()
            sampler = Sampler(port, serve, workdir, started, args.trace_memory)
            next_inventory = started + args.inventory_every
            with Load(configuration, workdir, args.rate, args.commit_every, args.branch_every) as load:
                while time.monotonic() - started < args.minutes * 60:
                    time.sleep(args.sample_every)
                    if time.monotonic() >= next_inventory:
                        _deliver_inventory(setting)
                        next_inventory += args.inventory_every
                    sampler.sample("load", {"written": load.written, "errors": load.errors})
                print(f"load: {load.written} writes, {load.errors} errors", flush=True)
        finally:
            stop_service(serve)
        deleted, problems = fates(setting.scenario)
    return sampler.samples, {"story_deleted": deleted, "problems": problems}


def _wait_ready(port: int, serve: subprocess.Popen[bytes], workdir: Path) -> None:
    """Until ``/readyz`` answers 200 (Spark and every query started): the clock starts then."""
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if serve.poll() is not None:
            raise SystemExit(f"serve exited {serve.returncode}: see {workdir / 'serve.log'}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(2)
    raise SystemExit("serve did not become ready in 15 minutes")


def _sdk_configuration(connection: dict[str, str]) -> Any:
    from lakefs_sdk.configuration import Configuration

    return Configuration(
        host=connection["endpoint"],
        username=connection["access_key_id"],
        password=connection["secret_access_key"],
    )


def _deliver_inventory(setting: Any) -> None:
    from lakefs_gc.inventory.generate import generate_delivery
    from lakefs_gc.storage.filesystems import StorageOptions
    from lakefs_gc.storage.locations import parse_location, parse_storage_namespace

    options = StorageOptions(local_root=str(setting.storage_root))
    namespace = parse_storage_namespace(setting.scenario.namespace, local_root=str(setting.storage_root))
    generate_delivery(namespace, options, parse_location(str(setting.inventory_dir.resolve())))


TABLES = [f"st_{t}_mb" for t in STATE_TABLES]
COLUMNS = ["t_s", "written", "rss_mb", "descriptors", "heap_mb", "heap_gc_mb", "state_mb", *TABLES,
           "event_rows", "dedupe_keys", "lag_s", "mark_s", "sweep_s"]  # fmt: skip
TRENDS = ["rss_mb", "rss_brk_mb", "rss_arena_mb", "rss_anon_mb", "rss_file_mb", "heap_gc_mb", "heap_mb",
          "state_mb", *TABLES, "event_rows", "dedupe_keys", "lag_s", "mark_s", "descriptors"]  # fmt: skip


def finite(rows: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    pairs = [(r["t_s"], r[key]) for r in rows if r.get(key) == r.get(key) and key in r]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def report(samples: list[dict[str, Any]], verdict: dict[str, Any], args: Any) -> None:
    print(" ".join(f"{k.removeprefix('st_')[:11]:>11}" for k in COLUMNS))
    for row in samples:
        print(" ".join(f"{row.get(k, 0):>11.1f}" for k in COLUMNS), row.get("phase", ""))
    load = [r for r in samples if r.get("phase", "load") == "load"]
    after = [r for r in load if r["t_s"] >= args.warmup * 60] or load
    slopes = {k: slope(*finite(after, k)) for k in TRENDS}
    print(
        "slope after warm-up, % of mean per 10 min:", json.dumps({k: round(v, 2) for k, v in slopes.items()})
    )
    means = {k: (sum(ys) / len(ys) if ys else float("nan")) for k in TRENDS for ys in [finite(after, k)[1]]}
    print("mean after warm-up:", json.dumps({k: round(v, 2) for k, v in means.items()}))
    # the event table is a sawtooth with the inventory's period (compacted to what the newest
    # snapshot does not say): a slope over two or three teeth measures their phase, the peaks don't
    peaks = {k: period_peaks(after, k, args.inventory_every) for k in TRENDS}
    print(f"maximum per {args.inventory_every:.0f} s after warm-up:", json.dumps(peaks))
    if len(load) > 1:
        span = load[-1]["t_s"] - load[0]["t_s"]
        rate = (load[-1].get("written", 0) - load[0].get("written", 0)) / span if span else 0
        print(f"writes/s between the first and last sample: {rate:.1f}")
    markdown(samples)
    print("verdict:", json.dumps(verdict, default=str))
    if args.json:
        result = {"samples": samples, "slopes": slopes, "peaks": peaks, "verdict": verdict}
        args.json.write_text(json.dumps(result, indent=1, default=str))
    plot(samples, args.png)


def markdown(samples: list[dict[str, Any]]) -> None:
    """Every 5 minutes (and the last sample) as a Markdown table, for bench/README.md."""
    keys = ["t_s", "written", "rss_mb", "descriptors", "heap_gc_mb", "heap_mb", "state_mb", "st_events_mb",
            "st_range_cache_mb", "event_rows", "dedupe_keys", "lag_s", "last_mark_s", "phase"]  # fmt: skip
    print("| " + " | ".join(keys) + " |")
    print("|" + "---:|" * len(keys))
    counts = ("t_s", "written", "descriptors", "event_rows", "dedupe_keys")
    mark = -1
    for i, row in enumerate(samples):
        if row["t_s"] // 300 > mark or i == len(samples) - 1:
            mark = row["t_s"] // 300
            cells = [str(row.get(k, "")) if k == "phase"
                     else f"{row.get(k, 0):,.0f}" if k in counts
                     else f"{row.get(k, 0):.1f}" for k in keys]  # fmt: skip
            print("| " + " | ".join(cells) + " |")


def plot(samples: list[dict[str, Any]], png: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no PNG)")
        return
    keys = ["written", *TRENDS, "sweep_s"]
    fig, axes = plt.subplots((len(keys) + 1) // 2, 2, figsize=(11, 1.6 * ((len(keys) + 1) // 2)), sharex=True)
    for ax, key in zip(axes.flat, keys, strict=False):
        xs, ys = finite(samples, key)
        ax.plot([x / 60 for x in xs], ys, lw=1)
        ax.set_ylabel(key.removeprefix("st_"), fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(png, dpi=60)
    print(f"plot: {png}")


if __name__ == "__main__":
    main()
