"""lakeFS's commit graph through the API, for the retention cross-check (:mod:`lakefs_gc.gc.retention`).

lakeFS cannot list every commit of a repository, so the graph is the closure under parents of
every branch HEAD (``listBranches`` with ``show_hidden=true``: hidden branches hold data too), every
tagged commit, and the seeds the caller passes (lakeFS's exported active commits, which include the
dangling commits no ref reaches any more). Commits come in pages of ``logCommits`` from each of
those, and ``getCommit`` for what a log did not bring.

Commits are immutable, so they are cached per repository in a :class:`CommitCache`, which outlives
the reader: the service keeps one for its life and hands it to the reader of every cycle (each with
its own client), so it reads a repository's history once, and each mark after that reads only the
new commits (a log stops paging as soon as every parent is known). Without one, a reader caches for
its own life (a batch command: its mark and its sweep's revalidation).

Fail closed (docs/invariants.md, invariant 4): every API failure raises (a :class:`LakeFSError`
from :meth:`LakeFSClient.call`), and a graph that cannot be closed under parents raises
:class:`~lakefs_gc.gc.retention.CommitGraphError`; nothing is ever skipped.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from typing import Any

from lakefs_sdk.api.branches_api import BranchesApi
from lakefs_sdk.api.commits_api import CommitsApi
from lakefs_sdk.api.objects_api import ObjectsApi
from lakefs_sdk.api.refs_api import RefsApi
from lakefs_sdk.api.repositories_api import RepositoriesApi
from lakefs_sdk.api.tags_api import TagsApi

from lakefs_gc.errors import LakeFSError
from lakefs_gc.gc.ports import CommitGraphReader
from lakefs_gc.gc.retention import (
    COMMIT_VERSION_PARENT_SWITCH,
    Commit,
    CommitGraph,
    CommitGraphError,
    CommitMetaranges,
    RetentionCrossCheck,
    RetentionRules,
    active_commits,
    cross_check,
)
from lakefs_gc.gc.twins import StatAnswer
from lakefs_gc.lakefs.answers import HTTP_NOT_FOUND
from lakefs_gc.lakefs.client import LakeFSClient, Operation
from lakefs_gc.lakefs.exports import ActiveCommits as ActiveCommitsExport
from lakefs_gc.lakefs.xid import descending_xid_time

#: page size of listBranches, listTags and logCommits (lakeFS's maximum is 1000)
PAGE = 1000
#: the first logCommits page of a HEAD the cache lacks: a service's next cycle finds most new
#: HEADs one or a few commits past what it holds, and a page of 1000 commits took lakeFS's
#: answer and our parsing 50 ms for each (15 s for a cycle after 300 new commits at the bottom
#: line); a longer history reads its next pages at ``PAGE``
FIRST_LOG_PAGE = 16


@dataclass
class RepositoryCommits:
    """The commits of one repository read so far (id → commit, its metarange id inside), and the
    parents of those that are not read yet (empty once the history read is closed under parents).

    Compact, as a service holds it for its life:
    - one dict: each commit carries its metarange id, which :class:`CommitMetaranges` reads;
    - each id is one string object, interned: a parent id is the object its commit is keyed by,
      and the ids the commits export read (:func:`~lakefs_gc.lakefs.exports.read_commits_csv`,
      interned too) are the graph's;
    - a :class:`CommitGraph` gets the dict itself, not a copy. The graph must not change under
      its holder, so :meth:`snapshot` marks it handed out and the next :meth:`add` copies it
      first (copy on write: a batch mark reads once and never copies).
    """

    commits: dict[str, Commit] = field(default_factory=dict)
    missing: set[str] = field(default_factory=set)
    handed_out: bool = False

    def snapshot(self) -> tuple[dict[str, Commit], Mapping[str, str]]:
        """The commits and their metaranges as read now, which later reads will not change."""
        self.handed_out = True
        return self.commits, CommitMetaranges(self.commits)

    def add(self, raw: Any) -> None:
        """One commit of lakeFS's API, unless it is known already."""
        commit_id = sys.intern(str(raw.id))
        if commit_id in self.commits:
            return
        if self.handed_out:
            self.commits, self.handed_out = dict(self.commits), False
        commit = to_commit(raw, commit_id)
        self.commits[commit_id] = commit
        self.missing.discard(commit_id)
        self.missing.update(p for p in commit.parents if p not in self.commits)


class CommitCache:
    """Commits read from lakeFS, per repository, for as long as the holder keeps it.

    Never invalidated (a commit id names its content). Its size is the repositories' histories as
    read (29,797 commits hold 14.2 MiB, the interpreter's intern table's growth included: ~0.5 KB
    each; bench/README.md, "20M's history: the commit graph in one dict, the metaranges written
    in batches (2026-11-30)"), not the holder's uptime.
    Readers of different repositories may run at once (the service's cycles run in threads); one
    repository is read by one reader at a time.
    """

    def __init__(self) -> None:
        self._repositories: dict[str, RepositoryCommits] = {}
        self._lock = threading.Lock()

    def of(self, repository: str) -> RepositoryCommits:
        with self._lock:
            return self._repositories.setdefault(repository, RepositoryCommits())

    def __len__(self) -> int:
        with self._lock:
            return sum(len(r.commits) for r in self._repositories.values())


class LakeFSCommitGraph:
    """A :class:`~lakefs_gc.gc.ports.CommitGraphReader` on a :class:`LakeFSClient`, with its cache."""

    def __init__(self, client: LakeFSClient, *, page: int = PAGE, cache: CommitCache | None = None) -> None:
        self._client = client
        api = client.sdk
        self._branches = BranchesApi(api)
        self._tags = TagsApi(api)
        self._refs = RefsApi(api)
        self._commits = CommitsApi(api)
        self._repositories = RepositoriesApi(api)
        self._objects = ObjectsApi(api)
        self._page = page
        self._cache = cache if cache is not None else CommitCache()
        #: API calls made (the tests check that a second read of a history makes few)
        self.calls = 0

    def commit_graph(self, repository: str, seeds: Collection[str]) -> CommitGraph:
        branches = dict(self._pages("list branches", repository, self._list_branches))
        tags = dict(self._pages("list tags", repository, self._list_tags))
        rules = self.rules(repository)
        known = self._cache.of(repository)
        for seed in sorted({*branches.values(), *tags.values(), *seeds}):
            self._close(repository, known, seed)
        commits, metaranges = known.snapshot()
        return CommitGraph(commits=commits, branches=branches, rules=rules, metaranges=metaranges)

    def rules(self, repository: str) -> RetentionRules:
        """The repository's retention rules (``getGCRules``)."""
        rules = self._call(
            "get gc rules",
            repository,
            lambda: self._repositories.get_gc_rules(
                repository, _request_timeout=self._client.request_timeout
            ),
        )
        branch_days = {b.branch_id: int(b.retention_days) for b in rules.branches or []}
        return RetentionRules(int(rules.default_retention_days), branch_days)

    def served_address(self, repository: str, branch: str, path: str) -> StatAnswer:
        """What ``branch`` serves at ``path`` now (``statObject``, staged entry first), for the
        identity-twin guard. A 404 is ``absent`` only once the branch is known to exist or to be
        gone; anything else is ``unknown``, which keeps the object (docs/invariants.md, invariant 6)."""
        try:
            stats = self._call(
                "stat object",
                repository,
                partial(self._stat, repository, branch, path),
                f"{branch}/{path}",
            )
        except LakeFSError as e:
            if e.status != HTTP_NOT_FOUND:
                return StatAnswer.unknown(str(e))
            return self._absent_or_unknown(repository, branch, str(e))
        return StatAnswer.at(str(stats.physical_address))  # as lakeFS spells it: the caller relativises

    def _absent_or_unknown(self, repository: str, branch: str, detail: str) -> StatAnswer:
        try:
            branches = dict(self._pages("list branches", repository, self._list_branches))
        except LakeFSError as e:
            return StatAnswer.unknown(f"{detail}; and listing branches failed: {e}")
        return StatAnswer.absent(detail if branch in branches else f"branch {branch!r} is gone")

    def _stat(self, repository: str, branch: str, path: str) -> Any:
        return self._objects.stat_object(
            repository, branch, path, presign=False, _request_timeout=self._client.request_timeout
        )

    # ---- the closure under parents -------------------------------------------------------------

    def _close(self, repository: str, known: RepositoryCommits, seed: str) -> None:
        """Bring ``seed`` and all its ancestors into the cache: its log, then ``getCommit``."""
        if seed in known.commits and not known.missing:
            return
        if seed not in known.commits:
            for page in self._log_pages(repository, seed):
                for raw in page:
                    known.add(raw)
                if seed in known.commits and not known.missing:
                    return  # every parent of every known commit is known: the seed's history is here
        while known.missing:
            commit_id = min(known.missing)
            raw = self._call(
                "get commit",
                repository,
                lambda c=commit_id: self._commits.get_commit(  # type: ignore[misc]
                    repository, c, _request_timeout=self._client.request_timeout
                ),
                detail=commit_id,
            )
            if raw.id != commit_id:
                raise CommitGraphError(f"lakeFS get commit {commit_id} answered commit {raw.id}")
            known.add(raw)
        if seed not in known.commits:
            raise CommitGraphError(f"commit {seed} of repository {repository!r} is not in its own log")

    # ---- pages ----------------------------------------------------------------------------------

    def _log_pages(self, repository: str, ref: str) -> Iterator[list[Any]]:
        after, amount = "", min(FIRST_LOG_PAGE, self._page)
        while True:
            log = partial(self._log, repository, ref, after, amount)
            answer = self._call("log commits", repository, log, ref)
            yield list(answer.results)
            if not answer.pagination.has_more:
                return
            after, amount = _next_offset(answer, f"log of {ref}"), self._page

    def _log(self, repository: str, ref: str, after: str, amount: int) -> Any:
        return self._refs.log_commits(
            repository, ref, after=after, amount=amount, _request_timeout=self._client.request_timeout
        )

    def _list_branches(self, repository: str, after: str) -> Any:
        return self._branches.list_branches(
            repository, after=after, amount=self._page, show_hidden=True,
            _request_timeout=self._client.request_timeout,
        )  # fmt: skip

    def _list_tags(self, repository: str, after: str) -> Any:
        return self._tags.list_tags(
            repository, after=after, amount=self._page, _request_timeout=self._client.request_timeout
        )

    def _pages(
        self, operation: Operation, repository: str, fetch: Callable[[str, str], Any]
    ) -> Iterator[tuple[str, str]]:
        """``(ref id, commit id)`` of every page of a ref listing."""
        after = ""
        while True:
            answer = self._call(operation, repository, partial(fetch, repository, after))
            for ref in answer.results:
                yield str(ref.id), str(ref.commit_id)
            if not answer.pagination.has_more:
                return
            after = _next_offset(answer, operation)

    def _call(self, operation: Operation, repository: str, fn: Callable[[], Any], detail: str = "") -> Any:
        self.calls += 1
        return self._client.call(operation, repository, fn, detail=detail)


def to_commit(raw: Any, commit_id: str) -> Commit:
    """A :class:`Commit` from the API's ``Commit`` (``commit_id``: its id, interned by the caller).
    A missing ``version`` is read as the current one (lakeFS sends it since commits have had
    versions; only its legacy merges differ). Parent and metarange ids are interned (see
    :class:`RepositoryCommits`)."""
    version = raw.version if raw.version is not None else COMMIT_VERSION_PARENT_SWITCH
    created = datetime.fromtimestamp(int(raw.creation_date), tz=timezone.utc)
    parents = tuple(sys.intern(str(p)) for p in raw.parents or ())
    metarange = sys.intern(str(raw.meta_range_id or ""))
    return Commit(commit_id, created, parents, int(version), metarange)


def _next_offset(answer: Any, what: str) -> str:
    offset = answer.pagination.next_offset
    if not offset:
        raise CommitGraphError(f"lakeFS {what}: has_more without a next_offset")
    return str(offset)


def retention_now(start: datetime, export_run_id: str) -> datetime:
    """The ``now`` of the cross-check: the earlier of the mark's start and lakeFS's own clock.

    lakeFS names the commits export with a descending xid of its clock (docs/formats/lakefs-storage.md,
    "xids and slices") and reads its clock for the walk just after, so the run id dates lakeFS's
    ``now`` to the second, from below. An earlier ``now`` means earlier thresholds and so more
    active commits: with clocks apart the cross-check errs towards keeping. A run id that is not an
    xid leaves the mark's start.
    """
    try:
        lakefs_clock = descending_xid_time(export_run_id)
    except ValueError:
        return start
    return min(start, lakefs_clock)


@dataclass(frozen=True)
class CheckedCommits:
    """The cross-check's verdict on one commits export: what to read besides lakeFS's metaranges."""

    check: RetentionCrossCheck
    #: metaranges of the commits only the documented rule keeps that lakeFS's export does not list
    extra_metaranges: tuple[str, ...]
    now: datetime
    commits_read: int
    #: the graph read, for the identity-twin guard (branch HEADs and their metaranges)
    graph: CommitGraph


def cross_check_export(
    graph: CommitGraphReader,
    repository: str,
    exported: ActiveCommitsExport,
    *,
    export_run_id: str,
    start: datetime,
) -> CheckedCommits:
    """lakeFS's exported active commits checked against the documented rule; the union is kept.

    Commits without a metarange (the initial empty commit) reference nothing and are left out of
    both sides. Any failure to read the graph raises: the mark fails closed.
    """
    seeds = [c.commit_id for c in exported.commits]
    read = graph.commit_graph(repository, seeds)
    now = retention_now(start, export_run_id)
    ours = active_commits(read.commits, read.branches, read.rules, now).commits
    ours = frozenset(c for c in ours if read.metaranges.get(c))
    check = cross_check(set(seeds), ours)
    known = set(exported.metarange_ids)
    extra = sorted({read.metaranges[c] for c in check.kept_beyond_lakefs} - known)
    return CheckedCommits(check, tuple(extra), now, len(read.commits), read)
