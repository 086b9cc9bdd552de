"""The service's parts without Spark jobs: settings, the status endpoints, and what a GC cycle
decides to do when (with a fake clock and fake mark/sweep ports that record their calls)."""

from __future__ import annotations

import socket
import sys
import threading
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from pyspark.sql import SparkSession

from lakefs_gc.errors import ConfigError, GcError
from lakefs_gc.gc.guards import SweepRefusedError
from lakefs_gc.service.app import GcService
from lakefs_gc.service.cycle import INTERRUPTED, CyclePorts, GcCycle
from lakefs_gc.service.http import StatusServer
from lakefs_gc.service.metrics import Metrics
from lakefs_gc.service.records import CycleRecords
from lakefs_gc.service.settings import RepositorySchedule, ServiceSettings
from lakefs_gc.spark.mark.result import MarkResult
from lakefs_gc.spark.sweep.job import SweepResult
from tests.service.histories import probe, scrape, value

LAKEFS = {"endpoint": "http://127.0.0.1:1/api/v1", "access_key_id": "AKIA", "secret_access_key": "secret"}
T0 = datetime(2026, 11, 1, 6, 0, tzinfo=timezone.utc)
MINUTE = timedelta(minutes=1)


def settings(**service: Any) -> ServiceSettings:
    return ServiceSettings.model_validate({"lakefs": LAKEFS, "repositories": ["a"], "service": service})


# ---- settings ------------------------------------------------------------------------------------


def test_schedules_fill_in_the_service_defaults(tmp_path: Path) -> None:
    s = settings(
        state=str(tmp_path), interval="2h", sweep_delay="30m", tick="5s",
        repositories=[{"name": "b", "interval": "15m", "sweep": False}, {"name": "a", "sweep_delay": "0s"}],
    )  # fmt: skip
    assert s.service.tick == timedelta(seconds=5)
    assert s.schedules() == (
        RepositorySchedule(
            name="b", interval=timedelta(minutes=15), sweep_delay=timedelta(minutes=30), sweep=False
        ),
        RepositorySchedule(name="a", interval=timedelta(hours=2), sweep_delay=timedelta(0), sweep=True),
    )


def test_event_sources_are_validated() -> None:
    queue = {"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/1/q"}
    assert settings(events={"s3-notifications": queue}).service.events["s3-notifications"].format == "s3"
    bad: list[dict[str, Any]] = [
        {"events": {"bad name!": queue}},  # names label metrics and name files
        {"events": {"q": {"type": "sqs"}}},  # no queue_url
        {"events": {"q": {**queue, "queue_name": "x"}}},  # an azure-queue field on an sqs queue
        {"events": {"q": {"type": "kafka", "path": "/x"}}},
        {"metrics_port": 70000},
        {"interval": "soon"},
        {"unknown": 1},
    ]
    for service in bad:
        with pytest.raises((ValidationError, ConfigError)):  # a bad duration is a ConfigError
            settings(**service)


def test_the_service_needs_a_state_directory(spark: SparkSession) -> None:
    with pytest.raises(ConfigError, match=r"service\.state"):
        GcService(settings(), spark)


# ---- /metrics, /healthz, /readyz -----------------------------------------------------------------


def test_status_endpoints_answer_what_the_probes_say() -> None:
    health = {"ok": True}
    metrics = Metrics()
    metrics.objects_deleted.labels("a").inc(3)
    server = StatusServer(
        metrics, host="127.0.0.1", port=0,
        health=lambda: (health["ok"], {"failed_queries": {}}), ready=lambda: (False, {"stopping": True}),
    ).start()  # fmt: skip
    try:
        assert probe(server.url, "/healthz") == (200, {"ok": True, "failed_queries": {}})
        assert probe(server.url, "/readyz") == (503, {"ok": False, "stopping": True})
        health["ok"] = False
        assert probe(server.url, "/healthz")[0] == 503
        assert value(scrape(server.url), "lakefs_gc_objects_deleted_total", repository="a") == 3
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{server.url}/nothing", timeout=5)
        assert missing.value.code == 404
    finally:
        server.stop()


def test_debug_memory_lists_allocation_sites_and_their_growth_when_tracing() -> None:
    """Off without --trace-memory (says how to turn it on); traced, it names the sites holding
    memory and, on the next request, the one that grew."""
    import tracemalloc

    server = _status_server(0)
    was_tracing = tracemalloc.is_tracing()
    try:
        tracemalloc.stop()
        with pytest.raises(urllib.error.HTTPError) as off:
            urllib.request.urlopen(f"{server.url}/debug/memory", timeout=5)
        assert off.value.code == 404 and b"--trace-memory" in off.value.read()

        tracemalloc.start()
        first = _text(server.url, "/debug/memory")
        assert "traced Python heap" in first and "changes since" not in first
        grown = [bytearray(1024) for _ in range(4096)]  # 4 MiB held at this line
        second = _text(server.url, "/debug/memory")
        changes = second.split("changes since the previous report:")[1]
        assert "test_service_units.py" in changes.splitlines()[1], changes  # the largest change
        del grown
    finally:
        if not was_tracing:
            tracemalloc.stop()
        server.stop()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_memory_of_a_thread_goes_back_to_the_system() -> None:
    """What a thread freed stays in its glibc arena while anything above it lives (the soak's
    growing driver); release_free_memory (after every cycle tick) gives those pages back."""
    from lakefs_gc.spark.runtime.memory import release_free_memory

    def anonymous_mib() -> int:
        return next(
            int(line.split()[1]) // 1024 for line in open("/proc/self/status") if line.startswith("RssAnon:")
        )

    held: list[bytes] = []

    def work() -> None:
        blobs = [bytes(1000) + bytes([i % 256]) for i in range(100_000)]  # ~100 MiB from malloc
        held.append(blobs[-1])  # pins the arena's top: free() alone does not shrink it
        del blobs

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    before = anonymous_mib()
    assert release_free_memory()
    assert anonymous_mib() < before - 50, (before, anonymous_mib())


def _text(url: str, path: str) -> str:
    with urllib.request.urlopen(f"{url}{path}", timeout=30) as answer:
        return str(answer.read().decode())


def _status_server(port: int) -> StatusServer:
    return StatusServer(
        Metrics(), host="127.0.0.1", port=port, health=lambda: (True, {}), ready=lambda: (True, {})
    ).start()


def test_a_restart_gets_its_port_back_and_a_taken_port_is_an_error() -> None:
    """Right after a scraped run (its connections in TIME_WAIT) the port is free to bind again;
    a port another process listens on fails with a message, and the service never moves."""
    first = _status_server(0)
    port = first.port
    with socket.create_connection(("127.0.0.1", port)) as scraper:
        scraper.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        while scraper.recv(65536):  # the server closes first: its side of the connection is in TIME_WAIT
            pass
    first.stop()
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # what the old free-port probe did, and why it moved the port
    again = _status_server(port)
    try:
        assert again.port == port and probe(again.url, "/healthz")[0] == 200
        with pytest.raises(ConfigError, match=rf"cannot serve metrics on 127.0.0.1:{port}: .*--metrics-port"):
            _status_server(port)
    finally:
        again.stop()


def test_a_service_is_healthy_but_not_ready_before_it_started(spark: SparkSession, tmp_path: Path) -> None:
    service = GcService(
        settings(state=str(tmp_path / "state"), metrics_host="127.0.0.1", metrics_port=0), spark
    )
    service.status.start()
    try:
        assert probe(service.status.url, "/healthz")[0] == 200
        status, body = probe(service.status.url, "/readyz")
        assert (status, body["started"], body["stopping"]) == (503, False, False)
    finally:
        service.status.stop()


# ---- a GC cycle's decisions ----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, by: timedelta) -> None:
        self.now += by


class FakeGc:
    """Mark and sweep ports that record their calls; a mark marks 3 of 10 listed objects."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.mark_error: BaseException | None = None
        self.sweep_error: Exception | None = None

    def mark(self, repository: str) -> MarkResult:
        self.calls.append("mark")
        if self.mark_error is not None:
            raise self.mark_error
        mark_id = f"m{self.calls.count('mark')}"
        kept = {"committed": {"objects": 5, "bytes": 500}, "identity_twin": {"objects": 2, "bytes": 20}}
        summary = {"num_deleted_objects": 3, "num_deleted_bytes": 300, "num_listed_objects": 10, "kept": kept}
        return MarkResult(repository, mark_id, True, summary, f"reports/{mark_id}", "s3://b/ns")

    def sweep(self, repository: str, mark_id: str) -> SweepResult:
        self.calls.append(f"sweep {mark_id}")
        if self.sweep_error is not None:
            raise self.sweep_error
        return SweepResult(repository, mark_id, deleted=3, missing=0, failed=0, report_location="r")


class Cycle:
    """A cycle of repository ``r`` over a fake clock, its records in ``tmp_path``."""

    def __init__(self, tmp_path: Path, *, interval: timedelta = 10 * MINUTE, **schedule: Any) -> None:
        self.clock, self.gc, self.metrics = Clock(), FakeGc(), Metrics()
        self.stopping = threading.Event()
        self.directory = tmp_path / "batches"
        self.schedule = RepositorySchedule(
            name="r", interval=interval, sweep_delay=schedule.get("sweep_delay", timedelta(0)),
            sweep=schedule.get("sweep", True),
        )  # fmt: skip
        self.batch = -1
        self.cycle = self.restart()

    def restart(self) -> GcCycle:
        """A new process: the records are read again from disk."""
        ports = CyclePorts(self.gc.mark, self.gc.sweep, clock=self.clock)
        self.cycle = GcCycle(
            self.schedule, CycleRecords(self.directory), ports, self.metrics,
            retry_delay=2 * MINUTE, stopping=self.stopping,
        )  # fmt: skip
        return self.cycle

    def tick(self, after: timedelta = MINUTE, batch: int | None = None) -> list[str]:
        """Run a micro-batch ``after`` the previous one; the calls it made."""
        self.clock.advance(after)
        self.batch = self.batch + 1 if batch is None else batch
        before = len(self.gc.calls)
        self.cycle(None, self.batch)  # type: ignore[arg-type]  # the rows mean nothing
        return self.gc.calls[before:]

    def marks(self) -> list[Any]:
        return [m for _, m in self.cycle.records.marks()]

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, {"repository": "r", **labels}) or 0.0


def test_a_mark_is_swept_at_once_and_the_next_waits_for_the_interval(tmp_path: Path) -> None:
    c = Cycle(tmp_path)
    assert c.tick() == ["mark", "sweep m1"]
    assert [c.tick() for _ in range(9)] == [[]] * 9  # minutes 2..10: not due
    assert c.tick() == ["mark", "sweep m2"]  # 10 minutes after the first
    assert [(m.mark_id, m.sweep, m.deleted, m.candidates) for m in c.marks()] == [
        ("m1", "done", 3, 10),
        ("m2", "done", 3, 10),
    ]
    assert c.cycle.attempts == 2
    assert c.metric("lakefs_gc_objects_marked_total") == 6
    assert c.metric("lakefs_gc_objects_deleted_total") == 6
    assert c.metric("lakefs_gc_bytes_deleted_total") == 600
    assert c.metric("lakefs_gc_cycles_total") == 2
    assert c.metric("lakefs_gc_candidate_set_objects") == 10
    assert c.metric("lakefs_gc_objects_kept", reason="identity_twin") == 2
    assert c.metric("lakefs_gc_objects_kept", reason="committed") == 5
    assert c.metric("lakefs_gc_last_successful_cycle_timestamp_seconds") > 0
    assert c.cycle.status() == {"repository": "r", "marks": 2, "last_mark": "m2"}


def test_the_sweep_waits_for_the_sweep_delay_and_a_newer_mark_supersedes(tmp_path: Path) -> None:
    c = Cycle(tmp_path, interval=5 * MINUTE, sweep_delay=7 * MINUTE)
    assert c.tick() == ["mark"]
    assert [c.tick() for _ in range(4)] == [[]] * 4
    assert c.tick() == ["mark"]  # m1 not swept yet (7 minutes): m2 marked 5 minutes after it
    assert c.tick(after=7 * MINUTE) == ["sweep m2", "mark"]  # m2's delay passed; m1 superseded
    assert [(m.mark_id, m.sweep) for m in c.marks()] == [("m1", "superseded"), ("m2", "done"), ("m3", None)]


def test_a_failed_mark_is_retried_after_the_retry_delay(tmp_path: Path) -> None:
    c = Cycle(tmp_path)
    c.gc.mark_error = GcError("lakeFS is down")
    assert c.tick() == ["mark"]
    assert c.tick() == []  # retry_delay is 2 minutes
    c.gc.mark_error = None
    assert c.tick() == ["mark", "sweep m2"]
    first, second = c.marks()
    assert (first.success, first.error, first.sweep) == (False, "lakeFS is down", None)
    assert (second.success, second.sweep) == (True, "done")
    assert c.metric("lakefs_gc_cycle_failures_total", phase="mark") == 1


def test_refused_and_failed_sweeps_are_recorded_and_counted(tmp_path: Path) -> None:
    c = Cycle(tmp_path, interval=MINUTE)
    c.gc.sweep_error = SweepRefusedError("would delete 90% of the namespace")
    assert c.tick() == ["mark", "sweep m1"]
    c.gc.sweep_error = RuntimeError("boom")
    assert c.tick() == ["mark", "sweep m2"]  # a refused mark is never swept again
    assert [(m.sweep, m.sweep_error) for m in c.marks()] == [
        ("refused", "would delete 90% of the namespace"),
        ("failed", "RuntimeError: boom"),
    ]
    assert c.metric("lakefs_gc_cycle_failures_total", phase="sweep") == 2
    assert c.metric("lakefs_gc_cycles_total") == 0


def test_mark_only_repositories_never_sweep(tmp_path: Path) -> None:
    c = Cycle(tmp_path, interval=MINUTE, sweep=False)
    assert c.tick() == ["mark"]
    assert c.tick() == ["mark"]
    assert [m.sweep for m in c.marks()] == ["skipped", "skipped"]
    assert c.metric("lakefs_gc_cycles_total") == 2  # a dry-run cycle succeeds with its mark


def test_a_replayed_batch_continues_where_it_stopped(tmp_path: Path) -> None:
    c = Cycle(tmp_path)
    assert c.tick() == ["mark", "sweep m1"]
    c.restart()
    assert c.tick(after=timedelta(0), batch=0) == []  # finished before the crash: skipped
    # a batch killed during its mark: the record says started, with no outcome
    c.gc.mark_error = KeyboardInterrupt()  # stands for the kill: nothing records an outcome
    with pytest.raises(KeyboardInterrupt):
        c.tick(after=10 * MINUTE)
    assert c.marks()[-1].success is None
    c.gc.mark_error = None
    c.restart()
    assert c.tick(after=timedelta(0), batch=1) == ["mark", "sweep m3"]  # marked again
    assert [(m.mark_id, m.sweep) for m in c.marks()] == [("m1", "done"), ("m3", "done")]


def test_a_killed_mark_whose_batch_is_not_replayed_is_recorded_as_failed(tmp_path: Path) -> None:
    """Killed during its mark, restarted, and the replay of its batch arrived while stopping:
    Spark committed that batch, so the mark's batch never comes again. The next batch closes it."""
    c = Cycle(tmp_path)
    c.gc.mark_error = KeyboardInterrupt()  # the kill: nothing records an outcome
    with pytest.raises(KeyboardInterrupt):
        c.tick()
    c.gc.mark_error = None
    c.restart()
    c.stopping.set()
    assert c.tick(after=timedelta(0), batch=0) == []  # the replay, while stopping: committed, nothing done
    c.stopping.clear()
    c.restart()
    assert c.tick(after=timedelta(0), batch=1) == []  # retry_delay after the killed mark's start
    [killed] = c.marks()
    assert (killed.success, killed.error) == (False, INTERRUPTED)
    assert c.tick(after=2 * MINUTE, batch=2) == ["mark", "sweep m2"]
    assert [(m.success, m.sweep) for m in c.marks()] == [(False, None), (True, "done")]
    assert c.tick(after=MINUTE, batch=3) == []  # nothing is closed twice
    assert len(c.marks()) == 2


def test_nothing_starts_while_stopping(tmp_path: Path) -> None:
    c = Cycle(tmp_path)
    c.stopping.set()
    assert c.tick() == []
    assert not list(c.directory.glob("*.json"))
    c.stopping.clear()
    assert c.tick() == ["mark", "sweep m1"]


def test_a_restart_keeps_the_last_success(tmp_path: Path) -> None:
    c = Cycle(tmp_path)
    assert c.tick() == ["mark", "sweep m1"]
    succeeded = c.metric("lakefs_gc_last_successful_cycle_timestamp_seconds")
    assert succeeded == c.clock.now.timestamp()
    c.gc.sweep_error = RuntimeError("boom")
    c.tick(after=10 * MINUTE)  # a failed sweep is not a success
    c.metrics = Metrics()  # a new process: nothing in memory
    c.restart()
    assert c.metric("lakefs_gc_last_successful_cycle_timestamp_seconds") == succeeded  # not "never"
