"""The commit graph through the API (``lakefs_gc.lakefs.commit_graph``) against the test server.

Hidden branches and tags are roots, dangling commits come in as seeds, every commit is read once
(a second read of an unchanged history makes no commit call), a new commit costs one log page, and
any API failure raises instead of answering with a smaller graph (docs/invariants.md, invariant 4).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import lakefs_sdk
import pytest

from lakefs_gc.errors import LakeFSError
from lakefs_gc.gc import retention
from lakefs_gc.lakefs.client import LakeFSClient
from lakefs_gc.lakefs.commit_graph import CommitCache, LakeFSCommitGraph, retention_now
from lakefs_gc.lakefs.retry import RetryPolicy
from lakefs_gc.lakefs.xid import new_descending_xid
from lakefs_gc.testing.faults import Fault
from lakefs_gc.testing.server import LakeFSTestServer
from tests.testing.sdk import Lakefs

DAY = 86400
NOW = int(datetime(2026, 5, 17, tzinfo=timezone.utc).timestamp())


@dataclass
class Env:
    server: LakeFSTestServer
    lakefs: Lakefs
    client: LakeFSClient


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    with tempfile.TemporaryDirectory() as tmp, LakeFSTestServer(storage_root=Path(tmp)) as server:
        connection = server.connection()
        retry = RetryPolicy(max_attempts=1, base_delay=0, max_delay=0, sleep=lambda _: None)
        with (
            server.sdk_client() as sdk,
            LakeFSClient(connection, retry=retry) as client,
        ):
            yield Env(server, Lakefs(sdk), client)


@dataclass(frozen=True)
class Repo:
    name: str
    root: str
    on_hidden: str
    tagged: str
    dangling: str


def build(env: Env, name: str, root: Path) -> Repo:
    lakefs = env.lakefs
    lakefs.create_repo(name, f"local://{root}/{name}")
    lakefs.set_rules(name, 7, {"main": 14})

    def commit(branch: str, path: str, days_ago: int) -> str:
        lakefs.upload(name, branch, path, path.encode())
        return lakefs.commit(name, branch, path, date=NOW - days_ago * DAY).id

    first = commit("main", "a", 40)
    lakefs.branch(name, "h", "main", hidden=True)
    on_hidden = commit("h", "b", 30)
    tagged = commit("main", "c", 20)
    lakefs.tags.create_tag(name, lakefs_sdk.TagCreation(id="t", ref=tagged))
    commit("main", "d", 10)
    lakefs.branch(name, "gone", "main")
    dangling = commit("gone", "e", 2)
    lakefs.branches.delete_branch(name, "gone")
    return Repo(name, first, on_hidden, tagged, dangling)


def test_hidden_branches_tags_and_seeds_are_read_and_cached(env: Env, tmp_path: Path) -> None:
    repo = build(env, "graph", tmp_path)
    reader = LakeFSCommitGraph(env.client, page=2)  # small pages: the log is paged
    graph = reader.commit_graph(repo.name, [repo.dangling])
    assert graph.branches.keys() == {"main", "h"}  # the hidden branch too
    assert {repo.root, repo.on_hidden, repo.tagged, repo.dangling} <= graph.commits.keys()
    for commit in graph.commits.values():
        assert set(commit.parents) <= graph.commits.keys()
    assert graph.rules == retention.RetentionRules(7, {"main": 14})
    assert all(graph.metaranges[c] for c in (repo.on_hidden, repo.tagged, repo.dangling))
    first_calls = reader.calls
    again = reader.commit_graph(repo.name, [repo.dangling])
    assert again == graph
    assert reader.calls - first_calls == 3  # branches, tags, rules: no commit is read twice
    env.lakefs.upload(repo.name, "main", "f", b"f")
    new = env.lakefs.commit(repo.name, "main", "f", date=NOW).id
    calls = reader.calls
    assert new in reader.commit_graph(repo.name, [repo.dangling]).commits
    assert reader.calls - calls == 4  # and one log page for the new HEAD


def test_a_commit_cache_outlives_its_readers(env: Env, tmp_path: Path) -> None:
    """The service's case: a reader (and a client) per cycle, one cache for the service's life.
    The second cycle reads no commit again, the third only the new one; another repository's
    history is apart."""
    repo = build(env, "graph-cache", tmp_path)
    cache = CommitCache()
    connection = env.server.connection()
    first = LakeFSCommitGraph(env.client, page=2, cache=cache)
    graph = first.commit_graph(repo.name, [repo.dangling])
    assert len(cache) == len(graph.commits) and first.calls > 4
    with LakeFSClient(connection) as client:  # the next cycle's
        second = LakeFSCommitGraph(client, page=2, cache=cache)
        assert second.commit_graph(repo.name, [repo.dangling]) == graph
        assert second.calls == 3  # branches, tags, rules
    env.lakefs.upload(repo.name, "main", "g", b"g")
    new = env.lakefs.commit(repo.name, "main", "g", date=NOW).id
    before = (dict(graph.commits), dict(graph.metaranges))
    with LakeFSClient(connection) as client:
        third = LakeFSCommitGraph(client, page=2, cache=cache)
        grown = third.commit_graph(repo.name, [repo.dangling])
        assert new in grown.commits
        assert third.calls == 4  # and one log page for the new HEAD
    # the earlier cycle's graph (a guard may still hold it) did not change under it
    assert (graph.commits, graph.metaranges) == before and new not in graph.commits
    # one string per id: a parent id is its commit's key, commits of one metarange share its id
    keys = {id(k): k for k in grown.commits}
    assert all(id(p) in keys for c in grown.commits.values() for p in c.parents)
    assert all(grown.commits[k].commit_id is k for k in grown.commits)
    other = build(env, "graph-cache-other", tmp_path)  # commit ids may repeat across repositories
    shared = LakeFSCommitGraph(env.client, cache=cache).commit_graph(other.name, [other.dangling])
    assert shared == LakeFSCommitGraph(env.client).commit_graph(other.name, [other.dangling])


@pytest.mark.parametrize(
    "path",
    [r"/branches$", r"/tags$", r"/gc/rules$|/settings/gc_rules$", r"/refs/[^/]+/commits$"],
    ids=["branches", "tags", "rules", "log"],
)
def test_any_api_failure_fails_the_read(env: Env, tmp_path: Path, path: str) -> None:
    name = f"fails-{abs(hash(path)) % 10**6}"
    repo = build(env, name, tmp_path)
    fault = env.server.faults.inject(Fault(method="GET", path=path, status=503))
    try:
        with pytest.raises(LakeFSError):
            LakeFSCommitGraph(env.client).commit_graph(repo.name, [repo.dangling])
    finally:
        env.server.faults.clear()
    assert env.server.faults.hits(fault) >= 1


def test_a_missing_seed_fails_the_read(env: Env, tmp_path: Path) -> None:
    repo = build(env, "seedless", tmp_path)
    with pytest.raises(LakeFSError):
        LakeFSCommitGraph(env.client).commit_graph(repo.name, ["0" * 64])


def test_retention_now_is_the_earlier_clock() -> None:
    start = datetime(2026, 11, 24, 12, tzinfo=timezone.utc)
    lakefs_clock = start - timedelta(days=190)
    assert retention_now(start, new_descending_xid(lakefs_clock)) == lakefs_clock
    assert retention_now(start, new_descending_xid(start + timedelta(hours=1))) == start
    assert retention_now(start, "not-an-xid") == start
