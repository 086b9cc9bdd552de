"""Shared helpers of the service's end-to-end tests: a repository history with the fate of every
object it wrote, the service's own records, and its metrics as Prometheus serves them.

A :class:`History` drives a repository through lakefs-sdk (over HTTP, as a user would) and writes
down, for each physical object, whether a correct collector must delete it (garbage) or keep it
(live: readable through lakeFS, or unreferenced but younger than the cutoff). The tests compare
that with the bucket at the end, so nothing is taken from the service's own reports on trust.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

import pyarrow.parquet as pq
from prometheus_client.parser import text_string_to_metric_families

from lakefs_gc.service.app import GcService
from lakefs_gc.service.settings import ServiceSettings
from lakefs_gc.spark.ingest.events.table import recorded_parts
from lakefs_gc.spark.report.layout import ReportDir, part_files
from lakefs_gc.spark.report.read import read_summary
from tests.testing.sdk import Lakefs

T = TypeVar("T")
Labels = tuple[tuple[str, str], ...]
Samples = dict[tuple[str, Labels], float]

#: the collector's min age in these tests (and the test server's grace period): objects become
#: garbage within seconds, and an object younger than this is still provably kept
MIN_AGE_S = 5


# ---- the history ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Upload:
    """One object written through lakeFS: where it lives and what it holds."""

    branch: str
    path: str
    content: bytes
    address: str  # relative to the storage namespace (data/<slice>/<id>)
    written: datetime  # just before the upload: the object is no older than ``now - written``


@dataclass(frozen=True)
class Fate:
    """What a correct collector does with an upload, and why."""

    upload: Upload
    garbage: bool
    why: str
    ref: str | None = None  # where lakeFS still serves it (branch or commit); None: unreferenced


@dataclass
class History:
    """A repository's history as the tests write it, with every object's expected fate."""

    lakefs: Lakefs
    repo: str
    namespace: str
    fates: dict[str, Fate] = field(default_factory=dict)  # by address
    uploads: list[Upload] = field(default_factory=list)

    def create(self, default_retention_days: int = 1) -> History:
        self.lakefs.create_repo(self.repo, self.namespace)
        self.lakefs.set_rules(self.repo, default_retention_days)
        return self

    def put(self, branch: str, path: str) -> Upload:
        content = f"{path} on {branch}, upload {len(self.uploads)}\n".encode()
        before = _now()
        stats = self.lakefs.upload(self.repo, branch, path, content)
        upload = Upload(branch, path, content, self.relative(stats.physical_address), before)
        self.uploads.append(upload)
        return upload

    def commit(self, branch: str, message: str, *, days_ago: float) -> str:
        """Commit ``branch`` dated ``days_ago`` (lakeFS's commit date override): retention rules
        count in days, so an expired commit must be dated in the past."""
        date = int((_now() - timedelta(days=days_ago)).timestamp())
        return str(self.lakefs.commit(self.repo, branch, message, date=date).id)

    def delete(self, branch: str, path: str) -> None:
        self.lakefs.delete(self.repo, branch, path)

    def branch(self, name: str, source: str) -> None:
        self.lakefs.branch(self.repo, name, source)

    def relative(self, physical_address: str) -> str:
        prefix = self.namespace.rstrip("/") + "/"
        assert physical_address.startswith(prefix), (physical_address, prefix)
        return physical_address[len(prefix) :]

    # -- expectations

    def garbage(self, upload: Upload, why: str) -> None:
        self.fates[upload.address] = Fate(upload, True, why)

    def live(self, upload: Upload, why: str, *, ref: str | None = None) -> None:
        self.fates[upload.address] = Fate(upload, False, why, ref or upload.branch)

    def young(self, upload: Upload, why: str) -> None:
        """Unreferenced, but younger than the cutoff of the marks that saw it: kept."""
        self.fates[upload.address] = Fate(upload, False, why)

    @property
    def garbage_addresses(self) -> set[str]:
        return {a for a, f in self.fates.items() if f.garbage}

    def problems(self, present: set[str]) -> list[str]:
        """Every object whose fate differs from the expectation, given the namespace's keys."""
        unknown = [u.address for u in self.uploads if u.address not in self.fates]
        out = [f"upload of {a} has no expected fate (a test bug)" for a in unknown]
        for address, fate in sorted(self.fates.items()):
            there = address in present
            if fate.garbage and there:
                out.append(f"garbage not deleted: {fate.upload.path}@{fate.upload.branch} ({fate.why})")
            if not fate.garbage and not there:
                out.append(f"live object deleted: {fate.upload.path}@{fate.upload.branch} ({fate.why})")
        return out

    def unreadable(self) -> list[str]:
        """Live objects that lakeFS no longer serves with their content."""
        out = []
        for fate in self.fates.values():
            if fate.garbage or fate.ref is None:
                continue
            up = fate.upload
            try:
                body = bytes(self.lakefs.objects.get_object(self.repo, fate.ref, up.path))
            except Exception as e:  # an SDK error names the status; report them all at once
                out.append(f"{up.path}@{fate.ref}: {type(e).__name__}: {e}")
                continue
            if body != up.content:
                out.append(f"{up.path}@{fate.ref}: content {body[:40]!r} is not {up.content[:40]!r}")
        return out


def _now() -> datetime:
    return datetime.now(timezone.utc)


# ---- stories every end-to-end test tells ---------------------------------------------------------


def expired_commits(h: History) -> str:
    """main: an overwrite and a delete whose old versions only expired commits hold (retention 1 day;
    the third commit, 8 days old, is main's state at the threshold and stays). Returns that commit."""
    a1, b = h.put("main", "tables/a"), h.put("main", "tables/b")
    h1 = h.put("main", "keep/h1")
    h.commit("main", "load", days_ago=10)
    a2 = h.put("main", "tables/a")
    h.delete("main", "tables/b")
    h.commit("main", "overwrite a, delete b", days_ago=9)
    h2 = h.put("main", "keep/h2")
    head = h.commit("main", "add h2", days_ago=8)
    h.garbage(a1, "overwritten on main, only in an expired commit")
    h.garbage(b, "deleted on main, only in an expired commit")
    h.live(h1, "in main's HEAD")
    h.live(a2, "the overwrite, in main's HEAD")
    h.live(h2, "in main's HEAD")
    return head


def deleted_branch(h: History, name: str = "exp") -> None:
    """A branch whose only commit is 5 days old (retention 1 day), then deleted."""
    h.branch(name, "main")
    x = h.put(name, f"{name}/x")
    h.commit(name, "experiment", days_ago=5)
    h.lakefs.branches.delete_branch(h.repo, name)
    h.garbage(x, "committed on a deleted branch, its commit expired")


def staging(h: History, branch: str = "ingest") -> None:
    """Uploads reset or deleted from staging (garbage), staged overwrites, and staged survivors."""
    h.branch(branch, "main")
    reset = h.put(branch, "in/1")
    h.lakefs.reset(h.repo, branch)
    staged = h.put(branch, "in/2")
    first = h.put("main", "staged/o")
    second = h.put("main", "staged/o")
    typo = h.put("main", "staged/typo")
    h.delete("main", "staged/typo")
    h.garbage(reset, "uploaded, then its branch was reset")
    h.garbage(first, "overwritten in staging before any commit")
    h.garbage(typo, "uploaded, then deleted uncommitted")
    h.live(staged, "staged")
    h.live(second, "the staged overwrite")


def recent_commit(h: History, held: str) -> None:
    """A new HEAD within retention: the old HEAD ``held`` becomes main's state at the threshold,
    so what it holds and the new HEAD does not stays live (readable at ``held``)."""
    old = next(f for f in h.fates.values() if f.upload.path == "tables/a" and f.ref == "main")
    a3 = h.put("main", "tables/a")
    h.commit("main", "overwrite a again", days_ago=0.05)
    h.live(old.upload, "overwritten in a commit within retention: the previous HEAD keeps it", ref=held)
    h.live(a3, "in main's HEAD")


def orphan(h: History, path: str) -> Upload:
    """Uploaded to main, then deleted before any commit: unreferenced from the start."""
    upload = h.put("main", path)
    h.delete("main", path)
    return upload


# ---- the service ---------------------------------------------------------------------------------


def service_settings(
    connection: dict[str, str],
    state: Path,
    repositories: list[str],
    *,
    storage: dict[str, Any],
    events: dict[str, dict[str, Any]],
    inventory: str | None = None,
    interval: str = "3s",
) -> ServiceSettings:
    """Short ages and fast triggers: cycles every few seconds, garbage within :data:`MIN_AGE_S`."""
    age = f"{MIN_AGE_S}s"
    service: dict[str, Any] = {
        "state": str(state),
        "metrics_host": "127.0.0.1",
        "metrics_port": 0,
        "tick": "1s",
        "interval": interval,
        "retry_delay": "2s",
        "events": events,
        "events_trigger": "1s",
        "inventory_trigger": "1s",
        "shutdown_timeout": "120s",
    }
    if inventory is not None:
        service["inventory"] = inventory
    return ServiceSettings.model_validate(
        {
            "lakefs": connection,
            "storage": storage,
            # most of these namespaces is garbage: the fraction guard would refuse the sweeps
            "gc": {"min_age": age, "unsafe_min_age": age, "max_delete_fraction": 1.0},
            "spark": {"parallelism": 2},
            "repositories": repositories,
            "service": service,
        }
    )


@contextmanager
def running(service: GcService) -> Iterator[GcService]:
    """Start the service; whatever happens, stop its queries at the end (they share the session)."""
    try:
        service.start()
        yield service
    finally:
        service.stop()


def wait_for(
    condition: Callable[[], T | None],
    what: str,
    service: GcService,
    *,
    timeout: float = 90,
    poll: float = 0.5,
) -> T:
    """Poll ``condition`` until it returns something truthy; fail early if a query died."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        for query in service.queries:
            error = query.exception()
            assert error is None and query.isActive, f"query {query.name} died: {error}"
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f}s waiting for {what}"
        time.sleep(poll)


def pause_cycles(service: GcService) -> None:
    """No new cycle step starts (the graceful stop's first phase); wait out the running one.

    The event and inventory queries keep running: what the cycles wrote still arrives.
    """
    service.stopping.set()
    deadline = time.monotonic() + 120
    for repo in service.repositories.values():
        assert repo.cycle is not None
        assert repo.cycle.busy.acquire(timeout=max(0.0, deadline - time.monotonic())), "a cycle never ended"
        repo.cycle.busy.release()


def resume_cycles(service: GcService) -> None:
    service.stopping.clear()


# ---- what the service recorded -------------------------------------------------------------------


def mark_records(service: GcService, repo: str) -> list[dict[str, Any]]:
    """The repository's mark records (``<state>/cycles/<repo>/batches/*.json``), oldest first."""
    directory = service.state_dir / "cycles" / repo / "batches"
    batches = [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]
    return [m for b in sorted(batches, key=lambda b: b["batch_id"]) for m in b["marks"]]


def swept_marks(service: GcService, repo: str) -> list[dict[str, Any]]:
    return [m for m in mark_records(service, repo) if m.get("sweep") == "done"]


def failures(service: GcService, repo: str) -> list[str]:
    marks = mark_records(service, repo)
    errors = [f"mark: {m['error']}" for m in marks if m.get("success") is False]
    return errors + [f"sweep: {m['sweep_error']}" for m in marks if m.get("sweep_error")]


def mark_summary(service: GcService, repo: str, mark_id: str) -> dict[str, Any]:
    """The mark's ``summary.json`` in the repository's storage namespace."""
    return dict(read_summary(_report(service, repo, mark_id)).body)


def marked_addresses(service: GcService, repo: str, mark_id: str) -> set[str]:
    """The addresses in the mark's ``deleted/`` report."""
    report = _report(service, repo, mark_id)
    fs, _ = report.filesystem()
    out: set[str] = set()
    for path in part_files(report, "deleted"):
        with fs.open_input_file(path) as f:
            out.update(str(a) for a in pq.read_table(f, columns=["address"]).column(0).to_pylist())
    return out


def _report(service: GcService, repo: str, mark_id: str) -> ReportDir:
    return ReportDir(service.repositories[repo].namespace, mark_id, service.settings.storage)


class Marks:
    """The service's marks of one repository with their summaries (each read once, when swept)."""

    def __init__(self, service: GcService, repo: str) -> None:
        self.service, self.repo = service, repo
        self._summaries: dict[str, dict[str, Any]] = {}

    def swept(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(record, summary) of every mark whose sweep is done, oldest first."""
        out = []
        for record in swept_marks(self.service, self.repo):
            mark_id = record["mark_id"]
            if mark_id not in self._summaries:
                self._summaries[mark_id] = mark_summary(self.service, self.repo, mark_id)
            out.append((record, self._summaries[mark_id]))
        return out

    def find(
        self, wanted: Callable[[dict[str, Any], dict[str, Any]], bool]
    ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The newest swept mark ``wanted(record, summary)`` accepts."""
        assert not failures(self.service, self.repo), failures(self.service, self.repo)
        return next((m for m in reversed(self.swept()) if wanted(*m)), None)


def one_cycle(service: GcService, marks: Marks, after: datetime) -> tuple[dict[str, Any], dict[str, Any]]:
    """Resume the paused cycles for the first mark started after ``after``, and pause them again
    while it runs (no later mark starts). Returns its (record, summary) once it is swept."""
    resume_cycles(service)
    started = wait_for(
        lambda: next(
            (r for r in mark_records(service, marks.repo) if datetime.fromisoformat(r["started"]) > after),
            None,
        ),
        f"a mark started after {after.isoformat()}",
        service,
        poll=0.1,
    )
    pause_cycles(service)
    return wait_for(lambda: marks.find(lambda r, s: r["started"] == started["started"]), "its sweep", service)


def wait_older(service: GcService, upload: Upload) -> None:
    """Until ``upload`` is older than the min age (with a second to spare): the next mark may
    collect it."""
    old_enough = upload.written + timedelta(seconds=MIN_AGE_S + 1)
    wait_for(lambda: _now() > old_enough, f"{upload.path} to be old enough", service)


def event_stored(service: GcService, address: str, kind: str = "created") -> bool:
    """Whether the service's event table holds a ``kind`` event of ``address`` (what a mark reads).

    Waiting for this, not for the ingested count to grow, is what says the next mark sees the
    object: the count also grows with notifications still arriving for earlier writes and sweeps.
    """
    table = service.maintenance.event_table
    assert table is not None, "the service has no event source"
    fs, base = table.filesystem()
    for relative in recorded_parts(table):
        with fs.open_input_file(f"{base}/{relative}") as f:
            rows = pq.read_table(f, columns=["address", "kind"]).to_pylist()
        if {"address": address, "kind": kind} in rows:
            return True
    return False


def from_inventory(summary: dict[str, Any], delivery: str | None = None) -> bool:
    """Whether the mark's candidates were the candidate set on an inventory baseline
    (of ``delivery``, a manifest path, if given)."""
    c = summary.get("candidates", {})
    if (c.get("source"), c.get("baseline")) != ("candidate-set", "inventory"):
        return False
    return delivery is None or str(c.get("delivery", "")).endswith(delivery.split("://")[-1])


# ---- metrics and probes --------------------------------------------------------------------------


def scrape(url: str) -> Samples:
    """``GET <url>/metrics`` as ``{(sample name, sorted labels): value}``."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): float(s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value (0 when absent: a counter nobody incremented is not exported yet)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every sample of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= set(ls))


def probe(url: str, path: str) -> tuple[int, dict[str, Any]]:
    """``GET <url><path>``: status and JSON body (a 503 is an answer, not an error)."""
    try:
        with urllib.request.urlopen(f"{url}{path}", timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
