"""The order-independent rule against the server's commits export on random repository histories.

Histories come from the generator of ``tests/testing/test_retention_property.py`` (branches from any
ref, a hidden branch, past-dated commits, merges incl. squash, resets, branch deletions, tags, random
rules), built through lakefs-sdk. The commit graph is read back through the API. Then:

* ``lakefs_gc.gc.retention`` keeps every commit of the server's export (lakeFS's answer);
* it equals the independent reference ``naive_active`` on the same graph;
* the commits it adds are exactly the fork points lakeFS's commit-ID order dropped;
* the mark's own path (``lakefs_gc.lakefs.commit_graph``: the graph read through the API with the
  export's commits as seeds, then the union) keeps every exported commit and every commit the
  reference keeps among those it can reach.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from lakefs_gc.gc import retention
from lakefs_gc.lakefs.client import LakeFSClient
from lakefs_gc.lakefs.commit_graph import CheckedCommits, LakeFSCommitGraph, cross_check_export
from lakefs_gc.lakefs.exports import ActiveCommit, ActiveCommits
from tests.testing.test_retention_property import (
    NOW,
    OPERATIONS,
    History,
    Shared,
    naive_active,
    read_graph,
    server_csv,
    serving_shared,
)


@pytest.fixture(scope="module")
def server_and_shared() -> Iterator[tuple[LakeFSCommitGraph, Shared]]:
    with serving_shared() as (shared, server):
        connection = server.connection()
        with LakeFSClient(connection) as gc_client:
            yield LakeFSCommitGraph(gc_client), shared


@pytest.fixture(scope="module")
def shared(server_and_shared: tuple[LakeFSCommitGraph, Shared]) -> Shared:
    return server_and_shared[1]


@pytest.fixture(scope="module")
def reader(server_and_shared: tuple[LakeFSCommitGraph, Shared]) -> LakeFSCommitGraph:
    return server_and_shared[0]


def through_the_mark(reader: LakeFSCommitGraph, repo: str, rows: list[dict[str, str]]) -> CheckedCommits:
    """The cross-check as the mark runs it, from the export's rows."""
    exported = ActiveCommits(
        [ActiveCommit(r["commit_id"], r["metarange_id"]) for r in rows if r["metarange_id"]]
    )
    return cross_check_export(reader, repo, exported, export_run_id="", start=NOW)


def cross_check(shared: Shared, history: History, reader: LakeFSCommitGraph) -> retention.RetentionCrossCheck:
    graph = read_graph(shared.lakefs, history.repo, history.created)
    rows = server_csv(shared.lakefs, history.repo, shared.storage_root)
    exported = {row["commit_id"] for row in rows}
    commits = {cid: retention.Commit(cid, n.created, n.parents) for cid, n in graph.nodes.items()}
    rules = retention.RetentionRules(history.rules.default_days, history.rules.branch_days)
    ours = retention.active_commits(commits, graph.branches, rules, NOW)
    assert ours.commits == naive_active(graph.nodes, graph.branches, history.rules, NOW)
    check = retention.cross_check(exported, ours.commits)
    assert not check.lakefs_only, f"the server keeps commits the rule does not: {sorted(check.lakefs_only)}"
    for cid in check.kept_beyond_lakefs:  # only fork points: a first parent of two commits
        children = [c for c, n in graph.nodes.items() if n.main_parent == cid]
        assert len(children) >= 2, f"{cid} kept beyond lakeFS but is no fork point"
    mark = through_the_mark(reader, history.repo, rows)
    assert mark.graph.commits.keys() <= graph.nodes.keys() and mark.graph.branches == graph.branches
    with_tree = {c for c in exported if graph.nodes[c].metarange}
    assert with_tree <= mark.check.active, "the mark keeps fewer commits than lakeFS's export"
    reachable = {c for c in ours.commits if graph.nodes[c].metarange} & mark.graph.commits.keys()
    assert reachable <= mark.check.active, f"the mark misses {sorted(reachable - mark.check.active)}"
    return check


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_histories(shared: Shared, reader: LakeFSCommitGraph, data: st.DataObject) -> None:
    history = History(shared, data)
    history.op_rules()
    for _ in range(data.draw(st.integers(min_value=8, max_value=25), label="operations")):
        getattr(history, f"op_{data.draw(st.sampled_from(OPERATIONS), label='operation')}")()
    check = cross_check(shared, history, reader)
    if check.kept_beyond_lakefs:
        event("the rule keeps a fork point lakeFS's order expired")
