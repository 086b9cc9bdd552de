"""Soak: ``lakefs-gc serve`` for a long time under steady load; is its memory and state flat?

Numbers, not a test. The service runs as its own process (``python -m lakefs_gc serve``) against
the embedded demo's world (:mod:`lakefs_gc.testing.serve_demo`): the lakeFS-compatible test
server, the ``demo`` repository with its story of garbage and survivors, object notifications
written by the test server to a directory (the service's queue) and an inventory delivery of the
namespace. On top of the demo's own writer, load threads keep writing objects through the lakeFS
API (``--rate`` per second), delete some, commit every ``--commit-every`` seconds and replace a
branch every ``--branch-every`` seconds; a new inventory is delivered every ``--inventory-every``
seconds. The service marks every minute and compacts every ``--compaction-every``.

Every ``--sample-every`` seconds ``/metrics`` is read: driver RSS, JVM heap in use, state bytes
per table, event table rows, dedupe keys held, ingest lag, mean mark duration, events ingested.
At the end: the table, the slope of each series after ``--warmup`` (percent per 10 minutes of its
mean), a PNG of each series over time when matplotlib is installed, and the demo story's check
(every garbage object of the story collected, every survivor there).

    python bench/soak.py [--minutes 30] [--rate 50] [--workdir DIR] [--json FILE] [--png FILE]

Deviation from the issue's set-up: the notifications go through the test server's directory
queue, not moto S3 + SQS (the event path after the queue adapter is the same).
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

from lakefs_gc.testing.demo import REPOSITORY  # noqa: E402
from lakefs_gc.testing.serve_demo import demo_setting, fates  # noqa: E402

SERIES = {
    "rss_mb": ("lakefs_gc_driver_rss_bytes", 1 / 2**20),
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


def mark_seconds(text: str) -> float:
    count = metric(text, "lakefs_gc_mark_duration_seconds_count")
    return metric(text, "lakefs_gc_mark_duration_seconds_sum") / count if count else 0.0


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--rate", type=float, default=50, help="object writes per second")
    p.add_argument("--commit-every", type=float, default=20)
    p.add_argument("--branch-every", type=float, default=120)
    p.add_argument("--inventory-every", type=float, default=600)
    p.add_argument("--compaction-every", default="5m")
    p.add_argument("--dedupe-horizon", help="service.dedupe_horizon (default: the service's, 1h)")
    p.add_argument("--keep-reports", help="service.keep_reports (default: the service's, 30d)")
    p.add_argument("--sample-every", type=float, default=30)
    p.add_argument("--batch", type=int, default=2000, help="service.max_messages_per_batch")
    p.add_argument("--warmup", type=float, default=10, help="minutes left out of the slopes")
    p.add_argument("--workdir", type=Path)
    p.add_argument("--json", type=Path)
    p.add_argument("--png", type=Path, default=Path("soak.png"))
    args = p.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="lakefs-gc-soak-"))
    samples: list[dict[str, float]] = []
    with demo_setting(workdir) as setting:
        port = free_port()
        config = setting.settings(metrics_port=port, interval="1m", tick="15s")
        config["service"]["compaction_interval"] = args.compaction_every
        config["service"]["compaction_margin"] = "2m"
        for key in ("dedupe_horizon", "keep_reports"):  # shorter than the run: their plateau shows
            if getattr(args, key):
                config["service"][key] = getattr(args, key)
        config["service"]["max_messages_per_batch"] = args.batch  # a drain ends at this or an empty queue
        # a loaded machine starts Python workers slowly (Spark's default wait is 15 s)
        config["spark"] = {"conf": {"spark.python.authenticate.socketTimeout": "300s"}}
        (workdir / "soak.yaml").write_text(yaml.safe_dump(config))
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        log = open(workdir / "serve.log", "w")  # noqa: SIM115
        serve = subprocess.Popen(
            [sys.executable, "-m", "lakefs_gc", "serve", "--config", str(workdir / "soak.yaml")],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        configuration = _sdk_configuration(setting.connection)
        _wait_ready(port, serve, workdir)
        started = time.monotonic()
        next_inventory = started + args.inventory_every
        try:
            with Load(configuration, workdir, args.rate, args.commit_every, args.branch_every) as load:
                while time.monotonic() - started < args.minutes * 60:
                    time.sleep(args.sample_every)
                    elapsed = time.monotonic() - started
                    if serve.poll() is not None:
                        raise SystemExit(f"serve exited {serve.returncode}: see {workdir / 'serve.log'}")
                    if time.monotonic() >= next_inventory:
                        _deliver_inventory(setting)
                        next_inventory += args.inventory_every
                    try:
                        text = (
                            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10)
                            .read()
                            .decode()
                        )
                    except OSError:
                        continue  # not listening yet
                    row = {"t_s": round(elapsed), "written": load.written, "mark_s": mark_seconds(text)}
                    row |= {k: metric(text, sel) * scale for k, (sel, scale) in SERIES.items()}
                    samples.append(row)
                    print(json.dumps(row), flush=True)
                print(f"load: {load.written} writes, {load.errors} errors", flush=True)
        finally:
            serve.send_signal(signal.SIGTERM)
            try:
                serve.wait(timeout=120)
            except subprocess.TimeoutExpired:
                serve.kill()
        deleted, problems = fates(setting.scenario)
    report(samples, args, deleted, problems)


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


def report(samples: list[dict[str, float]], args: Any, deleted: int, problems: list[str]) -> None:
    keys = ["t_s", "written", "rss_mb", "heap_mb", "heap_gc_mb", "state_mb", "events_mb", "event_rows",
            "dedupe_keys", "lag_s", "mark_s"]  # fmt: skip
    print(" ".join(f"{k:>11}" for k in keys))
    for row in samples:
        print(" ".join(f"{row.get(k, 0):>11.1f}" for k in keys))
    after = [r for r in samples if r["t_s"] >= args.warmup * 60] or samples
    slopes = {k: slope([r["t_s"] for r in after], [r[k] for r in after]) for k in keys[2:]}
    print(
        "slope after warm-up, % of mean per 10 min:", json.dumps({k: round(v, 2) for k, v in slopes.items()})
    )
    print(f"story: {deleted} garbage objects collected; {len(problems)} survivors missing")
    for problem in problems:
        print("  ", problem)
    if args.json:
        args.json.write_text(json.dumps({"samples": samples, "slopes": slopes, "deleted": deleted,
                                         "problems": problems}, indent=1))  # fmt: skip
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no PNG)")
        return
    fig, axes = plt.subplots(len(keys) - 2, 1, figsize=(8, 2 * (len(keys) - 2)), sharex=True)
    for ax, key in zip(axes, keys[2:], strict=True):
        ax.plot([r["t_s"] / 60 for r in samples], [r[key] for r in samples])
        ax.set_ylabel(key)
    axes[-1].set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(args.png)
    print(f"plot: {args.png}")


if __name__ == "__main__":
    main()
