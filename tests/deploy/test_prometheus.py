"""A real Prometheus (Debian's, on 127.0.0.1) scrapes a running `lakefs-gc serve` whose lakeFS is
the test server: every query of the Grafana dashboard returns data, and the "no successful cycle"
and "lakeFS API errors" alerts fire while lakeFS answers 503 and resolve once it recovers.

The service runs as operators run it (its own process, its own Spark, a config file) on the demo
repository (garbage of every kind with the real 24 h cutoff; notifications in a local directory
as its queue; an inventory delivery), with cycles every few seconds. Prometheus scrapes every
second and evaluates dashboards/alerts.yaml every second, with the two alerts' windows and `for`
shortened to seconds (nothing else of the rules changes). The metric names the dashboard needs
are read from the running service's /metrics, not from a list here.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from lakefs_gc.inventory.generate import generate_delivery
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_location, parse_storage_namespace
from lakefs_gc.testing.context import ServerSettings
from lakefs_gc.testing.demo import REPOSITORY, build_scenario
from lakefs_gc.testing.faults import Fault
from lakefs_gc.testing.notifications import DirectoryNotifier
from lakefs_gc.testing.server import LakeFSTestServer
from tests.deploy.alerting import ALERTS, METRIC, dashboard_queries, exposed_names

pytestmark = pytest.mark.slow

T = TypeVar("T")
NO_SUCCESS, API_ERRORS = "LakefsGcNoSuccessfulCycle", "LakefsGcLakefsApiErrors"
#: the service's cycle interval here; the rules' "2 x interval" becomes 2 x INTERVAL_S + slack (a
#: healthy run here has at most ~11 s between two successes)
INTERVAL_S = 10
#: (text in the rule, its stand-in) for the two alerts under test; every one must be found
FAST_RULES = {
    NO_SUCCESS: [("2 * 6 * 3600", "2 * 10 + 5"), ("[12h]", "[25s]")],
    API_ERRORS: [("[15m]", "[20s]"), ("offset 15m", "offset 20s")],
}
FAST_FOR = "2s"


def fast_rules(dest: Path) -> Path:
    """dashboards/alerts.yaml with the two alerts' windows and `for` in seconds."""
    doc = yaml.safe_load(ALERTS.read_text())
    for rule in (r for g in doc["groups"] for r in g["rules"] if r["alert"] in FAST_RULES):
        for old, new in FAST_RULES[rule["alert"]]:
            assert old in rule["expr"], f"{rule['alert']}: {old!r} not in its expression any more"
            rule["expr"] = rule["expr"].replace(old, new)
        rule["for"] = FAST_FOR
    dest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 10) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        body = answer.read().decode()
    return json.loads(body) if body.startswith(("{", "[")) else body


def wait_until(condition: Callable[[], T | None], what: str, timeout: float, poll: float = 1.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except OSError:  # not listening yet
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f}s waiting for {what}"
        time.sleep(poll)


# ---- Prometheus ----------------------------------------------------------------------------------


class Prometheus:
    """Prometheus's HTTP API, the parts the test asks."""

    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = _get(f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
        assert answer["status"] == "success", answer
        return list(answer["data"]["result"])

    def alerts(self) -> dict[str, str]:
        """Active alerts: name -> state (pending or firing)."""
        answer = _get(f"{self.url}/api/v1/alerts")
        return {a["labels"]["alertname"]: a["state"] for a in answer["data"]["alerts"]}

    def target_up(self) -> bool:
        return any(s["value"][1] == "1" for s in self.query('up{job="lakefs-gc"}'))


@contextmanager
def prometheus(workdir: Path, target: str, rules: Path) -> Iterator[Prometheus]:
    binary = shutil.which("prometheus")
    assert binary, "prometheus not found: tests/run installs Debian's prometheus package"
    port = _free_port()
    config = workdir / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [{"job_name": "lakefs-gc", "static_configs": [{"targets": [target]}]}],
    }))  # fmt: skip
    log = (workdir / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: proc.poll() is None and _get(f"{url}/-/ready"), "Prometheus to be ready", 60, 0.2)
        yield Prometheus(url)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


# ---- lakeFS (the test server) and the service ----------------------------------------------------


@contextmanager
def lakefs_with_demo(workdir: Path) -> Iterator[tuple[LakeFSTestServer, dict[str, Any]]]:
    """The test server with the demo repository, an inventory of it and its notifications in a
    directory; yields the server and the service's settings (a config file's contents)."""
    storage, events, inventory = workdir / "storage", workdir / "events", workdir / "inventory"
    for d in (storage, events, inventory):
        d.mkdir()
    settings = ServerSettings(notifications=DirectoryNotifier(events))
    with LakeFSTestServer(storage_root=storage, settings=settings) as server:
        scenario = build_scenario(server.sdk_configuration(), storage, now=datetime.now(timezone.utc))
        options = StorageOptions(local_root=str(storage))
        namespace = parse_storage_namespace(scenario.namespace, local_root=str(storage))
        generate_delivery(namespace, options, parse_location(str(inventory)))
        config = {
            # two quick attempts per call: a failing lakeFS fails the mark in well under a second
            "lakefs": {**server.connection_info(), "max_attempts": 2, "retry_base_delay": 0.1,
                       "read_timeout": 10},
            "storage": {"local_root": str(storage)},
            "repositories": [REPOSITORY],
            "service": {
                "state": str(workdir / "state"), "metrics_host": "127.0.0.1", "metrics_port": 0,
                "interval": f"{INTERVAL_S}s", "tick": "1s", "retry_delay": "2s",
                "inventory": str(inventory), "inventory_trigger": "2s",
                "events": {"local": {"type": "directory", "path": str(events)}}, "events_trigger": "2s",
                "shutdown_timeout": "60s",
            },
        }  # fmt: skip
        yield server, config


class _Stderr:
    """The service's stderr, read by a thread (a pipe nobody reads blocks the writer)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.lines.append(line)

    def find(self, pattern: str) -> re.Match[str] | None:
        return next((m for m in (re.search(pattern, ln) for ln in list(self.lines)) if m), None)

    def tail(self) -> str:
        return "".join(self.lines[-40:])


@contextmanager
def serving(config: dict[str, Any], workdir: Path) -> Iterator[tuple[str, subprocess.Popen[str], _Stderr]]:
    """`lakefs-gc serve --config` in its own process; yields its status URL. Stopped with SIGTERM."""
    path = workdir / "gc.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    cmd = [sys.executable, "-m", "lakefs_gc", "serve", "--config", str(path), "--log-format", "json"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    output = _Stderr(proc)

    def started() -> re.Match[str] | None:
        assert proc.poll() is None, f"the service exited with {proc.returncode}:\n{output.tail()}"
        return output.find(r"metrics on (http://\S+)/metrics")

    try:
        yield wait_until(started, "the service's metrics URL", 180).group(1), proc, output
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()


# ---- the test ------------------------------------------------------------------------------------


def test_prometheus_scrapes_the_service_and_the_alerts_fire_and_resolve(tmp_path: Path) -> None:
    with lakefs_with_demo(tmp_path) as (server, config), serving(config, tmp_path) as (url, proc, output):
        target = url.removeprefix("http://")
        with prometheus(tmp_path, target, fast_rules(tmp_path / "alerts.yaml")) as prom:
            try:
                _story(prom, server, url)
            except AssertionError as e:
                raise AssertionError(f"{e}\nservice stderr:\n{output.tail()}") from e
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, output.tail()


def _story(prom: Prometheus, server: LakeFSTestServer, url: str) -> None:
    repo = f'repository="{REPOSITORY}"'
    wait_until(prom.target_up, "Prometheus to scrape the service", 60)
    # healthy: a cycle (mark + sweep) succeeded, and the alerts under test are quiet
    wait_until(lambda: prom.query(f"lakefs_gc_cycles_total{{{repo}}} >= 1"), "a successful cycle", 180)
    active = prom.alerts()
    assert NO_SUCCESS not in active and API_ERRORS not in active, active

    # lakeFS fails every call about the repository: marks fail closed, the alerts fire
    fault = server.faults.inject(
        Fault(path=rf"^/repositories/{REPOSITORY}", status=503, message="down (test)")
    )
    seen: dict[str, set[str]] = {NO_SUCCESS: set(), API_ERRORS: set()}

    def both_firing() -> bool:
        for name, state in prom.alerts().items():
            if name in seen:
                seen[name].add(state)
        return all("firing" in states for states in seen.values())

    wait_until(both_firing, "both alerts to fire while lakeFS fails", 150, 0.5)
    assert server.faults.hits(fault) > 0
    assert prom.query(f'lakefs_gc_cycle_failures_total{{{repo}, phase="mark"}} > 0')

    # lakeFS recovers: the next cycle succeeds, the alerts resolve
    server.faults.clear()
    wait_until(lambda: not ({NO_SUCCESS, API_ERRORS} & set(prom.alerts())), "both alerts to resolve", 150)
    assert prom.query(f"time() - lakefs_gc_last_successful_cycle_timestamp_seconds{{{repo}}} < 30")
    _check_dashboard(prom, url)  # every panel has something to show now, failures and two sweeps included


def _check_dashboard(prom: Prometheus, url: str) -> None:
    """Every dashboard query returns at least one series with a number (not NaN), and every
    metric it names is one the running service exposes."""
    exposed = exposed_names(str(_get(f"{url}/metrics")))
    queries = dashboard_queries()
    missing = {m for _, q in queries for m in METRIC.findall(q)} - exposed
    assert not missing, f"the dashboard queries metrics the service does not expose: {sorted(missing)}"

    def empty() -> list[str]:
        out = []
        for title, expr in queries:
            values = [float(s["value"][1]) for s in prom.query(expr)]
            if not any(not math.isnan(v) for v in values):
                out.append(f"{title}: {expr} -> {values}")
        return out

    wait_until(lambda: not empty(), "every dashboard query to return data", 60)  # rates need two scrapes
