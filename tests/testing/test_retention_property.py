"""The server's active-commits CSV against an independent reference, through lakefs-sdk
(docs/formats/lakefs-retention.md).

Random repository histories are built over HTTP against the test server: branches from random refs
(branches, tags, full or abbreviated commit IDs), a hidden branch, uploads, deletes, commits with past
dates that need not be monotonic along a branch, merges (also squash merges, and merge commits dated in
the past through the server clock), resets, branch deletions, tags and random GC rules. The commit graph
is then read back through the API only, and the reference below computes the active set from it. It is
written from docs/formats/lakefs-retention.md and the lakeFS sources it cites, not from
``lakefs_gc.testing.retention``:

* starting points: every branch HEAD (hidden ones included) merged, by commit ID, with the ancestry
  leaves (commits that are nobody's first parent); a leaf that is a HEAD is emitted once, as the branch;
* thresholds ``now - days``: the branch's own rule for a HEAD, the default rule for a leaf;
* a leaf is walked through a synthetic child created at the leaf's own creation time;
* the processed short cut: ``processed[p] <= threshold`` stops the walk *before* judging the child;
* activity is strict: a parent is active iff its child was created strictly after the threshold.

The processed short cut makes the commit-ID order matter at fork points;
``test_fork_point_outcome_follows_commit_id_order`` builds that case through the API in both orders.
"""

from __future__ import annotations

import contextlib
import csv
import io
import itertools
import tempfile
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import lakefs_sdk
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from lakefs_sdk.exceptions import ApiException
from lakefs_sdk.models.branch_creation import BranchCreation
from lakefs_sdk.models.commit_creation import CommitCreation
from lakefs_sdk.models.merge import Merge
from lakefs_sdk.models.tag_creation import TagCreation

from lakefs_gc.storage.locations import parse_location
from lakefs_gc.testing.server import LakeFSTestServer
from tests.testing.sdk import Lakefs

UTC = timezone.utc
NOW = datetime(2026, 5, 17, 12, 0, 0, tzinfo=UTC)  # whole seconds: "now - k days" is a possible commit date
NOW_TS = int(NOW.timestamp())
DAY = 86400
PATHS = ("a", "b", "c/d", "c/e")
CSV_HEADER = ["commit_id", "expired", "metarange_id"]


class Clock:
    """The server clock: ``NOW`` except while a step dates a merge commit in the past."""

    def __init__(self) -> None:
        self.at = NOW

    def __call__(self) -> datetime:
        return self.at


@dataclass
class Shared:
    """One server for the module (a server takes ~0.5 s to stop); every history gets its own repository."""

    lakefs: Lakefs
    storage_root: Path
    clock: Clock
    repos: Iterator[int]

    def new_repo(self, prefix: str) -> str:
        repo = f"{prefix}-{next(self.repos)}"
        self.lakefs.create_repo(repo, f"local://{repo}")
        return repo


@contextlib.contextmanager
def serving_shared() -> Iterator[tuple[Shared, LakeFSTestServer]]:
    """The test server with the fixed clock in a temporary root, reached through lakefs-sdk."""
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve()
        with (
            LakeFSTestServer(storage_root=root, clock=clock) as server,
            server.sdk_client() as client,
        ):
            yield Shared(Lakefs(client), root, clock, itertools.count()), server


@pytest.fixture(scope="module")
def shared() -> Iterator[Shared]:
    """The test server with the fixed clock, reached through lakefs-sdk (one for all examples)."""
    with serving_shared() as (shared, _):
        yield shared


# -- the reference (lakefs-retention.md), independent of lakefs_gc.testing.retention ----------------


@dataclass(frozen=True)
class Node:
    """A commit as the API shows it."""

    created: datetime
    parents: tuple[str, ...]
    metarange: str

    @property
    def main_parent(self) -> str | None:
        return self.parents[0] if self.parents else None


@dataclass(frozen=True)
class Rules:
    default_days: int
    branch_days: Mapping[str, int]


def gc_starting_points(
    nodes: Mapping[str, Node], branches: Mapping[str, str], *, reverse_ties: bool = False
) -> Iterator[tuple[str, str | None]]:
    """``GCStartingPointIterator``: (commit, branch or None) merged from two commit-ID-sorted streams.

    Branches sharing a HEAD are ordered by name (``reverse_ties`` flips it); lakeFS's ``sort.Slice``
    leaves that order unspecified, and the property test checks that it does not matter.
    """
    by_head = sorted(branches.items(), key=lambda kv: kv[0], reverse=reverse_ties)
    by_head.sort(key=lambda kv: kv[1])  # stable: keeps the name order among equal HEADs
    first_parents = {n.main_parent for n in nodes.values() if n.main_parent is not None}
    leaves = sorted(cid for cid in nodes if cid not in first_parents)
    b = leaf = 0
    while b < len(by_head) or leaf < len(leaves):
        if leaf == len(leaves) or (b < len(by_head) and by_head[b][1] <= leaves[leaf]):
            name, head = by_head[b]
            b += 1
            if leaf < len(leaves) and leaves[leaf] == head:
                leaf += 1  # the leaf is this branch's HEAD: emitted once, with the branch
            yield head, name
        else:
            yield leaves[leaf], None
            leaf += 1


def reference_active(
    nodes: Mapping[str, Node],
    branches: Mapping[str, str],
    rules: Rules,
    now: datetime,
    *,
    reverse_ties: bool = False,
) -> set[str]:
    """``GetGarbageCollectionCommits``: starting points in commit-ID order, with the processed short cut."""
    processed: dict[str, datetime] = {}
    active: set[str] = set()
    for commit_id, branch in gc_starting_points(nodes, branches, reverse_ties=reverse_ties):
        if branch is None:
            threshold = now - timedelta(days=rules.default_days)
            # synthetic child: created with the dangling commit, whose main parent is that commit
            child_created, parent = nodes[commit_id].created, commit_id
        else:
            threshold = now - timedelta(days=rules.branch_days.get(branch, rules.default_days))
            active.add(commit_id)
            processed[commit_id] = threshold
            child_created, parent = nodes[commit_id].created, nodes[commit_id].main_parent
        while parent is not None:
            seen = processed.get(parent)
            if seen is not None and seen <= threshold:
                break
            if child_created > threshold:
                active.add(parent)
            processed[parent] = threshold
            child_created, parent = nodes[parent].created, nodes[parent].main_parent
    return active


def naive_active(
    nodes: Mapping[str, Node], branches: Mapping[str, str], rules: Rules, now: datetime
) -> set[str]:
    """The declarative rule without the short cut: every starting point walked to the root."""
    active = set(branches.values())
    for commit_id, branch in gc_starting_points(nodes, branches):
        days = rules.default_days if branch is None else rules.branch_days.get(branch, rules.default_days)
        threshold = now - timedelta(days=days)
        child_created = nodes[commit_id].created
        parent = commit_id if branch is None else nodes[commit_id].main_parent
        while parent is not None:
            if child_created > threshold:
                active.add(parent)
            child_created, parent = nodes[parent].created, nodes[parent].main_parent
    return active


# -- reading the repository back through the API -------------------------------------------------------


def paged(call: Callable[..., Any], *args: Any, amount: int, **kwargs: Any) -> Iterator[Any]:
    after = ""
    while True:
        page = call(*args, after=after, amount=amount, **kwargs)
        yield from page.results
        if not page.pagination.has_more:
            return
        assert page.pagination.next_offset, "has_more without a next_offset"
        after = page.pagination.next_offset


@dataclass(frozen=True)
class Graph:
    nodes: dict[str, Node]
    branches: dict[str, str]  # hidden included
    tags: dict[str, str]


def read_graph(lakefs: Lakefs, repo: str, created: Collection[str]) -> Graph:
    """All commits of the repository through the API: logs of every ref plus ``get_commit`` closure.

    lakeFS cannot list all commits, so commits only reachable from deleted branches come from
    ``created``, the IDs the test got back from its commits and merges.
    """
    branches = {
        r.id: r.commit_id for r in paged(lakefs.branches.list_branches, repo, amount=3, show_hidden=True)
    }
    visible = {r.id for r in paged(lakefs.branches.list_branches, repo, amount=1000)}
    tags = {r.id: r.commit_id for r in paged(lakefs.tags.list_tags, repo, amount=3)}
    raw: dict[str, lakefs_sdk.Commit] = {}
    logs: dict[str, set[str]] = {}
    for ref in [*branches, *tags]:
        logs[ref] = set()
        for c in paged(lakefs.refs.log_commits, repo, ref, amount=4):
            assert c.id not in logs[ref], f"log of {ref} repeats {c.id}"
            logs[ref].add(c.id)
            raw[c.id] = c
    pending = [
        *created,
        *branches.values(),
        *tags.values(),
        *(p for c in list(raw.values()) for p in c.parents),
    ]
    while pending:
        cid = pending.pop()
        if cid not in raw:
            raw[cid] = lakefs.commits.get_commit(repo, cid)
            assert raw[cid].id == cid
            pending.extend(raw[cid].parents)
    assert set(created) <= raw.keys()
    nodes = {}
    for cid, c in raw.items():
        assert (c.version or 0) >= 1, f"commit {cid} is a legacy commit (version {c.version})"
        nodes[cid] = Node(datetime.fromtimestamp(c.creation_date, tz=UTC), tuple(c.parents), c.meta_range_id)
    # The graph is consistent: each log is exactly the ancestry (all parents) of its ref.
    for ref, ids in logs.items():
        head = branches.get(ref) or tags[ref]
        assert ids == _ancestry(nodes, head), f"log_commits({ref}) is not the ancestry of {head}"
    assert visible <= branches.keys()
    assert branches.keys() - visible == {b for b in branches if b.startswith("h")}, "hidden branches"
    return Graph(nodes, branches, tags)


def _ancestry(nodes: Mapping[str, Node], head: str) -> set[str]:
    seen, stack = {head}, [head]
    while stack:
        for p in nodes[stack.pop()].parents:
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return seen


def server_csv(lakefs: Lakefs, repo: str, storage_root: Path) -> list[dict[str, str]]:
    export = lakefs.internal.prepare_garbage_collection_commits(repo)
    location = export.gc_commits_location
    assert location.startswith("local://"), location
    path = Path(parse_location(location, local_root=str(storage_root)).key)
    assert path.is_absolute() and path.is_relative_to(storage_root), path
    text = path.read_text()
    reader = csv.DictReader(io.StringIO(text))
    assert reader.fieldnames == CSV_HEADER
    return list(reader)


def check_gc_commits(
    lakefs: Lakefs, repo: str, storage_root: Path, created: Collection[str], rules: Rules
) -> tuple[Graph, set[str]]:
    """Assert the server's commits CSV is the reference's answer; return the graph and the active set."""
    graph = read_graph(lakefs, repo, created)
    expected = reference_active(graph.nodes, graph.branches, rules, NOW)
    # Ties between branches sharing a HEAD are unordered in lakeFS; the answer must not depend on them.
    assert reference_active(graph.nodes, graph.branches, rules, NOW, reverse_ties=True) == expected
    rows = server_csv(lakefs, repo, storage_root)
    ids = [r["commit_id"] for r in rows]
    assert len(ids) == len(set(ids)), "duplicate rows in the commits CSV"
    assert set(ids) == expected, (
        f"missing {sorted(expected - set(ids))}, unexpected {sorted(set(ids) - expected)}"
    )
    assert all(r["expired"] == "false" for r in rows)
    assert {r["commit_id"]: r["metarange_id"] for r in rows} == {c: graph.nodes[c].metarange for c in ids}
    assert expected <= naive_active(graph.nodes, graph.branches, rules, NOW)  # the short cut only drops
    return graph, set(ids)


# -- random histories ----------------------------------------------------------------------------------

DAYS = st.integers(min_value=0, max_value=35)
# ~30 days back, with whole days (exactly on a threshold when a rule has that many days) drawn often
PAST = st.one_of(
    st.integers(min_value=0, max_value=31).map(lambda d: d * DAY),
    st.integers(min_value=0, max_value=31 * DAY),
)


def _tolerate(statuses: tuple[int, ...], call: Callable[[], Any]) -> Any:
    """Run an SDK call whose documented lakeFS errors (``statuses``) are a possible outcome."""
    try:
        return call()
    except ApiException as e:
        if e.status not in statuses:
            raise
        return None


class History:
    """A repository history built one operation at a time through lakefs-sdk.

    The lists below only pick arguments; every check reads the repository back through the API.
    """

    def __init__(self, shared: Shared, data: st.DataObject) -> None:
        self.shared, self.data = shared, data
        self.lakefs, self.clock = shared.lakefs, shared.clock
        self.repo = shared.new_repo("history")
        # in creation order, not ID order: IDs hash random physical addresses, and the draws must
        # not depend on them (hypothesis replays a history and expects the same draws)
        self.created: list[str] = [self.lakefs.branches.get_branch(self.repo, "main").commit_id]
        self.branches: list[str] = ["main"]  # live branches; main (the default) is never deleted
        self.ever_branches: list[str] = ["main"]
        self.tags: list[str] = []
        self.counter = 0
        self.rules = Rules(7, {})
        self.hidden_made = False

    def draw(self, strategy: st.SearchStrategy[Any], label: str) -> Any:
        return self.data.draw(strategy, label=label)

    def _name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def _record(self, commit_id: str) -> None:
        if commit_id not in self.created:
            self.created.append(commit_id)

    def _branch(self, label: str = "branch") -> str:
        return self.draw(st.sampled_from(self.branches), label)

    def _ref(self) -> str:
        kinds = ["branch", "commit", "short commit", *(["tag"] if self.tags else [])]
        kind = self.draw(st.sampled_from(kinds), "ref kind")
        if kind == "branch":
            return self._branch("ref")
        if kind == "tag":
            return self.draw(st.sampled_from(self.tags), "ref")
        commit = self.draw(st.sampled_from(self.created), "ref")
        return commit if kind == "commit" else commit[:12]

    def op_rules(self) -> None:
        names = st.sampled_from([*self.ever_branches, "b1", "b2", "h3", "never-existed"])
        default = self.draw(DAYS, "default days")
        per_branch = self.draw(st.dictionaries(names, DAYS, max_size=4), "branch days")
        self.lakefs.set_rules(self.repo, default, per_branch)
        self.rules = Rules(default, per_branch)

    def op_branch(self, *, hidden: bool = False) -> None:
        source, name = self._ref(), self._name("h" if hidden else "b")
        self.lakefs.branches.create_branch(self.repo, BranchCreation(name=name, source=source, hidden=hidden))
        self.branches.append(name)
        self.ever_branches.append(name)

    def op_hidden_branch(self) -> None:
        if not self.hidden_made:
            self.hidden_made = True
            self.op_branch(hidden=True)

    def op_upload(self) -> None:
        branch, path = self._branch(), self.draw(st.sampled_from(PATHS), "path")
        self.lakefs.upload(self.repo, branch, path, self.draw(st.binary(min_size=1, max_size=8), "content"))

    def op_delete(self) -> None:
        branch, path = self._branch(), self.draw(st.sampled_from(PATHS), "path")
        _tolerate((404,), lambda: self.lakefs.delete(self.repo, branch, path))  # 404: nothing there

    def op_commit(self) -> None:
        branch = self._branch()
        ago = self.draw(st.one_of(st.none(), PAST), "seconds ago (None: the clock)")
        allow_empty = self.draw(st.sampled_from([True, True, False]), "allow_empty")
        body = CommitCreation(
            message=self._name("commit-"),
            var_date=None if ago is None else NOW_TS - ago,
            allow_empty=allow_empty,
        )
        statuses = () if allow_empty else (400,)  # 400: no changes
        result = _tolerate(statuses, lambda: self.lakefs.commits.commit(self.repo, branch, body))
        if result is not None:
            self._record(result.id)

    def op_merge(self) -> None:
        destination, source = self._branch("destination"), self._ref()
        body = Merge(
            message=self._name("merge-"),
            strategy=self.draw(st.sampled_from([None, "dest-wins", "source-wins"]), "strategy"),
            allow_empty=self.draw(st.booleans(), "allow_empty"),
            squash_merge=self.draw(st.sampled_from([False, False, True]), "squash"),
        )
        # lakeFS dates a merge commit with its clock: move the clock back for this request only.
        self.clock.at = NOW - timedelta(seconds=self.draw(PAST, "seconds ago"))
        try:  # 400: dirty destination, nothing to merge, source is the destination; 409: conflict
            result = _tolerate(
                (400, 409),
                lambda: self.lakefs.refs.merge_into_branch(self.repo, source, destination, merge=body),
            )
        finally:
            self.clock.at = NOW
        if result is not None:
            self._record(result.reference)

    def op_merge_and_delete(self) -> None:
        """The pull-request flow: merge a branch, then delete it; its tip is left a second parent only."""
        if len(self.branches) > 1:
            source = self.draw(st.sampled_from(self.branches[1:]), "merged branch")
            destination = self.draw(st.sampled_from([b for b in self.branches if b != source]), "destination")
            body = Merge(message=self._name("merge-"), allow_empty=True, strategy="source-wins")
            result = _tolerate(  # 400: dirty destination
                (400,), lambda: self.lakefs.refs.merge_into_branch(self.repo, source, destination, merge=body)
            )
            if result is not None:
                self._record(result.reference)
                self.lakefs.branches.delete_branch(self.repo, source)
                self.branches.remove(source)

    def op_reset(self) -> None:
        self.lakefs.reset(self.repo, self._branch())

    def op_delete_branch(self) -> None:
        if len(self.branches) > 1:
            branch = self.draw(st.sampled_from(self.branches[1:]), "branch")  # never the default branch
            self.lakefs.branches.delete_branch(self.repo, branch)
            self.branches.remove(branch)

    def op_tag(self) -> None:
        name = self._name("t")
        self.lakefs.tags.create_tag(self.repo, TagCreation(id=name, ref=self._ref()))
        self.tags.append(name)

    def check(self) -> None:
        graph, active = check_gc_commits(
            self.lakefs, self.repo, self.shared.storage_root, self.created, self.rules
        )
        assert sorted(graph.branches) == sorted(self.branches)
        assert sorted(graph.tags) == sorted(self.tags)
        nodes = graph.nodes
        if any(len(n.parents) > 1 for n in nodes.values()):
            event("merge commit")
        if any(nodes[n.main_parent].created > n.created for n in nodes.values() if n.main_parent):
            event("commit dated before its first parent")
        firsts = [n.main_parent for n in nodes.values() if n.main_parent]
        if len(firsts) > len(set(firsts)):
            event("fork point")
        if any(branch is None for _, branch in gc_starting_points(nodes, graph.branches)):
            event("dangling leaf")
        if active != naive_active(nodes, graph.branches, self.rules, NOW):
            event("commit-ID order dropped a fork point")
        if active < nodes.keys():
            event("some commit expired")


# Weighted: commits and branches make the graph; the rest moves, hides, drops and tags refs.
OPERATIONS = (
    *["commit"] * 6,
    *["branch"] * 3,
    *["merge"] * 2,
    "merge_and_delete",
    *["delete_branch"] * 2,
    *["upload"] * 2,
    "delete",
    "reset",
    "tag",
    "rules",
    "hidden_branch",
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_histories(shared: Shared, data: st.DataObject) -> None:
    """After every operation, the commits CSV is exactly the reference's active set."""
    history = History(shared, data)
    history.op_rules()
    for _ in range(data.draw(st.integers(min_value=8, max_value=25), label="operations")):
        operation = data.draw(st.sampled_from(OPERATIONS), label="operation")
        getattr(history, f"op_{operation}")()
        history.check()


# -- the fork point, deterministically -----------------------------------------------------------------


def test_fork_point_outcome_follows_commit_id_order(shared: Shared) -> None:
    """Two branches forked at ``p``: ``long`` (20 days) with an old commit, ``short`` (5) with a new one.

    The declarative rule keeps ``p``: it is the first commit before ``short``'s threshold. If ``long``'s
    HEAD has the smaller commit ID, lakeFS walks it first and records ``p`` with the 20-day threshold;
    the walk from ``short`` then stops at ``p`` before judging its recent child, and ``p`` is not
    active. In the other order ``p`` is active. Commit IDs are hashes, so the repository is rebuilt with
    a different message until each order has happened. Everything is dated by the fixed clock or
    explicitly and no object is written, so the IDs and the attempts are the same on every run.
    """
    rules = Rules(5, {"long": 20})
    lakefs = shared.lakefs
    outcomes: dict[bool, bool] = {}  # long walked first -> p active
    for attempt in range(64):
        repo = shared.new_repo("fork")
        lakefs.set_rules(repo, rules.default_days, dict(rules.branch_days))

        def commit(branch: str, message: str, days_ago: int, repo: str = repo) -> str:
            body = CommitCreation(message=message, var_date=NOW_TS - days_ago * DAY, allow_empty=True)
            return lakefs.commits.commit(repo, branch, body).id

        lakefs.branch(repo, "fork", "main")
        p = commit("fork", f"fork point {attempt}", 30)
        lakefs.branch(repo, "long", "fork")
        lakefs.branch(repo, "short", "fork")
        a = commit("long", "old work", 25)
        b = commit("short", "new work", 2)
        lakefs.branches.delete_branch(repo, "fork")

        graph, active = check_gc_commits(lakefs, repo, shared.storage_root, {p, a, b}, rules)
        assert graph.nodes[a].parents == graph.nodes[b].parents == (p,)
        assert p in naive_active(graph.nodes, graph.branches, rules, NOW)
        long_first = a < b
        assert (p in active) is not long_first
        outcomes.setdefault(long_first, p in active)
        if len(outcomes) == 2:
            break
    assert outcomes == {True: False, False: True}
