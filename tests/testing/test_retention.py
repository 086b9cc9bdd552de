"""lakeFS committed retention (`lakefs_gc.testing.retention`): golden scenarios, edge cases, properties.

The properties compare the module with `_naive_active`, an independent reference written from the
declarative rule. It has no short cut, never mutates shared state, and compares ages instead of
thresholds. The two agree exactly when no commit is the first parent of two commits. Elsewhere lakeFS's
short cut can only drop fork points (see the module docstring), and the tests pin down that difference.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakefs_gc.errors import GcError
from lakefs_gc.testing.retention import (
    CommitNode,
    GCRules,
    RetentionError,
    StartingPoint,
    active_commits,
    active_commits_from,
    main_parent,
    starting_points,
)
from lakefs_gc.testing.server import LakeFSTestServer
from tests.testing.sdk import Lakefs

NOW = datetime(2026, 3, 29, 1, 30, tzinfo=timezone.utc)  # the night Europe switches to DST: irrelevant in UTC


def ago(days: float) -> datetime:
    return NOW - timedelta(days=days)


def node(cid: str, days_ago: float, *parents: str, version: int = 1) -> CommitNode:
    return CommitNode(cid, ago(days_ago), parents, version, f"mr-{cid}")


def graph(*nodes: CommitNode) -> dict[str, CommitNode]:
    return {n.commit_id: n for n in nodes}


def in_order(commits: Mapping[str, CommitNode], points: list[StartingPoint], rules: GCRules) -> set[str]:
    return active_commits_from(commits, points, rules, NOW)


# -- 1. esti/unified_gc_test.go TestUnifiedGC ------------------------------------------------------------


def _unified_gc_repo() -> tuple[dict[str, CommitNode], dict[str, frozenset[str]]]:
    """The commit graph TestUnifiedGC builds, with the committed files of each commit.

    The repository's first commit is created at real time, just before the test backdates every
    other commit. dev and dev2 branch from it. Uncommitted files and the final reset of dev do not
    change any commit.
    """
    history = [  # (commit, parent, days ago, files in the commit's tree)
        ("c0", None, 1 / 24, set()),
        ("m1", "c0", 14, {"file_1"}),
        ("m2", "m1", 14, {"file_1", "file_2"}),
        ("d1", "c0", 14, {"file_5"}),
        ("d2", "d1", 14, {"file_5", "file_6"}),
        ("e1", "c0", 14, {"file_8"}),
        ("e2", "e1", 14, {"file_8", "file_9"}),
        ("m3", "m2", 12, {"file_1"}),
        ("m4", "m3", 8, set()),
        ("d3", "d2", 8, {"file_6"}),
        ("e3", "e2", 8, {"file_8"}),
        ("e4", "e3", 6, set()),
        ("d4", "d3", 4, set()),
    ]
    commits = graph(*(node(c, d, *([p] if p else [])) for c, p, d, _ in history))
    return commits, {c: frozenset(files) for c, _, _, files in history}


def test_unified_gc_scenario_keeps_exactly_the_expected_committed_files() -> None:
    commits, files = _unified_gc_repo()
    branches = {"main": "m4", "dev": "d4"}  # dev2 (head e4) was deleted
    rules = GCRules(7, {"main": 10, "dev": 7})

    active = active_commits(commits, branches, rules, NOW)

    assert active == {"m4", "m3", "d4", "d3", "e4", "e3"}
    surviving = set().union(*(files[c] for c in active))
    kept = {"file_1": True, "file_2": False, "file_5": False, "file_6": True, "file_8": True}
    assert {f: f in surviving for f in [*kept, "file_9"]} == {**kept, "file_9": False}
    points = starting_points(commits, branches)
    for order in itertools.permutations(points):
        assert in_order(commits, list(order), rules) == active


# -- 2. lakeFS's own table (pkg/graveler/retention/active_commits_test.go TestActiveCommits) -------------

_UPSTREAM: dict[str, tuple[str, dict[str, int], str]] = {  # "commit:days_ago<parent,parent", heads, expected
    "two_branches": ("a:15 b:10<a c:10<a d:5<c e:5<b f:1<e", {"f": 7, "d": 3}, "b d e f"),
    "old_heads": ("a:15 b:20 c:20<a d:20<a", {"b": 7, "c": 7, "d": 7}, "b c d"),
    "all_commits_active": ("a:5 b:4<a c:3<b d:2<b e:1<b", {"d": 15, "e": 7, "c": 2}, "a b c d e"),
    "merge": ("a:7 b:6<a c:7 d:6<c,a", {"b": 3, "d": 10}, "b c d"),
    "two_branches_with_previously_expired": (
        "a:15 b:10<a c:10<a d:5<c e:7<b f:1<e",
        {"f": 7, "d": 3},
        "d e f",
    ),
    "merge_in_history": (
        "e:21 d:20<e f:19<e c:18<e b:17<d a:4<c g:4<b,e h:3<a,f",
        {"h": 14, "g": 7, "f": 7},
        "h a b c f g",
    ),
    "dangling_commits_active": (
        "a:15 b:10<a c:10<a d:5<c e:5<b f:1<e g:8<c h:7<g i:4<h",
        {"f": 7, "d": 3},
        "b d e f h i",
    ),
    "dangling_commits_expired": (
        "a:15 b:10<a c:10<a d:5<c e:5<b f:1<e g:8<c h:7<g i:6<h",
        {"f": 7, "d": 3},
        "b d e f",
    ),
    "dangling_from_before_expired": (
        "root:20 pre_expired:20<root e1:15<pre_expired b:10<e1 c:10<e1 d:5<c e:8<b f:1<e g:10<root h:6<g",
        {"f": 7, "d": 3},
        "d e f",
    ),
    "retained_by_non_leaf_head": (
        "root:20 x:14<root head2:10<x head1:9<head2",
        {"head1": 9, "head2": 12},
        "head1 head2 x",
    ),
    "reachable_previously_expired": (
        "ep1:8 ep2:8 e5:6<ep2 e4:7<ep1,ep2 e3:6<e5 e2:6<ep2 e1:7<e4 h3:1<e3 h2:1<e2 h1:1<e1",
        {"h1": 5, "h2": 5, "h3": 5},
        "h1 h2 h3 e1 e2 e3",
    ),
}


def _parse(spec: str) -> dict[str, CommitNode]:
    nodes = []
    for item in spec.split():
        cid, _, rest = item.partition(":")
        days, _, parents = rest.partition("<")
        nodes.append(node(cid, int(days), *(parents.split(",") if parents else ())))
    return graph(*nodes)


@pytest.mark.parametrize("case", sorted(_UPSTREAM))
def test_lakefs_active_commits_table(case: str) -> None:
    """Upstream names each branch after its HEAD; the default retention is 5 days."""
    spec, heads, expected = _UPSTREAM[case]
    commits, rules = _parse(spec), GCRules(5, heads)
    assert active_commits(commits, {h: h for h in heads}, rules, NOW) == set(expected.split())
    assert _naive_active(commits, {h: h for h in heads}, rules) == set(expected.split())


# -- 3. edge cases --------------------------------------------------------------------------------------


def test_main_parent_follows_the_commit_version() -> None:
    assert main_parent(node("r", 1)) is None
    assert main_parent(node("x", 1, "a", "b")) == "a"
    assert main_parent(node("x", 1, "a", "b", version=0)) == "b"
    assert main_parent(node("x", 1, "a", version=0)) == "a"


def test_a_tagged_commit_on_a_branch_chain_is_judged_like_any_other() -> None:
    """There is no tag input at all: a tag on ``t`` cannot keep ``r`` (its old parent) alive."""
    commits = graph(node("r", 20), node("t", 15, "r"), node("h", 1, "t"))
    assert active_commits(commits, {"main": "h"}, GCRules(7), NOW) == {"h", "t"}


@pytest.mark.parametrize(("days_ago", "expected"), [(20, set()), (3, {"x", "p"})])
def test_tag_only_commit_is_a_dangling_leaf_with_default_retention(days_ago: int, expected: set[str]) -> None:
    """``x``, HEAD of the deleted ``feature``, is still tagged; feature's 30 days no longer apply."""
    commits = graph(node("r", 40), node("p", 35, "r"), node("x", days_ago, "p"), node("h", 1, "r"))
    rules = GCRules(7, {"feature": 30})
    assert starting_points(commits, {"main": "h"}) == [StartingPoint("h", "main"), StartingPoint("x")]
    assert active_commits(commits, {"main": "h"}, rules, NOW) == {"h", "r"} | expected


def _merged_feature(f2_days_ago: int, *, legacy: bool) -> dict[str, CommitNode]:
    merge = node("m2", 2, "f2", "m1", version=0) if legacy else node("m2", 2, "m1", "f2")
    feature = [node("f1", 25, "m0"), node("f2", f2_days_ago, "f1")]
    return graph(node("m0", 30), node("m1", 20, "m0"), *feature, merge)


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize(("f2_days_ago", "feature"), [(10, set()), (3, {"f2", "f1"})])
def test_merged_deleted_branch_tip_is_a_dangling_leaf(
    f2_days_ago: int, feature: set[str], legacy: bool
) -> None:
    """The merge commit's second parent is never walked; the deleted feature's tip is a dangling leaf."""
    commits = _merged_feature(f2_days_ago, legacy=legacy)
    assert main_parent(commits["m2"]) == "m1"
    assert [sp.commit_id for sp in starting_points(commits, {"main": "m2"})] == ["f2", "m2"]
    assert active_commits(commits, {"main": "m2"}, GCRules(7), NOW) == {"m2", "m1"} | feature


def test_legacy_commit_with_three_parents_keeps_lakefs_leaf_quirk() -> None:
    """The walk uses parents[-1] (c), the leaf scan parents[1] (b), so c is both walked and a leaf.

    c sorts before x, so its own dangling walk records it first (9 days old: inactive). main's walk
    then stops at c, although x is recent. lakeFS behaves the same, and never writes such commits.
    """
    commits = graph(node("a", 9), node("b", 9), node("c", 9), node("x", 1, "a", "b", "c", version=0))
    assert starting_points(commits, {"main": "x"}) == [
        StartingPoint("a"),
        StartingPoint("c"),
        StartingPoint("x", "main"),
    ]
    assert active_commits(commits, {"main": "x"}, GCRules(7), NOW) == {"x"}
    assert in_order(commits, [StartingPoint("x", "main"), StartingPoint("c")], GCRules(7)) == {"x", "c"}


def test_hidden_branch_heads_are_active_however_old() -> None:
    commits = graph(node("r", 400), node("h", 100, "r"), node("m", 1, "r"))
    branches = {"main": "m", "_lakefs_hidden_import": "h"}  # the caller includes hidden branches
    assert active_commits(commits, branches, GCRules(7), NOW) == {"m", "h"}


@pytest.mark.parametrize(
    ("offset", "parent_active"), [(timedelta(0), False), (timedelta(microseconds=1), True)]
)
def test_exact_threshold_is_not_after(offset: timedelta, parent_active: bool) -> None:
    """A child created exactly at ``now - days`` is old, on a branch walk and for a dangling leaf."""
    at = ago(7) + offset
    commits = {
        "p": node("p", 30),
        "h": CommitNode("h", at, ("p",)),
        "q": node("q", 30),
        "d": CommitNode("d", at, ("q",)),
    }
    expected = {"h"} | ({"p", "d", "q"} if parent_active else set())
    assert active_commits(commits, {"main": "h"}, GCRules(7), NOW) == expected


@pytest.mark.parametrize(("main_days", "dev_days"), [(7, 14), (14, 7), (7, 7)])
def test_short_cut_on_one_chain_does_not_depend_on_order(main_days: int, dev_days: int) -> None:
    """dev's HEAD x lies on main's chain; whichever retention is seen first, the longer one wins."""
    commits = graph(node("z", 40), node("y", 12, "z"), node("x", 8, "y"), node("h", 1, "x"))
    rules = GCRules(3, {"main": main_days, "dev": dev_days})
    main, dev = StartingPoint("h", "main"), StartingPoint("x", "dev")
    expected = {"h", "x", "y", "z"} if 14 in (main_days, dev_days) else {"h", "x"}
    assert in_order(commits, [main, dev], rules) == in_order(commits, [dev, main], rules) == expected


@pytest.mark.parametrize("main_days", [10, 7])
def test_fork_point_depends_on_commit_id_order_exactly_like_lakefs(main_days: int) -> None:
    """main (quiet for 40 d) and dev (7 d, committed yesterday) forked at p.

    Walking main first records p with a threshold that is earlier than dev's, or equal to it. dev's
    walk then stops at p before noticing that its HEAD is recent, so p stays inactive. lakeFS orders by
    commit ID, so the hashes decide. lakeFS's documentation ("order does not matter") is wrong here:
    docs/formats/lakefs-retention.md, "Processing order".
    """
    rules = GCRules(7, {"main": main_days, "dev": 7})
    commits = graph(node("p", 50), node("a", 40, "p"), node("b", 1, "p"))
    assert active_commits(commits, {"main": "a", "dev": "b"}, rules, NOW) == {"a", "b"}
    swapped = graph(node("p", 50), node("b", 40, "p"), node("a", 1, "p"))
    assert active_commits(swapped, {"main": "b", "dev": "a"}, rules, NOW) == {"a", "b", "p"}
    assert _naive_active(commits, {"main": "a", "dev": "b"}, rules) == {"a", "b", "p"}


def test_commit_without_parents() -> None:
    commits = graph(node("r", 3), node("old", 30))
    assert active_commits(commits, {"main": "r"}, GCRules(7), NOW) == {"r"}
    assert active_commits(commits, {}, GCRules(7), NOW) == {"r"}  # recent dangling leaf keeps itself
    assert active_commits(commits, {}, GCRules(1), NOW) == set()


def test_branches_sharing_a_head_get_one_starting_point_each() -> None:
    commits = graph(node("p", 9), node("h", 8, "p"))
    branches = {"b": "h", "a": "h"}
    assert starting_points(commits, branches) == [StartingPoint("h", "a"), StartingPoint("h", "b")]
    assert active_commits(commits, branches, GCRules(1, {"a": 1, "b": 9}), NOW) == {"h", "p"}
    assert active_commits(commits, branches, GCRules(9, {"a": 1, "b": 2}), NOW) == {"h"}


@pytest.mark.parametrize(("days", "expected"), [(2**31 - 1, {"h", "y", "z"}), (-(2**31), {"h"})])
def test_extreme_retention_values_do_not_overflow(days: int, expected: set[str]) -> None:
    commits = graph(node("z", 9000), node("y", 8000, "z"), node("h", 7000, "y"))
    assert active_commits(commits, {"main": "h"}, GCRules(days), NOW) == expected


def test_first_parent_cycle_terminates() -> None:
    commits = graph(node("a", 1, "b"), node("b", 2, "a"))
    assert active_commits(commits, {"main": "a"}, GCRules(7), NOW) == {"a", "b"}


@pytest.mark.parametrize(
    ("commits", "branches", "message"),
    [
        (graph(node("h", 1)), {"main": "gone"}, "branch main HEAD gone"),
        (graph(node("h", 1, "gone")), {"main": "h"}, "commit h has parents missing"),
        (graph(node("h", 1, "p", "gone"), node("p", 2)), {"main": "h"}, "commit h has parents missing"),
        ({"k": node("h", 1)}, {}, "key 'k' holds commit 'h'"),
        (graph(node("h", 1)), {"": "h"}, "empty branch ID"),
    ],
)
def test_missing_or_inconsistent_commits_raise(
    commits: dict[str, CommitNode], branches: dict[str, str], message: str
) -> None:
    with pytest.raises(RetentionError, match=message) as info:
        active_commits(commits, branches, GCRules(7), NOW)
    assert isinstance(info.value, GcError)


def test_walk_in_caller_order_raises_on_missing_parent_and_naive_times() -> None:
    with pytest.raises(RetentionError, match="commit gone is missing"):
        in_order(graph(node("h", 1, "gone")), [StartingPoint("h", "main")], GCRules(7))
    with pytest.raises(RetentionError, match="timezone-aware"):
        active_commits({}, {}, GCRules(7), NOW.replace(tzinfo=None))
    with pytest.raises(RetentionError, match="timezone-aware"):
        CommitNode("x", datetime(2026, 1, 1), ())


def test_now_in_another_zone_is_the_same_instant() -> None:
    commits = graph(node("p", 30), node("h", 6.99, "p"))
    plus2 = NOW.astimezone(timezone(timedelta(hours=2)))
    assert active_commits_from(commits, starting_points(commits, {"m": "h"}), GCRules(7), plus2) == {"h", "p"}


# -- 4. properties against an independent reference -----------------------------------------------------


def _naive_active(commits: Mapping[str, CommitNode], branches: Mapping[str, str], rules: GCRules) -> set[str]:
    """Declarative rule, no short cut: a commit is active iff it is a branch HEAD, or for some root its
    first-parent child on that root's chain is younger than the root's retention. Roots are branch HEADs
    (branch rule) and commits no commit names as main parent (default rule, judged by their own age).
    """

    def first_parent(c: CommitNode) -> str | None:
        if len(c.parents) == 0:
            return None
        return c.parents[0] if c.version >= 1 else c.parents[len(c.parents) - 1]

    def chain(start: str) -> list[str]:  # start, its main parent, ... (stops on a repeat)
        out = [start]
        while (nxt := first_parent(commits[out[-1]])) is not None and nxt not in out:
            out.append(nxt)
        return out

    named, heads, default = (
        {first_parent(c) for c in commits.values()},
        set(branches.values()),
        rules.default_retention_days,
    )
    roots = [(h, rules.branch_retention_days.get(b, default)) for b, h in branches.items()]
    roots += [(c, default) for c in commits if c not in named and c not in heads]
    active = set(heads)
    for root, days in roots:
        walk = chain(root)
        # judge each commit by the age of the commit before it on the walk; a dangling root by its own age
        children = walk[:1] + walk[:-1] if root not in heads else [None, *walk[:-1]]
        for child, commit in zip(children, walk, strict=True):
            if child is not None and NOW - commits[child].creation < timedelta(days=days):
                active.add(commit)
    return active


@st.composite
def repos(draw: st.DrawFn, *, fork_free: bool) -> tuple[dict[str, CommitNode], dict[str, str], GCRules]:
    """Random DAG over ~30 days: IDs shuffled against creation order, hour-granular times so that
    creations land exactly on thresholds, 0-2 parents on earlier commits, legacy and current versions.
    With ``fork_free`` no commit is the main parent of two commits.
    """
    n = draw(st.integers(1, 10))
    ids = draw(st.permutations([f"{k:02x}" for k in range(n)]))
    commits: dict[str, CommitNode] = {}
    used_main: set[str] = set()
    for i, cid in enumerate(ids):
        earlier = ids[:i]
        free = [c for c in earlier if c not in used_main] if fork_free else list(earlier)
        main = draw(st.sampled_from([None, *free]))
        second = draw(st.sampled_from([None, *[c for c in earlier if c != main]])) if main else None
        version = draw(st.integers(0, 1))
        parents = () if main is None else (main,) if second is None else (main, second)
        if version == 0:
            parents = parents[::-1]
        used_main |= {main} if main else set()
        commits[cid] = CommitNode(cid, NOW - timedelta(hours=draw(st.integers(0, 30 * 24))), parents, version)
    names = [f"b{k}" for k in range(draw(st.integers(0, 4)))]
    branches = {b: draw(st.sampled_from(ids)) for b in names}
    per_branch = draw(st.dictionaries(st.sampled_from(names), st.integers(0, 30)) if names else st.just({}))
    return commits, branches, GCRules(draw(st.integers(0, 20)), per_branch)


def _forks(commits: Mapping[str, CommitNode]) -> set[str]:
    counts: dict[str, int] = {}
    for c in commits.values():
        if (p := main_parent(c)) is not None:
            counts[p] = counts.get(p, 0) + 1
    return {p for p, k in counts.items() if k > 1}


@settings(max_examples=300, deadline=None)
@given(repos(fork_free=True), st.randoms(use_true_random=False))
def test_without_forks_matches_the_naive_rule_in_any_order(
    repo: tuple[dict[str, CommitNode], dict[str, str], GCRules], rnd: random.Random
) -> None:
    commits, branches, rules = repo
    expected = _naive_active(commits, branches, rules)
    assert active_commits(commits, branches, rules, NOW) == expected
    points = starting_points(commits, branches)
    rnd.shuffle(points)
    assert in_order(commits, points, rules) == expected


@settings(max_examples=300, deadline=None)
@given(repos(fork_free=False))
def test_short_cut_only_ever_drops_non_head_fork_points(
    repo: tuple[dict[str, CommitNode], dict[str, str], GCRules],
) -> None:
    commits, branches, rules = repo
    active = active_commits(commits, branches, rules, NOW)
    naive = _naive_active(commits, branches, rules)
    assert set(branches.values()) <= active <= naive
    assert naive - active <= _forks(commits) - set(branches.values())


@settings(max_examples=300, deadline=None)
@given(repos(fork_free=False))
def test_starting_points_are_lakefs_ordered_and_tie_order_is_irrelevant(
    repo: tuple[dict[str, CommitNode], dict[str, str], GCRules],
) -> None:
    commits, branches, rules = repo
    points = starting_points(commits, branches)
    assert [sp.commit_id for sp in points] == sorted(sp.commit_id for sp in points)
    assert sorted((sp.branch_id, sp.commit_id) for sp in points if sp.branch_id) == sorted(branches.items())
    main_parents = {main_parent(c) for c in commits.values()}
    leaves = {sp.commit_id for sp in points if sp.branch_id is None}
    assert leaves == set(commits) - main_parents - set(branches.values())
    groups = itertools.groupby(points, lambda sp: sp.commit_id)
    reversed_ties = [sp for _, group in groups for sp in [*group][::-1]]
    assert in_order(commits, reversed_ties, rules) == active_commits(commits, branches, rules, NOW)


def test_prepare_commits_sees_every_head_when_a_commit_lands_between_its_reads(
    server: LakeFSTestServer, lakefs: Lakefs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """lakeFS's walk looks commits up one by one, so a commit made while it runs never fails it. The
    test server reads the repository's branches and commits in two queries: a commit landing between
    them must not leave a branch HEAD outside the commits read ("missing from the commits map")."""
    lakefs.create_repo("race", "local://race")
    lakefs.set_rules("race", 7)
    lakefs.upload("race", "main", "a", b"a")
    lakefs.commit("race", "main", "first")
    store, landed = server.store, []

    def then_a_commit(read: Callable[[str], Any]) -> Callable[[str], Any]:
        def reading(repo: str) -> Any:
            rows = read(repo)
            if not landed:  # once, right after whichever of the two reads comes first
                landed.append(True)
                lakefs.upload("race", "main", "b", b"b")  # through the API, from the serving thread
                landed.append(lakefs.commit("race", "main", "in between").id)
            return rows

        return reading

    monkeypatch.setattr(store, "list_branches", then_a_commit(store.list_branches))
    monkeypatch.setattr(store, "list_commits", then_a_commit(store.list_commits))
    lakefs.internal.prepare_garbage_collection_commits("race")
    assert len(landed) == 2, "the commit landed between the reads"
