"""Issue 19's two hazards, built through lakefs-sdk on the test server (lakeFS's behaviour).

1. **Fork order.** Branch A (21-day rule) and B (7-day rule) forked from commit p (30 days old),
   each with one newer commit (A's 25 days old, B's 3 days old). lakeFS's commits export expires p
   when A's HEAD ID sorts first, and keeps it in the other order; the documented rule
   (``lakefs_gc.gc.retention``) keeps it in both. Commit IDs hash the commit (message, date,
   metarange, parents), and the metarange hashes random physical addresses, so the repository is
   rebuilt with another message until each order has happened (each attempt is a coin toss).
2. **Identical re-uploads.** What ``statObject`` answers for a staged identity twin, on a visible and
   a hidden branch, next to the uncommitted export that leaves it out: the facts the twin guard
   (``lakefs_gc.gc.twins``) relies on. That ``lakefs-gc run`` deletes such a twin today is pinned by
   the strict xfail ``test_identical_reupload_over_a_committed_path_stays_readable`` in
   ``tests/gc/test_differential.py``.

``test_run_keeps_the_fork_point_in_both_orders`` runs ``lakefs-gc run`` on both: the retention
cross-check of the mark (docs/invariants.md, invariant 6) keeps p's object in either order and counts it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lakefs_sdk
import pyarrow.parquet as pq
import pytest
from lakefs_sdk.models.commit_creation import CommitCreation
from lakefs_sdk.models.prepare_gc_uncommitted_request import PrepareGCUncommittedRequest

from lakefs_gc.gc import retention
from lakefs_gc.testing.server import LakeFSTestServer
from tests.gc.reference_gc import namespace_files, relative_address
from tests.testing.test_retention_property import (
    NOW,
    NOW_TS,
    Graph,
    Shared,
    read_graph,
    server_csv,
    serving_shared,
)

DAY = 86400
RULES = retention.RetentionRules(7, {"A": 21, "B": 7})
OLD_SECONDS = 2 * DAY  # every file's age before a run: older than the 1 h cutoff


@dataclass
class Env:
    shared: Shared
    server: LakeFSTestServer


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    with serving_shared() as (shared, server):
        yield Env(shared, server)


# -- the fork ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fork:
    repo: str
    p: str
    a: str
    b: str
    p_key: str  # namespace-relative key of the object only p holds
    p_bytes: bytes

    @property
    def a_first(self) -> bool:
        return self.a < self.b


def build_fork(env: Env, *, a_first: bool) -> Fork:
    """The fork of issue 19 with one object per commit at path ``x``, in the wanted commit-ID order."""
    lakefs = env.shared.lakefs
    for attempt in range(64):
        repo = env.shared.new_repo("fork")
        lakefs.set_rules(repo, RULES.default_days, dict(RULES.branch_days))

        def commit(branch: str, days_ago: int, repo: str = repo, attempt: int = attempt) -> str:
            body = CommitCreation(message=f"{branch} {attempt}", var_date=NOW_TS - days_ago * DAY)
            return lakefs.commits.commit(repo, branch, body).id

        lakefs.branch(repo, "fork", "main")
        p_bytes = f"p's version {attempt}".encode()
        p_stats = lakefs.upload(repo, "fork", "x", p_bytes)
        p = commit("fork", 30)
        lakefs.branch(repo, "A", "fork")
        lakefs.branch(repo, "B", "fork")
        lakefs.upload(repo, "A", "x", b"A's version")
        a = commit("A", 25)
        lakefs.upload(repo, "B", "x", b"B's version")
        b = commit("B", 3)
        lakefs.branches.delete_branch(repo, "fork")
        if (a < b) is a_first:
            key = relative_address(p_stats.physical_address, env.shared.storage_root / repo)
            assert key is not None
            return Fork(repo, p, a, b, key, p_bytes)
        lakefs.repositories.delete_repository(repo)
    raise AssertionError("64 attempts without the wanted commit-ID order")


def our_active(graph: Graph) -> retention.ActiveCommits:
    commits = {cid: retention.Commit(cid, node.created, node.parents) for cid, node in graph.nodes.items()}
    return retention.active_commits(commits, graph.branches, RULES, NOW)


@pytest.mark.parametrize("a_first", [True, False], ids=["A's HEAD sorts first", "B's HEAD sorts first"])
def test_lakefs_expires_the_fork_point_in_one_order_only(env: Env, a_first: bool) -> None:
    fork = build_fork(env, a_first=a_first)
    lakefs = env.shared.lakefs
    exported = {row["commit_id"] for row in server_csv(lakefs, fork.repo, env.shared.storage_root)}
    assert (fork.p in exported) is not a_first  # lakeFS: expired iff A's walk comes first
    graph = read_graph(lakefs, fork.repo, [fork.p, fork.a, fork.b])
    assert graph.nodes[fork.a].parents == graph.nodes[fork.b].parents == (fork.p,)
    ours = our_active(graph)
    assert fork.p in ours.commits  # the documented rule: p was B's HEAD within B's 7 days
    assert [(r.kind, r.via.branch, r.child) for r in ours.reasons[fork.p]] == [
        ("within_retention", "B", fork.b)
    ]
    check = retention.cross_check(exported, ours.commits)
    assert check.kept_beyond_lakefs == ({fork.p} if a_first else set())
    assert not check.lakefs_only


def age_every_file(root: Path) -> None:
    now = time.time()
    for key in namespace_files(root):
        os.utime(root / key, (now - OLD_SECONDS, now - OLD_SECONDS))


def run_gc(env: Env, repo: str) -> dict[str, Any]:
    """``lakefs-gc run`` on ``repo``; returns the mark's summary.json (a failed run is an error)."""
    from lakefs_gc.cli.main import main

    info = env.server.connection_info()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(
            [
                "run", "--repo", repo, "--yes",
                "--lakefs-endpoint", info["endpoint"],
                "--lakefs-access-key-id", info["access_key_id"],
                "--lakefs-secret-access-key", info["secret_access_key"],
                "--local-root", str(env.shared.storage_root),
                "--unsafe-min-age", "1h", "--output", "json", "--parallelism", "2",
                "--max-delete-fraction", "1",
            ]
        )  # fmt: skip
    if rc != 0:
        raise RuntimeError(f"lakefs-gc run exited {rc}: {out.getvalue()}")
    mark = json.loads(next(line for line in out.getvalue().splitlines() if line.startswith("{")))
    report = env.shared.storage_root / repo / "_lakefs" / "retention" / "gc" / "unified" / mark["mark_id"]
    return json.loads((report / "summary.json").read_text())  # type: ignore[no-any-return]


def test_run_keeps_the_fork_point_in_both_orders(env: Env, spark: Any) -> None:
    """``lakefs-gc run`` deletes none of p's objects in either order, and the summary counts them."""
    outcomes, forks = {}, {}
    for a_first in (False, True):
        fork = forks[a_first] = build_fork(env, a_first=a_first)
        root = env.shared.storage_root / fork.repo
        age_every_file(root)
        summary = run_gc(env, fork.repo)
        survived = (root / fork.p_key).exists()
        reads_back = survived and env.shared.lakefs.objects.get_object(fork.repo, fork.p, "x") == fork.p_bytes
        assert summary["cost"]["bytes"] == summary["num_deleted_bytes"]  # every marked byte priced or not
        cross_check = summary.get("retention_cross_check", {})
        outcomes[a_first] = (reads_back, cross_check.get("kept_beyond_lakefs"), cross_check.get("objects"))
    assert outcomes[False][0] and outcomes[True][0], f"p's object deleted: {outcomes}"
    assert outcomes[True][1:] == ([forks[True].p], 1), outcomes


def test_the_service_marks_keep_the_fork_point_through_the_range_cache(
    env: Env, spark: Any, tmp_path: Path
) -> None:
    """The service's marks (with a range cache) read the metaranges only the cross-check keeps
    in the same cache update as the others, and still keep p's object under its own reason,
    in the first mark and in the next one, which reads every range from the cache."""
    from lakefs_gc.settings import GcSettings
    from lakefs_gc.spark.mark.range_cache import RangeCache
    from tests.support.jobs import mark

    fork = build_fork(env, a_first=True)  # lakeFS's export expires p; the documented rule keeps it
    age_every_file(env.shared.storage_root / fork.repo)
    info = env.server.connection_info()
    settings = GcSettings.model_validate({
        "lakefs": {k: info[k] for k in ("endpoint", "access_key_id", "secret_access_key")},
        "storage": {"local_root": str(env.shared.storage_root)},
        "gc": {"unsafe_min_age": "1h"}, "spark": {"parallelism": 2},
    })  # fmt: skip
    cache = RangeCache.for_repository(tmp_path, fork.repo)
    for cycle in ("first", "next"):
        result = mark(spark, settings, fork.repo, range_cache=cache)
        summary = result.summary
        cross_check = summary["retention_cross_check"]
        assert (cross_check["kept_beyond_lakefs"], cross_check["objects"]) == ([fork.p], 1), cycle
        report = env.shared.storage_root / fork.repo / "_lakefs/retention/gc/unified" / result.mark_id
        marked = {
            a for f in (report / "deleted").glob("*.parquet") for a in pq.read_table(f)["address"].to_pylist()
        }
        assert fork.p_key not in marked, cycle
        stats = summary["range_cache"]  # every range of both kinds of metaranges, read or cached
        assert stats["ranges_read"] + stats["ranges_cached"] == summary["num_ranges"] > 0, (cycle, stats)
    assert summary["range_cache"]["ranges_read"] == 0  # the next mark read every range from the cache


# -- identity twins: what the API answers ----------------------------------------------------------------


def uncommitted_export(env: Env, repo: str) -> set[str]:
    """Every namespace-relative address of lakeFS's uncommitted export (all pages)."""
    lakefs, root = env.shared.lakefs, env.shared.storage_root / repo
    addresses: set[str] = set()
    request = PrepareGCUncommittedRequest()
    while True:
        answer = lakefs.internal.prepare_garbage_collection_uncommitted(repo, request)
        for path in (root / "_lakefs" / "retention" / "gc" / "uncommitted" / answer.run_id).rglob(
            "*.parquet"
        ):
            addresses.update(pq.read_table(path).column("physical_address").to_pylist())
        if not answer.continuation_token:
            return addresses
        request = PrepareGCUncommittedRequest(continuation_token=answer.continuation_token)


def test_stat_answers_a_staged_twin_that_the_export_leaves_out(env: Env) -> None:
    lakefs = env.shared.lakefs
    repo = env.shared.new_repo("twin")
    root = env.shared.storage_root / repo
    committed = lakefs.upload(repo, "main", "a", b"same bytes")
    lakefs.commits.commit(repo, "main", CommitCreation(message="a", var_date=NOW_TS - 30 * DAY))
    lakefs.branch(repo, "h1", "main", hidden=True)
    twins = {branch: lakefs.upload(repo, branch, "a", b"same bytes") for branch in ("main", "h1")}
    for branch, twin in twins.items():
        assert (twin.size_bytes, twin.checksum) == (committed.size_bytes, committed.checksum)
        assert twin.physical_address != committed.physical_address
        served = lakefs.objects.stat_object(repo, branch, "a", presign=False)
        assert served.physical_address == twin.physical_address  # the staged entry, not HEAD's
    # the hidden branch is listed with show_hidden, and its twin is in no export
    assert "h1" in {b.id for b in lakefs.branches.list_branches(repo, show_hidden=True).results}
    assert "h1" not in {b.id for b in lakefs.branches.list_branches(repo).results}
    assert not lakefs.branches.diff_branch(repo, "main").results  # DiffUncommitted: equal identity
    exported = uncommitted_export(env, repo)
    assert not {relative_address(t.physical_address, root) for t in twins.values()} & exported
    # after a commit the twin is dropped (the commit keeps HEAD's record): then it is real garbage
    lakefs.commits.commit(repo, "main", CommitCreation(message="no-op", allow_empty=True))
    assert (
        lakefs.objects.stat_object(repo, "main", "a", presign=False).physical_address
        == committed.physical_address
    )
    # a path the branch does not have: 404, told apart from a missing branch by get_branch
    with pytest.raises(lakefs_sdk.exceptions.NotFoundException):
        lakefs.objects.stat_object(repo, "main", "nothing-here", presign=False)
    assert lakefs.branches.get_branch(repo, "main").id == "main"
