"""The ``lakefs-gc demo`` scenario: one small repository with every kind of garbage, and its check.

The repository is built through lakefs-sdk over HTTP, exactly as a user would build it against
lakeFS, with commit dates in the past (lakeFS's commit ``date`` field) and the object files'
modification times set to when they were written in the story, so the real default safety
(min age 24 h, lakeFS's 24 h grace period) applies unchanged. Each object carries what a correct
GC must do with it and why (docs/formats/lakefs-retention.md for retention; lakefs-gc-api.md,
"Safety windows" for the uncommitted rules); after a mark and a sweep, :func:`check_results` compares that
with what really happened on disk, in the mark report and in the sweep report, and also proves nothing
*else* in the namespace was touched.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Mapping, Set
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from lakefs_gc.gc import reasons

if TYPE_CHECKING:
    from lakefs_sdk.configuration import Configuration

REPOSITORY = "demo"
NAMESPACE = f"local://{REPOSITORY}"
DEFAULT_RETENTION_DAYS = 7
MAIN_RETENTION_DAYS = 14
RULES = f"retention: {MAIN_RETENTION_DAYS} days on main, {DEFAULT_RETENTION_DAYS} days elsewhere"

_EXPIRED_ON_MAIN = f"only in expired commits (main keeps {MAIN_RETENTION_DAYS} days)"
_UNREFERENCED = "never committed, and no longer staged"


@dataclass(frozen=True)
class DemoObject:
    """One physical object of the demo repository and the fate a correct GC gives it."""

    name: str
    story: str
    physical_address: str  # relative to the storage namespace: data/<slice>/<xid>
    expect_deleted: bool
    why: str
    #: the mark's classification it must get (:mod:`lakefs_gc.gc.reasons`)
    reason: str

    def __post_init__(self) -> None:
        if self.expect_deleted != (self.reason == reasons.GARBAGE):
            raise ValueError(f"{self.name}: expect_deleted={self.expect_deleted} contradicts {self.reason}")


@dataclass(frozen=True)
class Scenario:
    repository: str
    namespace: str
    namespace_dir: Path  # where the local:// namespace lives on disk
    objects: tuple[DemoObject, ...]


def build_scenario(
    configuration: Configuration, storage_root: Path, *, now: datetime, scratch: Path | None = None
) -> Scenario:
    """Create the ``demo`` repository on a lakeFS(-compatible) server whose local root is ``storage_root``.

    ``now`` is the story's present: commit dates and file times are set relative to it.
    """
    from lakefs_gc.lakefs.sdk import sdk_client

    with (
        sdk_client(configuration) as client,
        tempfile.TemporaryDirectory(dir=scratch) as tmp,
    ):
        builder = _Builder(client, storage_root / REPOSITORY, now, Path(tmp))
        return builder.build()


class _Builder:
    """The story, chapter by chapter. Every upload's file is backdated to its place in the story."""

    def __init__(self, client: object, namespace_dir: Path, now: datetime, tmp: Path) -> None:
        self.sdk = _Sdk(client, REPOSITORY, tmp)
        self.namespace_dir = namespace_dir
        self.now = now
        self.objects: list[DemoObject] = []

    def build(self) -> Scenario:
        sdk = self.sdk
        sdk.create_repository(NAMESPACE)
        sdk.set_rules(DEFAULT_RETENTION_DAYS, {"main": MAIN_RETENTION_DAYS})
        self._history_of_main()
        self._branches()
        self._staging()
        self._legacy_root_object()
        return Scenario(REPOSITORY, NAMESPACE, self.namespace_dir, tuple(self.objects))

    def _history_of_main(self) -> None:
        put, sdk = self.put, self.sdk
        users = put("main", "tables/users.parquet", days=30)
        archive = put("main", "raw/2023-archive.csv", days=30)
        settings_v1 = put("main", "config/settings.json", days=30)
        sdk.commit("main", "initial load", self.days_ago(30))
        sdk.branch("experiment", "main")  # from the initial load; see _branches
        sdk.delete("main", "raw/2023-archive.csv")
        settings_v2 = put("main", "config/settings.json", days=20)
        sdk.commit("main", "drop the archive, new settings", self.days_ago(20))
        sdk.branch("etl-checkpoints", "main", hidden=True)
        last_week = put("main", "raw/last-week.csv", days=10)
        sdk.commit("main", "add last week", self.days_ago(10))
        sdk.delete("main", "raw/last-week.csv")
        sdk.commit("main", "drop last week", self.days_ago(5))
        # main's HEAD is 5 days old; its 14-day walk keeps every commit down to the one of 20 days
        # ago (the first before the threshold: main's state 14 days ago), not the initial load.
        self.garbage(
            "raw/2023-archive.csv", "added 30d ago, deleted on main 20d ago", archive, _EXPIRED_ON_MAIN,
        )  # fmt: skip
        self.garbage(
            "config/settings.json (v1)", "added 30d ago, overwritten on main 20d ago", settings_v1,
            _EXPIRED_ON_MAIN,
        )  # fmt: skip
        self.keep("tables/users.parquet", "added on main 30d ago, never changed", users, "in main's HEAD")
        self.keep("config/settings.json (v2)", "the overwrite of 20d ago", settings_v2, "in main's HEAD")
        self.keep(
            "raw/last-week.csv", "added 10d ago, deleted on main 5d ago", last_week,
            f"in a commit within main's {MAIN_RETENTION_DAYS} days",
        )  # fmt: skip

    def _branches(self) -> None:
        put, sdk = self.put, self.sdk
        scratch = put("experiment", "experiment/scratch.parquet", days=25)
        sdk.commit("experiment", "try something", self.days_ago(25))
        sdk.delete_branch("experiment")
        self.garbage(
            "experiment/scratch.parquet", "committed on experiment 25d ago, branch deleted", scratch,
            f"its commit expired (other branches: {DEFAULT_RETENTION_DAYS} days)",
        )  # fmt: skip
        checkpoint = put("etl-checkpoints", "checkpoints/state.bin", days=15)
        sdk.commit("etl-checkpoints", "checkpoint", self.days_ago(15))
        self.keep(
            "checkpoints/state.bin", "committed on hidden branch etl-checkpoints 15d ago", checkpoint,
            "a branch HEAD (hidden branches count too)",
        )  # fmt: skip
        sdk.branch("hotfix", "main")
        patch = put("hotfix", "fixes/patch.sql", days=3)
        sdk.commit("hotfix", "fix", self.days_ago(3))
        sdk.delete_branch("hotfix")
        self.keep(
            "fixes/patch.sql", "committed on hotfix 3d ago, branch deleted", patch,
            f"its commit is younger than {DEFAULT_RETENTION_DAYS} days",
        )  # fmt: skip

    def _staging(self) -> None:
        put, sdk = self.put, self.sdk
        sdk.branch("ingest", "main")
        batch1 = put("ingest", "incoming/batch-1.csv", days=2)
        sdk.reset("ingest")
        self.garbage("incoming/batch-1.csv", "uploaded to ingest 2d ago, branch reset", batch1, _UNREFERENCED)
        typo = put("main", "incoming/typo.csv", days=2)
        sdk.delete("main", "incoming/typo.csv")
        self.garbage("incoming/typo.csv", "uploaded to main 2d ago, deleted uncommitted", typo, _UNREFERENCED)
        batch2 = put("ingest", "incoming/batch-2.csv", days=2)
        self.keep(
            "incoming/batch-2.csv", "uploaded to ingest 2d ago, not committed", batch2,
            "staged on branch ingest", reasons.UNCOMMITTED,
        )  # fmt: skip
        batch3 = put("ingest", "incoming/batch-3.csv", hours=1)
        sdk.reset("ingest", path="incoming/batch-3.csv")
        self.keep(
            "incoming/batch-3.csv", "uploaded to ingest 1h ago, discarded", batch3,
            "younger than the 24h safety cutoff", reasons.TOO_YOUNG,
        )  # fmt: skip

    def _legacy_root_object(self) -> None:
        """An object of lakeFS's first layout: a GUID at the namespace root, not under data/."""
        name = uuid.uuid5(uuid.NAMESPACE_URL, "lakefs-gc demo legacy object").hex
        self.namespace_dir.mkdir(parents=True, exist_ok=True)
        (self.namespace_dir / name).write_bytes(b"written by a lakeFS from before the data/ layout\n")
        self.backdate(name, self.days_ago(400))
        self.garbage(
            f"{name[:8]}... (root)", "legacy object at the namespace root, 400d old", name,
            "no commit or staging area references it",
        )  # fmt: skip

    # -- helpers ---------------------------------------------------------------------------
    def put(self, branch: str, path: str, *, days: int = 0, hours: int = 0) -> str:
        """Upload ``path`` to ``branch``; its file then looks as old as the story says."""
        # Distinct content per version: lakeFS takes an entry's ETag as its identity, so an upload
        # identical to the committed version would not even change the commit.
        when = self.now - timedelta(days=days, hours=hours)
        physical = self.sdk.upload(branch, path, f"{path} on {branch} at {when.isoformat()}\n".encode())
        prefix = f"local://{self.namespace_dir}/"
        if not physical.startswith(prefix):
            raise AssertionError(f"unexpected physical address {physical!r} (namespace {prefix!r})")
        relative = physical[len(prefix) :]
        self.backdate(relative, when)
        return relative

    def backdate(self, relative: str, when: datetime) -> None:
        stamp = when.timestamp()
        os.utime(self.namespace_dir / relative, (stamp, stamp))

    def days_ago(self, days: int) -> datetime:
        return self.now - timedelta(days=days)

    def garbage(self, name: str, story: str, address: str, why: str) -> None:
        self.objects.append(DemoObject(name, story, address, True, why, reasons.GARBAGE))

    def keep(self, name: str, story: str, address: str, why: str, reason: str = reasons.COMMITTED) -> None:
        self.objects.append(DemoObject(name, story, address, False, why, reason))


class _Sdk:
    """The few lakeFS calls the story needs, through lakefs-sdk over HTTP."""

    def __init__(self, client: object, repository: str, tmp: Path) -> None:
        from lakefs_sdk.api.branches_api import BranchesApi
        from lakefs_sdk.api.commits_api import CommitsApi
        from lakefs_sdk.api.objects_api import ObjectsApi
        from lakefs_sdk.api.repositories_api import RepositoriesApi

        self.repo = repository
        self.tmp = tmp
        self.repositories = RepositoriesApi(client)
        self.branches = BranchesApi(client)
        self.objects = ObjectsApi(client)
        self.commits = CommitsApi(client)

    def create_repository(self, namespace: str) -> None:
        from lakefs_sdk.models.repository_creation import RepositoryCreation

        body = {"name": self.repo, "storage_namespace": namespace, "default_branch": "main"}
        self.repositories.create_repository(RepositoryCreation.from_dict(body))

    def set_rules(self, default_days: int, branches: Mapping[str, int]) -> None:
        from lakefs_sdk.models.garbage_collection_rules import GarbageCollectionRules

        rules = [{"branch_id": b, "retention_days": d} for b, d in branches.items()]
        body = {"default_retention_days": default_days, "branches": rules}
        self.repositories.set_gc_rules(self.repo, GarbageCollectionRules.from_dict(body))

    def branch(self, name: str, source: str, *, hidden: bool = False) -> None:
        from lakefs_sdk.models.branch_creation import BranchCreation

        body = {"name": name, "source": source, "hidden": hidden or None}
        self.branches.create_branch(self.repo, BranchCreation.from_dict(body))

    def delete_branch(self, name: str) -> None:
        self.branches.delete_branch(self.repo, name)

    def upload(self, branch: str, path: str, data: bytes) -> str:
        """Upload and return the object's physical address."""
        file = self.tmp / "content"
        file.write_bytes(data)
        stats = self.objects.upload_object(self.repo, branch, path, content=str(file))
        return str(stats.physical_address)

    def delete(self, branch: str, path: str) -> None:
        self.objects.delete_object(self.repo, branch, path)

    def reset(self, branch: str, *, path: str | None = None) -> None:
        from lakefs_sdk.models.reset_creation import ResetCreation

        body = {"type": "object", "path": path} if path else {"type": "reset"}
        self.branches.reset_branch(self.repo, branch, ResetCreation.from_dict(body))

    def commit(self, branch: str, message: str, date: datetime) -> None:
        from lakefs_sdk.models.commit_creation import CommitCreation

        body = {"message": message, "date": int(date.timestamp())}  # lakeFS's commit date override
        self.commits.commit(self.repo, branch, CommitCreation.from_dict(body))


# -- the check -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """What happened to one demo object, and what is wrong about it (empty when all is well)."""

    object: DemoObject
    deleted: bool
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class DemoCheck:
    outcomes: tuple[Outcome, ...]
    #: problems not tied to one demo object (e.g. another file of the namespace was deleted)
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems and all(o.ok for o in self.outcomes)

    @property
    def failures(self) -> list[str]:
        per_object = [f"{o.object.name}: {p}" for o in self.outcomes for p in o.problems]
        return per_object + list(self.problems)


def snapshot(namespace_dir: Path) -> set[str]:
    """Every file of a local namespace, by namespace-relative key."""
    return {p.relative_to(namespace_dir).as_posix() for p in namespace_dir.rglob("*") if p.is_file()}


def check_results(
    scenario: Scenario,
    *,
    before: Set[str],
    after: Set[str],
    marked: Set[str],
    swept: Mapping[str, str],
    reason_counts: Mapping[str, int],
) -> DemoCheck:
    """Compare each object's expected fate with the namespace on disk and the mark/sweep reports.

    ``before``/``after`` are :func:`snapshot` results around the GC run, ``marked`` the addresses
    of the mark report, ``swept`` the sweep report's outcome per address and ``reason_counts``
    how many listed objects the mark put under each reason (its summary).
    """
    outcomes = tuple(_outcome(o, after, marked, swept) for o in scenario.objects)
    ours = {o.physical_address for o in scenario.objects}
    problems = []
    expected_counts = {r: sum(o.reason == r for o in scenario.objects) for r in reasons.REASONS}
    counts = {r: int(reason_counts.get(r, 0)) for r in reasons.REASONS}
    if counts != expected_counts:
        problems.append(f"the mark classified the listed objects as {counts}, expected {expected_counts}")
    missing = sorted(ours - before)
    if missing:
        problems.append(f"demo objects missing before the GC ran: {missing}")
    stray_deletes = sorted((set(before) - set(after)) - ours)
    if stray_deletes:
        problems.append(f"files outside the demo's objects were deleted: {stray_deletes}")
    stray_marks = sorted(set(marked) - ours)
    if stray_marks:
        problems.append(f"addresses outside the demo's objects were marked: {stray_marks}")
    return DemoCheck(outcomes, tuple(problems))


def _outcome(obj: DemoObject, after: Set[str], marked: Set[str], swept: Mapping[str, str]) -> Outcome:
    address = obj.physical_address
    deleted = address not in after
    problems = []
    if deleted != obj.expect_deleted:
        problems.append(f"expected {fate(obj.expect_deleted)}, was {fate(deleted)}")
    if (address in marked) != obj.expect_deleted:
        problems.append("marked for deletion" if address in marked else "not marked for deletion")
    outcome = swept.get(address)
    if obj.expect_deleted and outcome != "deleted":
        problems.append(f"sweep report says {outcome or 'nothing'} instead of deleted")
    if not obj.expect_deleted and outcome is not None:
        problems.append(f"sweep report lists it ({outcome})")
    return Outcome(obj, deleted, tuple(problems))


def fate(deleted: bool) -> str:
    return "deleted" if deleted else "kept"
