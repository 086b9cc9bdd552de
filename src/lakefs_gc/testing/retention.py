"""lakeFS's committed retention: which commits are *active*, computed exactly as lakeFS does.

This is a pure port of ``pkg/graveler/retention`` (``GetGarbageCollectionCommits``,
``GCStartingPointIterator``, ``nodeFromCommit``) and of ``getAllFirstParents`` in ``pkg/graveler/ref``.
The lakeFS-compatible test server uses it to write the commits CSV. A GC run trusts that CSV, so the
test server must answer what lakeFS would answer, quirks included, not what the documentation says.

Faithfully reproduced quirks (each one has a test):

* **Processing order can matter.** lakeFS's documentation says the order does not change the result.
  That is true when no commit is the first parent of two commits, but not in general. The short cut
  looks at the parent *before* judging the child it came from. Take a commit ``p`` that is the first
  parent of both ``a`` and ``b`` (two branches forked at ``p``). If the walk through ``a`` has already
  recorded ``p`` with an earlier-or-equal threshold, the walk through ``b`` stops at ``p`` without
  checking whether ``b`` is recent, so ``p`` can stay inactive. lakeFS walks the starting points in
  commit-ID order, so the outcome depends on the hashes. We do the same. The result is always a
  subset of the naive "walk every root to the end" rule, and differs from it only at such fork points.
* **Leaves of legacy commits with 3+ parents.** The walk takes ``parents[-1]`` for a legacy commit.
  The leaf scan takes ``parents[1]``. The two agree for the two-parent merges lakeFS actually writes.
  With three or more parents, ``parents[-1]`` is both walked and a dangling leaf, which is a second
  way for the order to matter.
* **Tags are not roots.** A commit reachable only through a tag is protected only as a dangling leaf,
  with the default retention.

Deliberate differences, all on input lakeFS cannot produce: every referenced commit (branch heads and
*all* parents, not only the first parents that are walked) must be in ``commits``, else a
:class:`RetentionError` is raised. lakeFS would fail mid-walk (docs/formats/lakefs-retention.md,
"Server caveat"), or never notice a missing second parent. Thresholds that overflow ``datetime`` are clamped
to ``datetime.min``/``max``. Go's ``AddDate`` lands millions of years away instead, and no commit date
can tell the two apart.

Calendar days: lakeFS uses ``now.AddDate(0, 0, -days)`` in the server's local time zone. We work in
UTC, where a calendar day is always 24 h, so ``now - timedelta(days=days)`` is exact and DST cannot
shift a threshold. A lakeFS server running in a DST zone may differ by one hour around a DST change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from lakefs_gc.errors import GcError

#: ``graveler.CommitVersionParentSwitch``: from this version on, the main parent is ``parents[0]``.
COMMIT_VERSION_PARENT_SWITCH = 1

_UTC = timezone.utc
_EARLIEST = datetime.min.replace(tzinfo=_UTC)
_LATEST = datetime.max.replace(tzinfo=_UTC)


class RetentionError(GcError):
    """The commit graph given to the retention computation is inconsistent.

    Raised instead of skipping the bad reference. If the computation skipped a missing commit, it
    would report fewer active commits, and the GC would delete the data those commits still reference.
    """


def _require_aware(value: datetime, what: str) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise RetentionError(f"{what} must be timezone-aware (UTC), got naive {value.isoformat()}")


@dataclass(frozen=True)
class CommitNode:
    """What retention needs to know about one commit (``graveler.Commit`` reduced).

    ``version`` below :data:`COMMIT_VERSION_PARENT_SWITCH` marks a legacy commit. A legacy merge
    commit lists its main parent last.
    """

    commit_id: str
    creation: datetime
    parents: tuple[str, ...] = ()
    version: int = COMMIT_VERSION_PARENT_SWITCH
    metarange_id: str = ""

    def __post_init__(self) -> None:
        _require_aware(self.creation, f"creation of commit {self.commit_id}")
        object.__setattr__(self, "parents", tuple(self.parents))


@dataclass(frozen=True)
class GCRules:
    """``graveler.GarbageCollectionRules``. lakeFS does not validate the values, and neither do we."""

    default_retention_days: int
    branch_retention_days: Mapping[str, int] = field(default_factory=dict)

    def retention_days(self, branch_id: str | None) -> int:
        """The branch's own rule if it has one, else the default (always the default for dangling)."""
        if branch_id is None:
            return self.default_retention_days
        return self.branch_retention_days.get(branch_id, self.default_retention_days)


@dataclass(frozen=True)
class StartingPoint:
    """``GCStartingPoint``: a branch HEAD (``branch_id`` set) or a dangling ancestry leaf (``None``)."""

    commit_id: str
    branch_id: str | None = None


def main_parent(node: CommitNode) -> str | None:
    """The parent a branch "came from" (``nodeFromCommit``). Only this chain is ever walked.

    Legacy (version 0) merge commits stored the merge source first and the destination last, so their
    main parent is the last one. For every other commit it is the first one.
    """
    if not node.parents:
        return None
    if node.version < COMMIT_VERSION_PARENT_SWITCH:
        return node.parents[-1]
    return node.parents[0]


def _leaf_scan_parent(node: CommitNode) -> str | None:
    """The parent ``getAllFirstParents`` marks as "not a leaf".

    It picks ``parents[1]`` for legacy commits, not ``parents[-1]``. The two differ only for legacy
    commits with three or more parents, which lakeFS never writes. The quirk is kept so the set of
    leaves is exactly lakeFS's.
    """
    if not node.parents:
        return None
    if node.version < COMMIT_VERSION_PARENT_SWITCH and len(node.parents) > 1:
        return node.parents[1]
    return node.parents[0]


def _validate(commits: Mapping[str, CommitNode], branches: Mapping[str, str]) -> None:
    """Fail before walking, rather than return a silently smaller active set."""
    for key, node in commits.items():
        if key != node.commit_id:
            raise RetentionError(f"commits map key {key!r} holds commit {node.commit_id!r}")
        missing = [parent for parent in node.parents if parent not in commits]
        if missing:
            raise RetentionError(f"commit {key} has parents missing from the commits map: {missing}")
    for branch_id, head in branches.items():
        if not branch_id:
            raise RetentionError(f"empty branch ID (head {head}): lakeFS reads it as 'no branch'")
        if head not in commits:
            raise RetentionError(f"branch {branch_id} HEAD {head} is missing from the commits map")


def starting_points(commits: Mapping[str, CommitNode], branches: Mapping[str, str]) -> list[StartingPoint]:
    """Every branch HEAD plus every ancestry leaf, in lakeFS's order (``GCStartingPointIterator``).

    ``branches`` maps branch ID to HEAD commit ID. The caller must include hidden branches: lakeFS
    lists them with ``ShowHidden: true``. Ancestry leaves are the commits that are nobody's first
    parent: HEADs of deleted branches, tips of merged-and-deleted branches, tag-only commits.

    The result is sorted by commit ID. lakeFS merges two ID-sorted streams: branches sorted by HEAD
    and leaves from the commit table. A leaf that is also a HEAD is emitted once, as the branch.
    Several branches with the same HEAD each give their own starting point, because the merge drops
    only the one leaf. Go's ``sort.Slice`` leaves their relative order unspecified. We break ties by
    branch ID, and a property test checks that this order does not change the active set.
    """
    _validate(commits, branches)
    first_parents = {p for node in commits.values() if (p := _leaf_scan_parent(node)) is not None}
    heads = set(branches.values())
    points = [StartingPoint(head, branch_id) for branch_id, head in branches.items()]
    points += [StartingPoint(cid) for cid in commits if cid not in first_parents and cid not in heads]
    # Branch IDs are never empty (validated), so "" sorts a leaf apart from any branch tie.
    return sorted(points, key=lambda sp: (sp.commit_id, sp.branch_id or ""))


def _get(commits: Mapping[str, CommitNode], commit_id: str) -> CommitNode:
    """Look up a commit; lakeFS fails the run on a missing one, and so do we (never skip it)."""
    try:
        return commits[commit_id]
    except KeyError:
        raise RetentionError(f"commit {commit_id} is missing from the commits map") from None


def _threshold(now: datetime, days: int) -> datetime:
    """``now.AddDate(0, 0, -days)`` in UTC, clamped where ``datetime`` cannot represent it."""
    try:
        return now - timedelta(days=days)
    except OverflowError:
        return _EARLIEST if days > 0 else _LATEST


def _walk(
    sp: StartingPoint,
    commits: Mapping[str, CommitNode],
    threshold: datetime,
    processed: dict[str, datetime],
    active: set[str],
) -> None:
    """One iteration of ``GetGarbageCollectionCommits``: walk the first-parent chain from ``sp``.

    A dangling leaf is treated as the parent of a synthetic child created at the same moment. The leaf
    is then judged by the same "child created after the threshold" rule as every other commit.
    """
    start = _get(commits, sp.commit_id)
    if sp.branch_id is not None:
        active.add(sp.commit_id)  # a branch HEAD is always active
        processed[sp.commit_id] = threshold
        child_creation, parent = start.creation, main_parent(start)
    else:
        child_creation, parent = start.creation, sp.commit_id
    while parent is not None:
        previous = processed.get(parent)
        if previous is not None and previous <= threshold:
            break  # walked before with an equal or longer retention; checked BEFORE judging the child
        if child_creation > threshold:  # strictly after: a child created exactly at the threshold is old
            active.add(parent)
        node = _get(commits, parent)
        processed[parent] = threshold
        child_creation, parent = node.creation, main_parent(node)


def active_commits_from(
    commits: Mapping[str, CommitNode],
    points: Iterable[StartingPoint],
    rules: GCRules,
    now: datetime,
) -> set[str]:
    """Active commits when the starting points are processed in the given order.

    :func:`active_commits` passes lakeFS's order. This entry point exists so tests can show where the
    order matters and where it does not (see the module docstring). ``now`` is injected. lakeFS reads
    the clock once per run, and so must the caller.
    """
    _require_aware(now, "now")
    now_utc = now.astimezone(_UTC)
    processed: dict[str, datetime] = {}
    active: set[str] = set()
    for sp in points:
        threshold = _threshold(now_utc, rules.retention_days(sp.branch_id))
        _walk(sp, commits, threshold, processed, active)
    return active


def active_commits(
    commits: Mapping[str, CommitNode],
    branches: Mapping[str, str],
    rules: GCRules,
    now: datetime,
) -> set[str]:
    """IDs of the commits lakeFS lists in the commits CSV (all rows ``expired=false``).

    ``commits`` holds every commit of the repository, keyed by ID. ``branches`` maps every branch ID,
    hidden ones included, to its HEAD. Raises :class:`RetentionError` if a HEAD or a parent is missing.
    """
    return active_commits_from(commits, starting_points(commits, branches), rules, now)
