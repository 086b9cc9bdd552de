"""Differential test: ``lakefs-gc run`` deletes exactly the reference model's garbage set.

Histories are built through lakefs-sdk against the test server with the random history generator of
``tests/testing/test_retention_property.py`` (branches from random refs, a hidden branch, uploads,
deletes, past-dated commits, merges incl. squash, resets, branch deletions, tags, random GC rules),
plus client-written objects (``getPhysicalAddress``, linked or abandoned), stray files a GC must
collect (legacy root objects, sharded-layout orphans) and files it must not (``dummy``, ``_lakefs/``,
a file directly under ``data/``). Most files are then backdated; a random subset stays fresh.

The expected set comes from ``tests/gc/reference_gc.py`` (the API and the disk only). After the run,
the files that disappeared, the ``deleted/`` report and the sweep report are all that set; every
referenced object still reads back through the API with its bytes.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import re
import secrets
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from lakefs_sdk.models.commit_creation import CommitCreation
from lakefs_sdk.models.merge import Merge
from lakefs_sdk.models.staging_location import StagingLocation
from lakefs_sdk.models.staging_metadata import StagingMetadata

from lakefs_gc.spark.mark import twins_driver
from lakefs_gc.testing.context import ServerSettings
from lakefs_gc.testing.server import LakeFSTestServer
from lakefs_gc.testing.trees import RangeSplit
from tests.gc.reference_gc import Model, build_model, namespace_files, relative_address
from tests.testing.sdk import Lakefs
from tests.testing.test_retention_property import NOW, NOW_TS, PATHS, Clock, History, Rules, Shared

#: a minute or more of work (``-m 'not slow'`` leaves it out of a quick run)
pytestmark = pytest.mark.slow

DAY = 86400
MIN_AGE_SECONDS = 3600
# File ages (seconds before the run) keep a margin around the 1 h cutoff for the time the run takes.
FRESH_AGES = st.integers(min_value=0, max_value=50 * 60)
OLD_AGES = st.integers(min_value=70 * 60, max_value=60 * DAY)
AGES = st.one_of(OLD_AGES, OLD_AGES, FRESH_AGES)  # two thirds old; shrinks towards old
OLD = 2 * DAY  # every file whose age a history does not choose: _lakefs/, dummy, scripted objects


@dataclass
class Env:
    shared: Shared
    server: LakeFSTestServer

    @property
    def lakefs(self) -> Lakefs:
        return self.shared.lakefs

    @property
    def storage_root(self) -> Path:
        return self.shared.storage_root


# Small pages, ranges and slices, so that a few objects already span several of each: the GC must read
# every page of the uncommitted dump, every range of a metarange and list every slice.
SETTINGS = ServerSettings(
    uncommitted_page_entries=2,
    uncommitted_page_branches=2,
    range_split=RangeSplit(min_entries=1, raggedness=2, max_entries=2),
    slice_objects=3,
)


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    """One test server with the fixed clock for all examples; each history gets its own repository."""
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve()
        with (
            LakeFSTestServer(storage_root=root, clock=clock, settings=SETTINGS) as server,
            server.sdk_client() as client,
        ):
            yield Env(Shared(Lakefs(client), root, clock, itertools.count()), server)


# -- histories -----------------------------------------------------------------------------------------


@dataclass
class Built:
    """A repository ready for GC: what the reference needs plus files whose age is fixed by the scenario."""

    repo: str
    root: Path
    created: list[str]
    rules: Rules
    ages: dict[str, int] = field(default_factory=dict)  # key -> seconds; OLD for the others
    must_delete: set[str] = field(default_factory=set)  # scenario's own expectations of the model
    must_keep: set[str] = field(default_factory=set)


def write_file(root: Path, key: str, data: bytes) -> None:
    path = root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def fake_xid() -> str:
    return "".join(secrets.choice("0123456789abcdefghijklmnopqrstuv") for _ in range(20))


class GcHistory(History):
    """The retention property's history generator, plus what only a GC cares about."""

    def __init__(self, shared: Shared, data: st.DataObject) -> None:
        super().__init__(shared, data)
        self.root = shared.storage_root / self.repo
        self.ages: dict[str, int] = {}

    def step(self, operation: str) -> None:
        """One operation, then an age for each object it wrote (at most one, so draws follow the history)."""
        getattr(self, f"op_{operation}")()
        new = [k for k in namespace_files(self.root) if not k.startswith("_lakefs/") and k not in self.ages]
        assert len(new) <= 1, new
        for key in new:
            self.ages[key] = self.draw(AGES, f"age of {key}")

    def op_client_write(self) -> None:
        """A client writes to a ``getPhysicalAddress`` (``data/<slice>/<xid>,<sig>``) and may link it."""
        branch, path = self._branch(), self.draw(st.sampled_from(PATHS), "path")
        location = self.lakefs.staging.get_physical_address(self.repo, branch, path)
        key = relative_address(location.physical_address, self.root)
        assert key is not None and "," in key, location.physical_address
        data = self.draw(st.binary(min_size=1, max_size=8), "content")
        write_file(self.root, key, data)
        if self.draw(st.booleans(), "link"):
            metadata = StagingMetadata(
                staging=StagingLocation(physical_address=location.physical_address),
                checksum="etag",
                size_bytes=len(data),
            )
            self.lakefs.staging.link_physical_address(self.repo, branch, path, metadata)

    def op_strays(self) -> None:
        """Files no lakeFS entry names: a legacy root object and a sharded-layout orphan (both garbage)."""
        legacy, sharded = secrets.token_hex(16), f"data/!ab/c/{fake_xid()}/{fake_xid()}"
        for key in (legacy, sharded):
            write_file(self.root, key, b"stray")
            self.ages[key] = self.draw(AGES, "age of a stray")


# Weighted towards what moves physical addresses in and out of references.
OPERATIONS = (
    *["upload"] * 6,
    *["commit"] * 5,
    *["branch"] * 3,
    *["delete"] * 2,
    *["merge"] * 2,
    "merge_and_delete",
    *["delete_branch"] * 2,
    "reset",
    "tag",
    "hidden_branch",
    *["client_write"] * 2,
    "strays",
)


def random_history(env: Env, data: st.DataObject) -> Built:
    history = GcHistory(env.shared, data)
    history.op_rules()
    history.op_hidden_branch()  # a hidden branch in every history: its staging must be honoured
    for _ in range(data.draw(st.integers(min_value=6, max_value=25), label="operations")):
        history.step(data.draw(st.sampled_from(OPERATIONS), label="operation"))
    return Built(history.repo, history.root, history.created, history.rules, history.ages)


class Script:
    """A fixed history written against the API; records what the scenario itself expects."""

    def __init__(self, env: Env, name: str, rules: Rules) -> None:
        self.lakefs = env.lakefs
        self.repo = env.shared.new_repo(name)
        self.built = Built(
            self.repo,
            env.storage_root / self.repo,
            [self.lakefs.branches.get_branch(self.repo, "main").commit_id],
            rules,
        )
        self.lakefs.set_rules(self.repo, rules.default_days, dict(rules.branch_days))

    def upload(self, branch: str, path: str, *, fresh: bool = False, data: bytes | None = None) -> str:
        content = data if data is not None else f"{branch}:{path}:{time.time_ns()}".encode()
        stats = self.lakefs.upload(self.repo, branch, path, content)
        key = relative_address(stats.physical_address, self.built.root)
        assert key is not None
        if fresh:
            self.built.ages[key] = 0
        return key

    def commit(self, branch: str, days_ago: float) -> str:
        body = CommitCreation(message=f"{days_ago} days ago", var_date=int(NOW_TS - days_ago * DAY))
        commit_id = self.lakefs.commits.commit(self.repo, branch, body).id
        self.built.created.append(commit_id)
        return commit_id

    def expect(self, *, keep: list[str], garbage: list[str]) -> None:
        self.built.must_keep.update(keep)
        self.built.must_delete.update(garbage)


def hidden_branch_only(env: Env) -> Built:
    """Objects reachable only through a hidden branch: staged there, or committed there long ago."""
    s = Script(env, "hidden", Rules(7, {}))
    s.lakefs.branch(s.repo, "h1", "main", hidden=True)
    overwritten = s.upload("h1", "x")
    committed = s.upload("h1", "x")
    s.commit("h1", 40)  # the HEAD of a hidden branch is active however old
    staged = s.upload("h1", "only-on-hidden")
    s.expect(keep=[committed, staged], garbage=[overwritten])
    return s.built


def staged_then_reset(env: Env) -> Built:
    """Staged objects dropped by a reset or a delete are garbage once old; a fresh one survives."""
    s = Script(env, "reset", Rules(7, {}))
    s.lakefs.branch(s.repo, "b1", "main")
    old = s.upload("b1", "a")
    fresh = s.upload("b1", "b", fresh=True)
    s.lakefs.reset(s.repo, "b1")
    deleted = s.upload("main", "c")
    s.lakefs.delete(s.repo, "main", "c")
    s.expect(keep=[fresh], garbage=[old, deleted])
    return s.built


def deleted_branch(env: Env) -> Built:
    """Deleted branches: an old dangling HEAD expires, a recent one stays, a merged one lives on in main."""
    s = Script(env, "deleted", Rules(7, {}))
    for name in ("b1", "b2", "b3"):
        s.lakefs.branch(s.repo, name, "main")
    old = s.upload("b1", "x")
    s.commit("b1", 30)
    recent = s.upload("b2", "y")
    s.commit("b2", 2)
    merged = s.upload("b3", "z")
    s.commit("b3", 30)
    merge = s.lakefs.refs.merge_into_branch(s.repo, "b3", "main", merge=Merge(message="merge b3"))
    s.built.created.append(merge.reference)
    for name in ("b1", "b2", "b3"):
        s.lakefs.branches.delete_branch(s.repo, name)
    s.expect(keep=[recent, merged], garbage=[old])
    return s.built


def overwrite_in_expired_history(env: Env) -> Built:
    """One path overwritten along main: versions only in expired commits go, the rest stay."""
    s = Script(env, "overwrite", Rules(7, {"main": 7}))
    versions = []
    for days_ago in (30, 20, 10, 1):
        versions.append(s.upload("main", "a"))
        s.commit("main", days_ago)
    late = s.upload("main", "late")
    s.commit("main", 25)  # dated before its parent: HEAD's parent, active because HEAD is recent
    s.lakefs.delete(s.repo, "main", "late")
    s.commit("main", 0.5)
    staged = s.upload("main", "a")
    # active: HEAD, the 25-day commit (its child is recent), the 10-day commit (the 1-day commit's
    # parent, first before the threshold); the 1-day commit is not, but its version lives on in the
    # 25-day commit. The 30- and 20-day versions are only in expired commits.
    s.expect(keep=[versions[2], versions[3], late, staged], garbage=[versions[0], versions[1]])
    return s.built


SCENARIOS: dict[str, Callable[[Env], Built]] = {
    f.__name__: f
    for f in (hidden_branch_only, staged_then_reset, deleted_branch, overwrite_in_expired_history)
}


# -- ages, the reference and the run -------------------------------------------------------------------


def add_untouchables(built: Built) -> None:
    """Files the GC must never delete however old: root ``dummy``, ``_lakefs/`` and a file under ``data/``."""
    write_file(built.root, "dummy", b"legacy marker")
    write_file(built.root, f"_lakefs/stray-{fake_xid()}", b"not lakeFS data")
    write_file(built.root, "data/staged_object", b"directly under data/")


def run_gc(env: Env, repo: str) -> list[dict[str, Any]]:
    from lakefs_gc.cli.main import main

    info = env.server.connection_info()
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(
                [
                    "run",
                    "--repo", repo,
                    "--yes",
                    "--lakefs-endpoint", info["endpoint"],
                    "--lakefs-access-key-id", info["access_key_id"],
                    "--lakefs-secret-access-key", info["secret_access_key"],
                    "--local-root", str(env.storage_root),
                    "--unsafe-min-age", "1h",
                    "--output", "json",
                    "--parallelism", "2",
                    "--max-delete-fraction", "1",  # small random repositories: often mostly garbage
                ]
            )  # fmt: skip
    finally:  # the progress lines reach the test's captured stderr even when main raises
        sys.stderr.write(err.getvalue())
    # the error's own line first: a CI shows the end of a long assertion message cut short
    last = "\n".join(err.getvalue().splitlines()[-6:])
    assert rc == 0, f"lakefs-gc run exited {rc}; its last lines:\n{last}\nits output: {out.getvalue()}"
    return [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]


def read_parquet_dir(path: Path) -> list[dict[str, Any]]:
    assert path.is_dir(), f"missing report {path}"
    return pq.read_table(path).to_pylist()  # type: ignore[no-any-return]


def check_run(env: Env, built: Built, model: Model, expected: set[str], before: dict[str, int]) -> None:
    """Run the GC once and compare everything it did with the reference."""
    bytes_before = {a: (built.root / a).read_bytes() for a in model.references.addresses}
    lines = run_gc(env, built.repo)
    assert [line.get("command") for line in lines] == ["mark", "sweep"], lines
    mark, sweep = lines
    mark_id = mark["mark_id"]
    assert mark["success"] is True and mark["repository"] == built.repo and sweep["mark_id"] == mark_id

    after = namespace_files(built.root)
    disappeared = before.keys() - after.keys()
    report = built.root / "_lakefs" / "retention" / "gc" / "unified" / mark_id
    marked = [row["address"] for row in read_parquet_dir(report / "deleted")]
    swept = read_parquet_dir(report / "swept")
    wrongly_deleted, left_behind = disappeared - expected, expected - disappeared
    assert not wrongly_deleted and not left_behind, (
        f"deleted but not garbage: {sorted(wrongly_deleted)} "
        f"(referenced: {sorted(wrongly_deleted & model.references.addresses)}); "
        f"garbage left behind: {sorted(left_behind)}"
    )
    # An identical re-upload staged over a committed path is in neither of lakeFS's exports: the
    # mark's identity-twin guard keeps it (docs/invariants.md, invariant 6), so nothing is tolerated.
    deleted = expected
    assert sorted(marked) == sorted(deleted), "deleted/ report"
    assert {r["address"]: r["outcome"] for r in swept} == dict.fromkeys(deleted, "deleted"), swept
    assert len(swept) == len(deleted)
    assert (sweep["deleted"], sweep["missing"], sweep["failed"]) == (len(deleted), 0, 0), sweep
    summary = json.loads((report / "summary.json").read_text())
    assert summary["run_id"] == mark_id and summary["success"] is True, summary
    assert summary["num_deleted_objects"] == len(deleted), summary

    for address, readings in model.references.readings.items():
        for reading in readings:
            data = env.lakefs.objects.get_object(built.repo, reading.ref, reading.path)
            assert data == bytes_before[address], f"{reading} ({address}) reads back other bytes"


def prepare(built: Built) -> dict[str, int]:
    """Add the files a GC must never touch, set every file's age; return the namespace before the run."""
    add_untouchables(built)
    now = time.time()
    for key in namespace_files(built.root):
        age = built.ages.get(key, OLD)
        if age:
            os.utime(built.root / key, (now - age, now - age))
    return namespace_files(built.root)


# -- the tests -----------------------------------------------------------------------------------------


def note_event(message: str) -> None:
    """A hypothesis event when run by hypothesis (the fixed-history tests call :func:`differential` too)."""
    if currently_in_test_context():
        event(message)


def differential(env: Env, built: Built) -> Model:
    """Age the files, compute the reference, run the GC and compare; return the model."""
    before = prepare(built)
    model = build_model(env.lakefs, built.repo, built.root, created=built.created, rules=built.rules, now=NOW)
    expected = model.expected_deleted(cutoff_ns=time.time_ns() - MIN_AGE_SECONDS * 1_000_000_000)
    assert built.must_delete <= expected, "the reference disagrees with the scenario"
    assert not built.must_keep & expected, "the reference disagrees with the scenario"
    check_run(env, built, model, expected, before)
    if expected:
        note_event("garbage collected")
    if model.listed.keys() - model.references.addresses - expected:
        note_event("fresh garbage kept")
    if model.references.restaged_identical:
        note_event("identical re-upload staged over a committed path: kept by the twin guard")
    return model


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), scenario=st.none())
@example(data=None, scenario="hidden_branch_only")
@example(data=None, scenario="staged_then_reset")
@example(data=None, scenario="deleted_branch")
@example(data=None, scenario="overwrite_in_expired_history")
def test_run_deletes_exactly_the_reference_garbage(
    env: Env, spark: Any, data: st.DataObject | None, scenario: str | None
) -> None:
    """After ``lakefs-gc run`` the deleted set is the reference's: nothing live deleted, nothing old left.
    A random history's identity-twin guard is planned either way, on the driver as a small mark's
    is, or with Spark as a large one's (its bound on the marked objects set to none)."""
    with pytest.MonkeyPatch.context() as patch:
        if scenario is not None:
            built = SCENARIOS[scenario](env)
        else:
            assert data is not None
            built = random_history(env, data)
            if data.draw(st.booleans(), label="the twin guard planned with Spark"):
                patch.setattr(twins_driver, "DRIVER_MARKED", 0)
        differential(env, built)
    if scenario == "overwrite_in_expired_history":  # a second run finds nothing more to delete
        survivors = namespace_files(built.root).keys()
        assert run_gc(env, built.repo)[1]["deleted"] == 0
        assert namespace_files(built.root).keys() >= survivors


def test_identical_reupload_over_a_committed_path_stays_readable(
    env: Env, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same bytes uploaded again over a committed path get a new address, visible on the branch.

    lakeFS's ``DiffUncommitted`` compares entries by identity (size, etag, metadata, content type; not
    the address), so ``prepare_gc_uncommitted`` leaves this staged entry out, and the new address is in
    no commit. A GC driven only by lakeFS's two exports deletes it (as lakeFS's Scala GC would); reading
    the path on the branch then fails (410) for as long as the entry stays staged.
    """
    s = Script(env, "restage", Rules(7, {}))
    committed = s.upload("main", "a", data=b"same bytes")
    s.commit("main", 30)
    restaged = s.upload("main", "a", data=b"same bytes")
    s.expect(keep=[committed, restaged], garbage=[])
    model = differential(env, s.built)
    assert model.references.restaged_identical == {restaged}
    summary = last_summary(env, s.built)
    assert summary["kept"]["identity_twin"] == {"objects": 1, "bytes": len(b"same bytes")}
    assert summary["identity_twins"]["live"] == 1 and summary["identity_twins"]["released"] == 0
    # the mark's progress says where the classification ends and what the guard decided
    said = capsys.readouterr().err
    assert re.search(r"classified: [1-9][0-9]* garbage before the identity-twin guard", said), said
    assert re.search(r"identity twins: 1 live, 0 kept unresolved, 0 released; [0-9]+ objects ruled out", said)


def test_identical_reupload_then_reset_is_collected(env: Env, spark: Any) -> None:
    """A staged identical re-upload dropped by a reset is real garbage: the twin guard's stat says the
    branch serves the committed address again, so the object is released and collected."""
    s = Script(env, "restage-reset", Rules(7, {}))
    committed = s.upload("main", "a", data=b"same bytes")
    s.commit("main", 30)
    restaged = s.upload("main", "a", data=b"same bytes")
    s.lakefs.reset(s.repo, "main")
    s.expect(keep=[committed], garbage=[restaged])
    differential(env, s.built)
    twins = last_summary(env, s.built)["identity_twins"]
    assert (twins["released"], twins["live"], twins["kept"]) == (1, 0, 0), twins


def last_summary(env: Env, built: Built) -> dict[str, Any]:
    """The summary.json of the newest mark of ``built.repo`` (descending xids: the smallest name)."""
    unified = built.root / "_lakefs" / "retention" / "gc" / "unified"
    newest = min(unified.iterdir(), key=lambda p: p.name)
    return json.loads((newest / "summary.json").read_text())  # type: ignore[no-any-return]
