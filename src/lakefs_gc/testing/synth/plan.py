"""The shape of a synthetic history, decided before anything is written.

Pure and deterministic (one seeded ``random.Random``), and small: a few numbers per commit and
per branch, never per object, so it is the same few megabytes at 10K objects and at 20M. The
distributions are described in the package docstring.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from lakefs_gc.testing.synth.spec import SynthSpec

DAY = 86_400
HOUR = 3_600
#: garbage kinds in proportion: short-lived deletes, overwrites, deleted branches, reset uploads
GARBAGE_SHARES = {"deleted": 0.4, "overwritten": 0.3, "deleted-branch": 0.15, "reset": 0.15}
ZIPF_S = 1.1  # table popularity: the k-th hottest table gets ∝ 1/k^1.1 of the appends
BRANCH_COMMIT_WEIGHT = 0.1  # a branch commit adds about a tenth of what a main commit adds
STAGED_OVERWRITES = 0.1  # of a branch's staged objects, re-uploads of committed paths
TOMBSTONES = 0.01  # staged deletes of committed paths, per staged object
MAIN_STAGED_WEIGHT = 5.0  # main is where most uploads wait for a commit

Pick = Callable[[], int]


@dataclass(frozen=True, slots=True)
class MainCommit:
    date: int
    table: int
    append: int
    #: scratch objects written beside the partition, deleted by the next commit on the table
    short_lived: int
    #: parts of this commit's partition the next commit on the table re-uploads (new objects)
    overwrite_next: int


@dataclass(frozen=True)
class BranchPlan:
    index: int
    name: str
    fork: int  # index of the main commit it starts from
    dates: tuple[int, ...]
    appends: tuple[int, ...]
    tables: tuple[int, ...]
    hidden: bool
    deleted: bool
    staged: int
    staged_window: tuple[int, int]


@dataclass(frozen=True)
class Plan:
    now: int
    start: int
    threshold: int
    tables: int
    main: tuple[MainCommit, ...]
    branches: tuple[BranchPlan, ...]
    resets: tuple[tuple[int, int], ...]  # (upload time, objects)
    main_staged: int
    main_staged_window: tuple[int, int]

    def forks(self) -> dict[int, list[BranchPlan]]:
        out: dict[int, list[BranchPlan]] = {}
        for b in self.branches:
            out.setdefault(b.fork, []).append(b)
        return out


class _Timeline:
    """Times in ``[now - days, now - 1 h]`` that skip ±1 day around the retention threshold, so
    that which commits are active does not depend on when, within a day, the GC runs."""

    def __init__(self, now: int, days: int, threshold: int) -> None:
        self.lo, self.hi = now - days * DAY, now - HOUR
        self.gap_lo = min(max(self.lo, threshold - DAY), self.hi)
        self.gap = max(0, min(self.hi, threshold + DAY) - self.gap_lo)
        self.span = self.hi - self.lo - self.gap

    def at(self, u: float) -> int:
        t = self.lo + u * self.span
        return int(t + self.gap if t >= self.gap_lo else t)

    def coordinate(self, t: int) -> float:
        """Inverse of :meth:`at` (times inside the gap map to its start)."""
        if t >= self.gap_lo + self.gap:
            t -= self.gap
        elif t > self.gap_lo:
            t = self.gap_lo
        return min(1.0, max(0.0, (t - self.lo) / self.span))

    @property
    def old_end(self) -> float:
        """Coordinate below which times are older than the threshold minus a day."""
        return self.coordinate(self.gap_lo)


def make_plan(spec: SynthSpec, now: datetime) -> Plan:
    rng = random.Random(spec.seed)
    now_s = int(now.timestamp())
    threshold = now_s - spec.retention_days * DAY
    line = _Timeline(now_s, spec.days, threshold)
    deleted_count = max(1, spec.branches // 10) if spec.garbage else 0
    deleted_commits = [rng.randint(1, 3) for _ in range(deleted_count)]
    live_commits = (spec.commits - sum(deleted_commits)) // 3 if spec.branches > 1 else 0
    main_count = spec.commits - sum(deleted_commits) - live_commits
    if main_count < max(1, spec.commits // 2):  # few commits: main keeps at least half
        deleted_commits = [1] * min(deleted_count, spec.commits // 4)
        live_commits = min(live_commits, spec.commits // 4)
        main_count = spec.commits - sum(deleted_commits) - live_commits
    dates = [line.at((k + 0.5 + rng.uniform(-0.3, 0.3)) / main_count) for k in range(main_count)]
    old = sum(1 for d in dates if d < line.gap_lo)
    tables = spec.tables or max(1, min(1_000, main_count // 100))
    pick = _zipf(rng, tables)
    main_tables = [pick() for _ in range(main_count)]
    live = _live_branches(spec, rng, line, dates, live_commits, pick)
    deleted = _deleted_branches(spec, rng, line, dates[:old], deleted_commits, len(live), pick)
    eligible, recent = _churn_points(main_tables, old, {b.fork for b in live}, dates, threshold)
    weights = [rng.lognormvariate(0, 1) for _ in range(main_count)]
    branch_weights = [rng.lognormvariate(0, 1) * BRANCH_COMMIT_WEIGHT for b in live for _ in b.dates]
    sizes = _allocate(spec.objects, weights + branch_weights, minimum=1)
    appends, branch_sizes = sizes[:main_count], sizes[main_count:]
    live = _with_appends(live, branch_sizes)
    budget = _shares(spec.garbage)
    if not eligible:
        budget["reset"] += budget.pop("deleted") + budget.pop("overwritten")
    if not deleted:
        budget["reset"] += budget.pop("deleted-branch", 0)
    short = dict(zip(eligible, _spread(budget.get("deleted", 0), len(eligible)), strict=True))
    overwrite = {}
    for k, want in zip(eligible, _spread(budget.get("overwritten", 0), len(eligible)), strict=True):
        overwrite[k] = min(want, appends[k])
        budget["reset"] += want - overwrite[k]
    rate_short = budget.get("deleted", 0) / max(1, len(eligible))
    rate_overwrite = budget.get("overwritten", 0) / max(1, len(eligible))
    for k in recent:  # the same churn after the threshold: deleted and overwritten, but kept
        short[k] = round(rate_short * rng.uniform(0.5, 1.5))
        overwrite[k] = min(appends[k], round(rate_overwrite * rng.uniform(0.5, 1.5)))
    deleted = _deleted_sizes(deleted, budget.get("deleted-branch", 0))
    main = tuple(
        MainCommit(dates[k], main_tables[k], appends[k], short.get(k, 0), overwrite.get(k, 0))
        for k in range(main_count)
    )
    staged_weights = [rng.paretovariate(1.0) for _ in range(len(live) + 1)]
    staged_weights[0] *= MAIN_STAGED_WEIGHT
    staged = _allocate(spec.uncommitted, staged_weights)
    live = [replace(b, staged=n) for b, n in zip(live, staged[1:], strict=True)]
    resets = _resets(rng, line, budget["reset"], max(1, len(live)))
    return Plan(
        now=now_s, start=line.lo - HOUR, threshold=threshold, tables=tables, main=main,
        branches=tuple(live + deleted), resets=resets, main_staged=staged[0],
        main_staged_window=(line.at(0.5), line.hi),
    )  # fmt: skip


def _churn_points(
    tables: Sequence[int], old: int, pins: set[int], dates: Sequence[int], threshold: int
) -> tuple[list[int], list[int]]:
    """Main commits whose scratch data and overwritten parts the next commit on the same table
    removes: ``eligible`` ones make garbage (that next commit comes while main is still older than
    the retention, and no live branch starts in between, so no active commit holds them);
    ``recent`` ones are kept (active commits hold them)."""
    following: dict[int, int] = {}
    next_same = [-1] * len(tables)
    for k in range(len(tables) - 1, -1, -1):
        next_same[k] = following.get(tables[k], -1)
        following[tables[k]] = k
    pinned = [0]
    for k in range(len(tables)):
        pinned.append(pinned[-1] + (k in pins))
    eligible = [
        k for k in range(old) if 0 <= next_same[k] <= old - 1 and pinned[next_same[k]] == pinned[k]
    ]  # lifetime k .. next - 1: old, none the last old commit (active), none a live branch's start
    recent = [k for k in range(len(tables)) if dates[k] > threshold + DAY and next_same[k] >= 0]
    return eligible, recent


def _live_branches(
    spec: SynthSpec, rng: random.Random, line: _Timeline, dates: Sequence[int], commits: int,
    pick: Pick,
) -> list[BranchPlan]:  # fmt: skip
    """``branches - 1`` branches besides main, forked anywhere in its history; 40% never commit,
    the others share the branch commits by a Pareto(1.2) weight (a few busy branches)."""
    count = spec.branches - 1
    weights = [rng.paretovariate(1.2) if rng.random() < 0.6 else 0.0 for _ in range(count)]
    per_branch = _allocate(commits, weights) if count and any(weights) else [0] * count
    out = []
    for i in range(count):
        fork = rng.randrange(len(dates))
        start = line.coordinate(dates[fork])
        stamps = sorted(line.at(rng.uniform(start, 1.0)) for _ in range(per_branch[i]))
        stamps = [max(s, dates[fork] + 60 * (j + 1)) for j, s in enumerate(stamps)]
        out.append(BranchPlan(
            i, f"branch-{i:04d}", fork, tuple(stamps), (), tuple(pick() for _ in stamps),
            hidden=i == 1, deleted=False, staged=0, staged_window=(dates[fork] + 30, line.hi),
        ))  # fmt: skip
    return out


def _deleted_branches(
    spec: SynthSpec, rng: random.Random, line: _Timeline, old_dates: Sequence[int], commits: list[int],
    first_index: int, pick: Pick,
) -> list[BranchPlan]:  # fmt: skip
    """Branches that committed before the threshold, then were deleted with data still staged."""
    if len(old_dates) < 2:
        return []
    out = []
    for i, n in enumerate(commits):
        fork = rng.randrange(len(old_dates) - 1)
        lo, hi = old_dates[fork], old_dates[fork + 1]
        stamps = [lo + (hi - lo) * (j + 1) // (n + 2) for j in range(n)]
        out.append(BranchPlan(
            first_index + i, f"deleted-{i:04d}", fork, tuple(stamps), (), tuple(pick() for _ in stamps),
            hidden=False, deleted=True, staged=0, staged_window=(stamps[-1] + 60, stamps[-1] + 120),
        ))  # fmt: skip
    return out


def _with_appends(live: list[BranchPlan], sizes: list[int]) -> list[BranchPlan]:
    out, pos = [], 0
    for b in live:
        n = len(b.dates)
        out.append(replace(b, appends=tuple(sizes[pos : pos + n])))
        pos += n
    return out


def _deleted_sizes(deleted: list[BranchPlan], budget: int) -> list[BranchPlan]:
    """Two thirds of the deleted-branch garbage committed on them, a third staged when deleted."""
    committed = budget * 2 // 3
    per_commit = _spread(committed, sum(len(b.dates) for b in deleted))
    staged = _spread(budget - committed, len(deleted))
    out, pos = [], 0
    for b, s in zip(deleted, staged, strict=True):
        n = len(b.dates)
        out.append(replace(b, appends=tuple(per_commit[pos : pos + n]), staged=s))
        pos += n
    return out


def _resets(rng: random.Random, line: _Timeline, total: int, batches: int) -> tuple[tuple[int, int], ...]:
    """Uploads staged then reset (or deleted), at least two days old: only in storage."""
    if total <= 0:
        return ()
    batches = max(1, min(batches, total // 100 or 1))
    latest = line.coordinate(line.hi - 2 * DAY)
    return tuple((line.at(rng.uniform(0.0, latest)), n) for n in _spread(total, batches) if n)


def _zipf(rng: random.Random, tables: int) -> Pick:
    """Draws tables by Zipf popularity; the popular ones are spread over the key space."""
    cumulative, total = [], 0.0
    for rank in range(tables):
        total += 1.0 / (rank + 1) ** ZIPF_S
        cumulative.append(total)
    order = list(range(tables))
    rng.shuffle(order)

    def pick() -> int:
        return order[min(tables - 1, bisect.bisect_left(cumulative, rng.random() * total))]

    return pick


def _shares(total: int) -> dict[str, int]:
    out = {k: int(total * w) for k, w in GARBAGE_SHARES.items()}
    out["reset"] += total - sum(out.values())
    return out


def _spread(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` near-equal integers."""
    if parts <= 0:
        return []
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _allocate(total: int, weights: Sequence[float], *, minimum: int = 0) -> list[int]:
    """``total`` split in proportion to ``weights`` (largest remainder), each part at least
    ``minimum`` while ``total`` allows it."""
    n = len(weights)
    if n == 0:
        return []
    floor = minimum if total >= minimum * n else 0
    rest = total - floor * n
    scale = sum(weights)
    if scale <= 0:
        return [floor + s for s in _spread(rest, n)]
    exact = [rest * w / scale for w in weights]
    out = [int(x) for x in exact]
    short = rest - sum(out)
    for i in sorted(range(n), key=lambda i: out[i] - exact[i])[:short]:
        out[i] += 1
    return [floor + x for x in out]
