"""Which commits reference each group of objects, and so which groups a correct GC deletes.

Objects are written in groups that share a creation time and a lifetime: a partition appended
by a main commit ``a`` and removed (deleted, or overwritten at the same paths) by main commit
``e`` is in the trees of main commits ``a .. e-1`` and of every commit of every branch forked
from one of those (branches only add); a branch's partition is in its commit and the branch's
later ones; staged uploads of live branches are referenced by the uncommitted dump; reset uploads
and what was staged on deleted branches by nothing. With lakeFS's active commits
(:func:`~lakefs_gc.testing.retention.active_commits`, computed on the finished graph), a group
is live iff one of its commits is active, or it is staged: an O(commits) computation for any
number of objects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(slots=True)
class Group:
    first_seq: int
    count: int
    created: int  # epoch seconds: the objects' last-modified time and the time in their xid
    kind: str  # committed | overwritten | deleted | deleted-branch | staged | reset
    main_from: int = -1  # first main commit whose tree holds it
    main_to: int = -1  # first main commit that no longer does (-1: main's head still does)
    branch: int = -1  # plan index of the branch whose commit added it
    branch_from: int = 0  # position of that commit on the branch
    staged: bool = False  # staged on a live branch (only for groups no commit holds)


@dataclass
class Ledger:
    groups: list[Group] = field(default_factory=list)

    def add(self, group: Group) -> Group:
        if group.count > 0:
            self.groups.append(group)
        return group

    def split_off(self, group: Group, count: int, *, kind: str, main_to: int) -> None:
        """The first ``count`` objects of ``group`` leave main's tree at ``main_to``."""
        if count <= 0:
            return
        gone = Group(group.first_seq, count, group.created, kind, group.main_from, main_to)
        self.add(gone)
        group.first_seq += count
        group.count -= count  # an emptied group stays, with no objects


def liveness(
    active: set[str],
    main_ids: Sequence[str],
    forked: Mapping[int, Sequence[str]],
    branch_ids: Mapping[int, Sequence[str]],
) -> Callable[[Group], bool]:
    """``group -> referenced`` given the active commits.

    ``forked[i]`` lists the commits of every branch (live or deleted) forked from main commit
    ``i``; ``branch_ids[b]`` the commits of branch ``b`` in order.
    """
    prefix = [0]
    for i, commit in enumerate(main_ids):
        pinned = commit in active or any(c in active for c in forked.get(i, ()))
        prefix.append(prefix[-1] + int(pinned))
    from_here: dict[int, list[bool]] = {}
    for b, ids in branch_ids.items():
        suffix = [False] * (len(ids) + 1)
        for j in range(len(ids) - 1, -1, -1):
            suffix[j] = suffix[j + 1] or ids[j] in active
        from_here[b] = suffix

    def live(group: Group) -> bool:
        if group.main_from >= 0:
            end = group.main_to if group.main_to >= 0 else len(main_ids)
            return prefix[end] - prefix[group.main_from] > 0
        if group.branch >= 0:
            return from_here[group.branch][group.branch_from]
        return group.staged

    return live
