"""``lakefs-gc serve`` with no configuration: the embedded demo, as a newcomer runs it.

One real process (its own Spark): it must build the demo setting, collect the story's garbage
with the real 24 h cutoff and grace period, keep every survivor, answer its probes and metrics,
and stop gracefully on SIGTERM with exit status 0.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from lakefs_gc.cli.main import build_parser

pytestmark = pytest.mark.slow


class _Output:
    """The process's stderr, read by a thread: a pipe nobody reads fills up and blocks the writer
    (Spark's shutdown messages alone can fill it)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.lines.append(line)

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                found = re.search(pattern, line)
                if found:
                    return found
            time.sleep(0.5)
        raise AssertionError(f"no {pattern!r} within {timeout}s; output:\n{''.join(self.lines[-40:])}")

    def text(self) -> str:
        self.thread.join(timeout=30)
        return "".join(self.lines)


def _scrape_until(url: str, patterns: list[str], timeout: float = 60) -> str:
    """The metrics once every pattern is in them (the sweep's log line comes before its counters)."""
    deadline = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(url, timeout=10) as answer:
            metrics = answer.read().decode()
        if all(re.search(p, metrics) for p in patterns) or time.monotonic() > deadline:
            return metrics
        time.sleep(1)


def test_serve_without_config_runs_the_demo_and_stops_on_sigterm(tmp_path: Path) -> None:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    cmd = [
        sys.executable,
        "-m",
        "lakefs_gc",
        "serve",
        "--keep",
        str(tmp_path / "demo"),
        "--metrics-port",
        "0",
    ]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    output = _Output(proc)
    try:
        url = output.wait_for(r"metrics on (http://\S+)/metrics", 120).group(1)
        swept = output.wait_for(r"swept mark \S+: (\d+) deleted, (\d+) missing, (\d+) failed", 180)
        assert swept.groups() == ("6", "0", "0")
        with urllib.request.urlopen(f"{url}/readyz", timeout=10) as answer:
            assert answer.status == 200
        inventory = r'lakefs_gc_inventory_deliveries_total\{outcome="ingested"\} 1.0'
        deleted = r'lakefs_gc_objects_deleted_total\{repository="demo"\} 6.0'
        metrics = _scrape_until(f"{url}/metrics", [inventory, deleted])
        assert re.search(inventory, metrics) and re.search(deleted, metrics), metrics
        assert re.search(r'lakefs_gc_events_received_total\{source="local"\} [1-9]', metrics)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    rest = output.text()
    assert "demo check: 6 of 6 garbage objects deleted, all 7 that must survive intact" in rest, rest[-3000:]
    assert (tmp_path / "demo" / "gc.yaml").is_file()  # the settings it ran with, to read and reuse


def test_serve_help_explains_the_service() -> None:
    parser = build_parser()
    serve = parser._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    text = serve.format_help()
    for word in ("--config", "--cycles", "--metrics-port", "/healthz", "sweep_delay", "embedded demo"):
        assert word in text
