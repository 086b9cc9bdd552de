"""Active commits by lakeFS's documented rule, independent of the order of commit IDs.

lakeFS documents its retention as "for every branch, look at the HEAD of the branch that many days
ago; every commit at or since that HEAD must be retained". Its implementation
(``GetGarbageCollectionCommits`` in ``pkg/graveler/retention``) walks the first-parent chain of every
starting point in commit-ID order and shares one ``processed`` map between the walks: a walk stops
at a commit an earlier walk reached with an equal or longer retention *before* judging the child it
came from. At a fork (a commit that is the first parent of two commits) the answer then depends on
which child's starting point sorts first, and lakeFS can expire a commit that a branch pointed at
within its retention (``docs/formats/lakefs-export-hazards.md`` has the worked example). The GC must never
collect what either rule keeps, so it computes the documented rule itself and keeps the union.

The rule, computed here without any shortcut (every walk conceptually runs to the root):

* starting points are lakeFS's: every branch HEAD (hidden ones included) with its branch's rule, and
  every *ancestry leaf* (a commit that is nobody's first parent and no branch's HEAD) with the
  default rule. For legacy (version 0) merge commits lakeFS uses two different "first parents"
  (``parents[-1]`` to walk, ``parents[1]`` to find leaves); a commit that is a leaf by either
  reading is a starting point here, so every starting point of lakeFS's is one of ours;
* a branch HEAD is always active; a leaf is walked as the parent of a synthetic child created at
  the leaf's own creation time;
* along a walk, a parent is active iff the child it was reached from was created strictly after the
  walk's threshold ``now - days``.

"Some walk through child ``k`` has a threshold below ``k``'s creation" is the same as "the lowest
threshold of the walks through ``k`` is below it", so one pass over the first-parent forest (leaves
to roots) computes the lowest threshold through every commit: linear in the number of commits,
with the same answer as walking every starting point to the root (a property test checks it
against that brute force). Because every activation lakeFS performs is one of these, the result is
a superset of lakeFS's active set for every processing order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Set
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Literal

from lakefs_gc.errors import GcError

#: ``graveler.CommitVersionParentSwitch``: from this version on, the main parent is ``parents[0]``
COMMIT_VERSION_PARENT_SWITCH = 1

_UTC = timezone.utc
_EARLIEST = datetime.min.replace(tzinfo=_UTC)
_LATEST = datetime.max.replace(tzinfo=_UTC)


class CommitGraphError(GcError):
    """The commit graph is inconsistent (a missing parent or HEAD, a cycle, a naive date).

    Raised instead of skipping the bad part: skipping would report fewer active commits, and the
    GC would delete data those commits still reference (fail closed, docs/invariants.md, invariant 4).
    """


@dataclass(frozen=True, slots=True)
class Commit:
    """What retention needs to know about one commit (from the API: ``get_commit``/``log_commits``).

    Commits are immutable, so a caller may cache these by ID across marks. Slotted: a service
    holds one per commit of each repository's history (tens of thousands at lakeFS's bottom line).
    """

    commit_id: str
    creation: datetime
    parents: tuple[str, ...] = ()
    version: int = COMMIT_VERSION_PARENT_SWITCH
    #: the id of its tree's metarange ('' for none): not retention's, but kept here so that a
    #: history's graph is one dict (:class:`CommitMetaranges` reads it)
    metarange: str = ""

    def __post_init__(self) -> None:
        if self.creation.tzinfo is None or self.creation.utcoffset() is None:
            raise CommitGraphError(f"creation of commit {self.commit_id} must be timezone-aware")
        object.__setattr__(self, "parents", tuple(self.parents))

    @property
    def main_parent(self) -> str | None:
        """The parent a walk follows (``nodeFromCommit``): the last one of a legacy commit."""
        if not self.parents:
            return None
        return self.parents[-1] if self.version < COMMIT_VERSION_PARENT_SWITCH else self.parents[0]

    @property
    def leaf_scan_parent(self) -> str | None:
        """The parent lakeFS's leaf scan (``getAllFirstParents``) treats as "not a leaf"."""
        if not self.parents:
            return None
        if self.version < COMMIT_VERSION_PARENT_SWITCH and len(self.parents) > 1:
            return self.parents[1]
        return self.parents[0]


@dataclass(frozen=True)
class RetentionRules:
    """``GarbageCollectionRules``: days per branch, the default for the others and for leaves."""

    default_days: int
    branch_days: Mapping[str, int] = field(default_factory=dict)

    def days(self, branch: str | None) -> int:
        if branch is None:
            return self.default_days
        return self.branch_days.get(branch, self.default_days)


@dataclass(frozen=True, slots=True)
class StartingPoint:
    """A branch HEAD (``branch`` set) or an ancestry leaf (``branch`` None), with its threshold."""

    commit_id: str
    branch: str | None
    days: int
    threshold: datetime


KeepKind = Literal["head", "dangling", "within_retention"]


@dataclass(frozen=True, slots=True)
class KeepReason:
    """Why one commit is active, for ``explain`` and the summary.

    * ``head``: it is the HEAD of ``via.branch``;
    * ``dangling``: it is an ancestry leaf created after the default rule's threshold;
    * ``within_retention``: its first-parent child ``child`` was created after the threshold of
      ``via`` (the starting point with the longest retention whose walk passes through ``child``),
      so the commit was that branch's HEAD (or the leaf's ancestor) within the rule's days.
    """

    kind: KeepKind
    via: StartingPoint
    child: str | None = None


@dataclass(frozen=True)
class ActiveCommits:
    """The active set with one reason per kind of evidence per commit."""

    commits: frozenset[str]
    reasons: Mapping[str, tuple[KeepReason, ...]]
    starting_points: tuple[StartingPoint, ...]


def threshold(now: datetime, days: int) -> datetime:
    """``now.AddDate(0, 0, -days)`` in UTC, clamped where ``datetime`` cannot represent it."""
    try:
        return now - timedelta(days=days)
    except OverflowError:
        return _EARLIEST if days > 0 else _LATEST


def _validate(commits: Mapping[str, Commit], branches: Mapping[str, str]) -> None:
    for key, commit in commits.items():
        if key != commit.commit_id:
            raise CommitGraphError(f"commits map key {key!r} holds commit {commit.commit_id!r}")
        missing = [p for p in commit.parents if p not in commits]
        if missing:
            raise CommitGraphError(f"commit {key} has parents missing from the commit graph: {missing}")
    for branch, head in branches.items():
        if not branch:
            raise CommitGraphError(f"empty branch ID (HEAD {head})")
        if head not in commits:
            raise CommitGraphError(f"HEAD {head} of branch {branch} is missing from the commit graph")


def starting_points(
    commits: Mapping[str, Commit], branches: Mapping[str, str], rules: RetentionRules, now: datetime
) -> list[StartingPoint]:
    """Every branch HEAD with its rule and every ancestry leaf with the default rule.

    ``branches`` maps branch ID to HEAD commit ID and must include hidden branches. A leaf that is
    some branch's HEAD is a starting point only as that branch (as in lakeFS).
    """
    _validate(commits, branches)
    utc_now = now.astimezone(_UTC)
    walked = {p for c in commits.values() if (p := c.main_parent) is not None}
    scanned = {p for c in commits.values() if (p := c.leaf_scan_parent) is not None}
    heads = set(branches.values())
    points = [
        StartingPoint(head, branch, rules.days(branch), threshold(utc_now, rules.days(branch)))
        for branch, head in branches.items()
    ]
    default = threshold(utc_now, rules.default_days)
    points += [
        StartingPoint(cid, None, rules.default_days, default)
        for cid in commits
        if cid not in heads and (cid not in walked or cid not in scanned)
    ]
    return sorted(points, key=_strength)


def _strength(sp: StartingPoint) -> tuple[datetime, bool, str, str]:
    """Lowest threshold first; among equals a branch before a leaf, then by name and ID (stable)."""
    return sp.threshold, sp.branch is None, sp.branch or "", sp.commit_id


def _forest_order(commits: Mapping[str, Commit]) -> list[str]:
    """Commit IDs ordered so that every commit comes before its main parent (children first)."""
    pending_children: dict[str, int] = dict.fromkeys(commits, 0)
    for commit in commits.values():
        if commit.main_parent is not None:
            pending_children[commit.main_parent] += 1
    ready = sorted(cid for cid, n in pending_children.items() if n == 0)
    order: list[str] = []
    while ready:
        cid = ready.pop()
        order.append(cid)
        parent = commits[cid].main_parent
        if parent is not None:
            pending_children[parent] -= 1
            if pending_children[parent] == 0:
                ready.append(parent)
    if len(order) != len(commits):
        raise CommitGraphError("the first-parent chains of the commit graph contain a cycle")
    return order


def _strongest_through(
    commits: Mapping[str, Commit], points: list[StartingPoint]
) -> dict[str, StartingPoint]:
    """For every commit, the starting point with the lowest threshold whose walk passes through it."""
    best: dict[str, StartingPoint] = {}
    for sp in points:  # sorted strongest first: keep the first one per commit
        best.setdefault(sp.commit_id, sp)
    for cid in _forest_order(commits):
        parent = commits[cid].main_parent
        mine = best.get(cid)
        if parent is None or mine is None:
            continue
        theirs = best.get(parent)
        if theirs is None or _strength(mine) < _strength(theirs):
            best[parent] = mine
    return best


def active_commits(
    commits: Mapping[str, Commit],
    branches: Mapping[str, str],
    rules: RetentionRules,
    now: datetime,
) -> ActiveCommits:
    """The commits the documented rule keeps, whatever the order of their IDs.

    ``commits`` holds every commit of the repository keyed by ID (parents included); ``branches``
    maps every branch, hidden ones included, to its HEAD; ``now`` is read once by the caller.
    """
    if now.tzinfo is None or now.utcoffset() is None:
        raise CommitGraphError("now must be timezone-aware (UTC)")
    points = starting_points(commits, branches, rules, now)
    reasons: dict[str, list[KeepReason]] = {}
    for sp in points:
        if sp.branch is not None:
            reasons.setdefault(sp.commit_id, []).append(KeepReason("head", sp))
        elif commits[sp.commit_id].creation > sp.threshold:
            reasons.setdefault(sp.commit_id, []).append(KeepReason("dangling", sp))
    strongest = _strongest_through(commits, points)
    for cid, commit in commits.items():
        parent, via = commit.main_parent, strongest.get(cid)
        if parent is not None and via is not None and commit.creation > via.threshold:
            reasons.setdefault(parent, []).append(KeepReason("within_retention", via, child=cid))
    frozen = {cid: tuple(sorted(rs, key=_reason_order)) for cid, rs in reasons.items()}
    return ActiveCommits(frozenset(frozen), frozen, tuple(points))


def _reason_order(reason: KeepReason) -> tuple[int, tuple[datetime, bool, str, str], str]:
    kinds = {"head": 0, "within_retention": 1, "dangling": 2}
    return kinds[reason.kind], _strength(reason.via), reason.child or ""


@dataclass(frozen=True)
class RetentionCrossCheck:
    """lakeFS's active set next to ours; the mark keeps :attr:`active`, the union of both."""

    active: frozenset[str]
    #: commits lakeFS's export expired that the documented rule keeps (the fork-order hazard)
    kept_beyond_lakefs: frozenset[str]
    #: commits only lakeFS keeps: expected empty; kept anyway and reported, since it means the two
    #: computations disagree in a way this module does not explain (a commit created meanwhile, ...)
    lakefs_only: frozenset[str]

    def summary(self) -> dict[str, object]:
        """The commit half of ``summary.json``'s ``retention_cross_check`` (objects and bytes are
        added by the mark, which knows what only these commits reference)."""
        return {
            "active_commits": len(self.active),
            "kept_beyond_lakefs": sorted(self.kept_beyond_lakefs),
            "lakefs_only": sorted(self.lakefs_only),
        }


def cross_check(lakefs_active: Set[str], ours: Set[str]) -> RetentionCrossCheck:
    """Union of the two active sets, with what each one adds to the other."""
    return RetentionCrossCheck(
        active=frozenset(lakefs_active | ours),
        kept_beyond_lakefs=frozenset(ours - lakefs_active),
        lakefs_only=frozenset(lakefs_active - ours),
    )


class CommitMetaranges(Mapping[str, str]):
    """Commit id → metarange id, read from the commits themselves: a view, not a second dict the
    size of the history (a service holds its repositories' histories for its life)."""

    __slots__ = ("_commits",)

    def __init__(self, commits: Mapping[str, Commit]) -> None:
        self._commits = commits

    def __getitem__(self, commit_id: str) -> str:
        return self._commits[commit_id].metarange

    def __iter__(self) -> Iterator[str]:
        return iter(self._commits)

    def __len__(self) -> int:
        return len(self._commits)


@dataclass(frozen=True)
class CommitGraph:
    """What the cross-check reads from lakeFS: the commits (closed under parents), every branch
    (hidden ones included) with its HEAD, the rules, and each commit's metarange ('' for none)."""

    commits: Mapping[str, Commit]
    branches: Mapping[str, str]
    rules: RetentionRules
    metaranges: Mapping[str, str]
