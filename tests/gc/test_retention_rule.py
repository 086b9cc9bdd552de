"""The order-independent retention rule (``lakefs_gc.gc.retention``) on random commit graphs.

* it equals a brute force written here from the rule (every starting point walked to its root), and
  the independent reference of ``tests/testing/test_retention_property.py`` (``naive_active``);
* it is a superset of lakeFS's answer (``lakefs_gc.testing.retention``, the faithful port with the
  shared ``processed`` map) in commit-ID order *and in any other order* of the starting points,
  legacy merge commits with three parents included;
* in the fork scenario of issue 19 it keeps ``p`` in both commit-ID orders, where lakeFS's order
  expires it in one;
* every kept commit has a reason that can be checked on the graph.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from lakefs_gc.gc import retention as ours
from lakefs_gc.testing import retention as lakefs
from tests.testing.test_retention_property import Node, Rules, naive_active

UTC = timezone.utc
NOW = datetime(2026, 5, 17, 12, 0, 0, tzinfo=UTC)
DAY = timedelta(days=1)


# -- random commit graphs ------------------------------------------------------------------------------


Graph = tuple[dict[str, ours.Commit], dict[str, str], ours.RetentionRules]


@st.composite
def graphs(draw: st.DrawFn, *, legacy: bool = True) -> Graph:
    """A DAG of 1-25 commits (ids random, so their order is), random dates and parents, branches."""
    n = draw(st.integers(min_value=1, max_value=25), label="commits")
    ids = [f"c{k:03d}" for k in draw(st.permutations(range(n)), label="id order")]
    seconds = st.one_of(st.integers(0, 40).map(lambda d: d * 86400), st.integers(0, 40 * 86400))
    commits: dict[str, ours.Commit] = {}
    for i, cid in enumerate(ids):
        k = min(i, draw(st.sampled_from([0, 1, 1, 1, 2, 3]), label="parents"))
        parents = (
            tuple(draw(st.lists(st.sampled_from(ids[:i]), min_size=k, max_size=k, unique=True))) if k else ()
        )
        version = draw(st.sampled_from([1, 1, 1, 0])) if legacy and len(parents) > 1 else 1
        created = NOW - timedelta(seconds=draw(seconds, label="age"))
        commits[cid] = ours.Commit(cid, created, parents, version)
    names = ["main", "a", "b", "c", "h1"]
    heads = draw(st.dictionaries(st.sampled_from(names), st.sampled_from(ids), max_size=5), label="branches")
    days = st.integers(min_value=0, max_value=35)
    rules = ours.RetentionRules(
        draw(days, label="default"),
        draw(st.dictionaries(st.sampled_from([*names, "gone"]), days, max_size=4), label="branch rules"),
    )
    return commits, heads, rules


def brute_force(
    commits: Mapping[str, ours.Commit], heads: Mapping[str, str], rules: ours.RetentionRules
) -> set[str]:
    """The rule, spelled out: walk every starting point to its root, judge every parent by its child."""
    walked = {c.main_parent for c in commits.values()}
    scanned = {c.leaf_scan_parent for c in commits.values()}
    leaves = [c for c in commits if c not in heads.values() and (c not in walked or c not in scanned)]
    active = set(heads.values())
    starts = [(head, NOW - rules.days(branch) * DAY, True) for branch, head in heads.items()]
    starts += [(leaf, NOW - rules.default_days * DAY, False) for leaf in leaves]
    for start, threshold, is_head in starts:
        if not is_head and commits[start].creation > threshold:
            active.add(start)  # the synthetic child of a leaf is created with it
        child: str | None = start
        while child is not None and (parent := commits[child].main_parent) is not None:
            if commits[child].creation > threshold:
                active.add(parent)
            child = parent
    return active


def as_lakefs(commits: Mapping[str, ours.Commit]) -> dict[str, lakefs.CommitNode]:
    return {cid: lakefs.CommitNode(cid, c.creation, c.parents, c.version) for cid, c in commits.items()}


def as_reference_nodes(commits: Mapping[str, ours.Commit]) -> dict[str, Node]:
    return {cid: Node(c.creation, c.parents, "") for cid, c in commits.items()}


# -- properties ----------------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(graph=graphs())
def test_equals_brute_force(
    graph: Graph,
) -> None:
    commits, heads, rules = graph
    result = ours.active_commits(commits, heads, rules, NOW)
    assert result.commits == brute_force(commits, heads, rules)
    assert set(result.reasons) == result.commits


@settings(max_examples=300, deadline=None)
@given(graph=graphs(legacy=False))
def test_equals_the_independent_reference(
    graph: Graph,
) -> None:
    """``naive_active`` (tests/testing) is the same rule written from the lakeFS sources by others."""
    commits, heads, rules = graph
    reference = naive_active(
        as_reference_nodes(commits), heads, Rules(rules.default_days, rules.branch_days), NOW
    )
    assert ours.active_commits(commits, heads, rules, NOW).commits == reference


@settings(max_examples=400, deadline=None)
@given(graph=graphs(), data=st.data())
def test_superset_of_lakefs_in_every_order(graph: Graph, data: st.DataObject) -> None:
    """lakeFS's answer in commit-ID order, and in a random order of its starting points, is kept."""
    commits, heads, rules = graph
    mine = ours.active_commits(commits, heads, rules, NOW).commits
    nodes = as_lakefs(commits)
    gc_rules = lakefs.GCRules(rules.default_days, rules.branch_days)
    in_id_order = lakefs.active_commits(nodes, heads, gc_rules, NOW)
    assert in_id_order <= mine
    points = data.draw(st.permutations(lakefs.starting_points(nodes, heads)), label="order")
    assert lakefs.active_commits_from(nodes, points, gc_rules, NOW) <= mine
    check = ours.cross_check(in_id_order, mine)
    assert check.active == mine and not check.lakefs_only
    if check.kept_beyond_lakefs:
        event("the documented rule keeps a commit lakeFS expires")


@settings(max_examples=300, deadline=None)
@given(graph=graphs())
def test_every_reason_holds_on_the_graph(
    graph: Graph,
) -> None:
    commits, heads, rules = graph
    result = ours.active_commits(commits, heads, rules, NOW)
    for cid, reasons in result.reasons.items():
        assert reasons
        for reason in reasons:
            via = reason.via
            assert via.threshold == NOW - rules.days(via.branch) * DAY
            if reason.kind == "head":
                assert via.branch is not None and heads[via.branch] == cid
            elif reason.kind == "dangling":
                assert via.branch is None and via.commit_id == cid and commits[cid].creation > via.threshold
            else:
                child = reason.child
                assert child is not None and commits[child].main_parent == cid
                assert commits[child].creation > via.threshold
                assert child in chain(commits, via.commit_id)


def chain(commits: Mapping[str, ours.Commit], start: str) -> list[str]:
    out: list[str] = []
    at: str | None = start
    while at is not None:
        out.append(at)
        at = commits[at].main_parent
    return out


# -- the fork scenario of issue 19 ---------------------------------------------------------------------


def fork(a_id: str, b_id: str) -> Graph:
    """p (30 days old) forked into A (21-day rule, a commit 25 days old) and B (7 days, 3 days old)."""
    root = ours.Commit("0000", NOW - 40 * DAY)
    p = ours.Commit("p", NOW - 30 * DAY, ("0000",))
    a = ours.Commit(a_id, NOW - 25 * DAY, ("p",))
    b = ours.Commit(b_id, NOW - 3 * DAY, ("p",))
    commits = {c.commit_id: c for c in (root, p, a, b)}
    return commits, {"main": "0000", "A": a_id, "B": b_id}, ours.RetentionRules(7, {"A": 21, "B": 7})


@pytest.mark.parametrize("a_id,b_id", [("a1", "b2"), ("b2", "a1")], ids=["A sorts first", "B sorts first"])
def test_fork_point_is_kept_in_both_id_orders(a_id: str, b_id: str) -> None:
    commits, heads, rules = fork(a_id, b_id)
    lakefs_active = lakefs.active_commits(
        as_lakefs(commits), heads, lakefs.GCRules(7, {"A": 21, "B": 7}), NOW
    )
    assert ("p" in lakefs_active) is (b_id < a_id)  # lakeFS: expired when A's HEAD is walked first
    result = ours.active_commits(commits, heads, rules, NOW)
    assert "p" in result.commits
    (reason,) = result.reasons["p"]
    assert (reason.kind, reason.via.branch, reason.via.days, reason.child) == (
        "within_retention",
        "B",
        7,
        b_id,
    )
    check = ours.cross_check(lakefs_active, result.commits)
    assert check.kept_beyond_lakefs == ({"p"} if a_id < b_id else set())
    assert check.summary()["kept_beyond_lakefs"] == sorted(check.kept_beyond_lakefs)


# -- edges ---------------------------------------------------------------------------------------------


def test_inconsistent_graphs_fail_closed() -> None:
    c = ours.Commit("c", NOW, ("missing",))
    with pytest.raises(ours.CommitGraphError, match="missing"):
        ours.active_commits({"c": c}, {}, ours.RetentionRules(7), NOW)
    with pytest.raises(ours.CommitGraphError, match="HEAD"):
        ours.active_commits({}, {"main": "x"}, ours.RetentionRules(7), NOW)
    loop = {"x": ours.Commit("x", NOW, ("y",)), "y": ours.Commit("y", NOW, ("x",))}
    with pytest.raises(ours.CommitGraphError, match="cycle"):
        ours.active_commits(loop, {"main": "x"}, ours.RetentionRules(7), NOW)
    with pytest.raises(ours.CommitGraphError, match="timezone"):
        ours.Commit("n", datetime(2026, 1, 1))


def test_huge_retention_clamps_instead_of_overflowing() -> None:
    commits = {"r": ours.Commit("r", NOW - 400 * DAY), "h": ours.Commit("h", NOW - 300 * DAY, ("r",))}
    rules = ours.RetentionRules(10**9)
    assert ours.active_commits(commits, {"main": "h"}, rules, NOW).commits == {"h", "r"}


def test_a_legacy_three_parent_merge_keeps_lakefs_s_extra_leaf() -> None:
    """lakeFS walks ``parents[-1]`` of a legacy merge but scans leaves with ``parents[1]``: with three
    parents, ``parents[-1]`` is also a leaf walked with the default rule. Ours walks it too."""
    commits = {
        "p0": ours.Commit("p0", NOW - 50 * DAY),
        "p1": ours.Commit("p1", NOW - 50 * DAY),
        "p2": ours.Commit("p2", NOW - 10 * DAY),
        "x": ours.Commit("x", NOW - 40 * DAY, ("p0", "p1", "p2"), version=0),
    }
    heads, rules = {"short": "x"}, ours.RetentionRules(30, {"short": 0})
    lakefs_active = lakefs.active_commits(as_lakefs(commits), heads, lakefs.GCRules(30, {"short": 0}), NOW)
    assert "p2" in lakefs_active  # as a dangling leaf, 10 days old under the 30-day default
    result = ours.active_commits(commits, heads, rules, NOW)
    assert lakefs_active <= result.commits
    assert [r.kind for r in result.reasons["p2"]] == ["dangling"]
