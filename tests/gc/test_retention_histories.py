"""The order-independent rule against the server's commits export on random repository histories.

Histories come from the generator of ``tests/testing/test_retention_property.py`` (branches from any
ref, a hidden branch, past-dated commits, merges incl. squash, resets, branch deletions, tags, random
rules), built through lakefs-sdk. The commit graph is read back through the API. Then:

* ``lakefs_gc.gc.retention`` keeps every commit of the server's export (lakeFS's answer);
* it equals the independent reference ``naive_active`` on the same graph;
* the commits it adds are exactly the fork points lakeFS's commit-ID order dropped.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from pathlib import Path

import lakefs_sdk
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from lakefs_gc.gc import retention
from lakefs_gc.testing.server import LakeFSTestServer
from tests.testing.sdk import Lakefs
from tests.testing.test_retention_property import (
    NOW,
    OPERATIONS,
    Clock,
    History,
    Shared,
    naive_active,
    read_graph,
    server_csv,
)


@pytest.fixture(scope="module")
def shared() -> Iterator[Shared]:
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve()
        with (
            LakeFSTestServer(storage_root=root, clock=clock) as server,
            lakefs_sdk.ApiClient(server.sdk_configuration()) as client,
        ):
            yield Shared(Lakefs(client), root, clock, itertools.count())


def cross_check(shared: Shared, history: History) -> retention.RetentionCrossCheck:
    graph = read_graph(shared.lakefs, history.repo, history.created)
    exported = {row["commit_id"] for row in server_csv(shared.lakefs, history.repo, shared.storage_root)}
    commits = {cid: retention.Commit(cid, n.created, n.parents) for cid, n in graph.nodes.items()}
    rules = retention.RetentionRules(history.rules.default_days, history.rules.branch_days)
    ours = retention.active_commits(commits, graph.branches, rules, NOW)
    assert ours.commits == naive_active(graph.nodes, graph.branches, history.rules, NOW)
    check = retention.cross_check(exported, ours.commits)
    assert not check.lakefs_only, f"the server keeps commits the rule does not: {sorted(check.lakefs_only)}"
    for cid in check.kept_beyond_lakefs:  # only fork points: a first parent of two commits
        children = [c for c, n in graph.nodes.items() if n.main_parent == cid]
        assert len(children) >= 2, f"{cid} kept beyond lakeFS but is no fork point"
    return check


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_histories(shared: Shared, data: st.DataObject) -> None:
    history = History(shared, data)
    history.op_rules()
    for _ in range(data.draw(st.integers(min_value=8, max_value=25), label="operations")):
        getattr(history, f"op_{data.draw(st.sampled_from(OPERATIONS), label='operation')}")()
    check = cross_check(shared, history)
    if check.kept_beyond_lakefs:
        event("the rule keeps a fork point lakeFS's order expired")
