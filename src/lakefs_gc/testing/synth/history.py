"""Writes a planned history: commits in time order, each branch when main reaches its fork point.

Main's tree is carried from commit to commit; a branch starts from main's tree at its fork,
writes its commits and is dropped, so only one or two trees are ever in memory (their range
lists and metarange blocks: O(objects / range size), a few MB at 20M objects). Commit rows
go to the server's SQLite state in batches, staged entries in chunks.
"""

from __future__ import annotations

import bisect
import heapq
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial

from lakefs_gc.testing.context import ServerContext
from lakefs_gc.testing.refs import Refs
from lakefs_gc.testing.retention import CommitNode
from lakefs_gc.testing.store import BranchRow, CommitRow
from lakefs_gc.testing.synth.blocks import Change
from lakefs_gc.testing.synth.ledger import Group, Ledger
from lakefs_gc.testing.synth.objects import Objects, partition_keys, scratch_keys
from lakefs_gc.testing.synth.plan import STAGED_OVERWRITES, TOMBSTONES, BranchPlan, MainCommit, Plan
from lakefs_gc.testing.synth.spec import SynthSpec
from lakefs_gc.testing.synth.tables import Tables, Tree, commit_tree

#: ``(first part, count) -> keys`` of a partition or scratch directory
KeyRange = Callable[[int, int], list[bytes]]
COMMIT_BATCH = 1_000
RECORD_CHUNK = 4_096  # objects made, encoded and hashed for range splits at a time
STAGE_CHUNK = 20_000
STAGED_GROUP = 10_000  # staged uploads share a time in groups of this many
PROGRESS_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class Partition:
    table: int
    date: str
    pid: int
    count: int
    main_index: int


@dataclass
class _Previous:
    """What a main commit leaves for the next one on the same table to delete or overwrite."""

    scratch: tuple[KeyRange, int, Group] | None = None  # its keys, how many, its group
    partition: Partition | None = None
    group: Group | None = None
    overwrite: int = 0


@dataclass
class History:
    ctx: ServerContext
    spec: SynthSpec
    plan: Plan
    namespace: str
    tables: Tables
    objects: Objects
    progress: Callable[[str], None]
    ledger: Ledger = field(default_factory=Ledger)
    nodes: dict[str, CommitNode] = field(default_factory=dict)
    main_ids: list[str] = field(default_factory=list)
    branch_ids: dict[int, list[str]] = field(default_factory=dict)
    heads: dict[str, tuple[str, bool]] = field(default_factory=dict)  # live branch -> (head, hidden)
    head_ranges: int = 0
    staged_entries: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.spec.seed + 1)
        self.refs = Refs(self.ctx)
        self.repo = self.spec.repository
        self.partitions: list[Partition] = []
        self._partition_commits: list[int] = []
        self._pending: list[CommitRow] = []
        self._pid = 0
        self._started = self._said = time.perf_counter()

    def run(self) -> None:
        start = datetime.fromtimestamp(self.plan.start, tz=timezone.utc)
        refs = Refs(ServerContext(self.ctx.store, self.ctx.settings, clock=lambda: start))
        refs.create_repository(self.repo, self.namespace, "main", "")
        rules = {"default_retention_days": self.spec.retention_days, "branches": []}
        self.ctx.store.put_gc_rules(self.repo, rules)
        head = refs.commit(self.repo, refs.branch(self.repo, "main").commit_id)
        self._node(head)
        tree, forks = Tree(), self.plan.forks()
        previous: dict[int, _Previous] = {}  # by table
        for k, planned in enumerate(self.plan.main):
            changes = self._main_changes(k, planned, previous.setdefault(planned.table, _Previous()))
            tree = commit_tree(self.tables, tree, changes)
            head = self._commit(head, tree, planned.date, f"ingest into t{planned.table:04d}")
            self.main_ids.append(head.id)
            for branch in forks.get(k, ()):
                self._branch(branch, head, tree)
            if time.perf_counter() - self._said >= PROGRESS_SECONDS:
                self._say(f"{k + 1:,}/{len(self.plan.main):,} main commits")
        self._flush_commits()
        self.head_ranges = len(tree.ranges)
        self.heads["main"] = (head.id, False)
        with self.ctx.store.transaction():
            for name, (commit_id, hidden) in self.heads.items():
                self.ctx.store.put_branch(self.repo, BranchRow(name, commit_id, hidden))
        self._staging()

    # -- commits --------------------------------------------------------------------------
    def _main_changes(self, k: int, planned: MainCommit, previous: _Previous) -> Iterator[Change]:
        """Delete the scratch data the table's previous commit left, re-upload the parts of its
        partition it planned to overwrite, append this commit's partition and scratch data: all
        at the table's end, so a commit rewrites one run of ranges. A lazy sorted stream: the
        objects are made as the tree takes them."""
        created = planned.date
        streams: list[Iterator[Change]] = []
        if previous.scratch is not None:
            keys, count, group = previous.scratch
            streams.append(_deletes(keys, count))
            group.main_to = k
        if previous.overwrite and previous.partition is not None and previous.group is not None:
            p, x = previous.partition, previous.overwrite
            self.ledger.split_off(previous.group, x, kind="overwritten", main_to=k)
            streams.append(self._new_objects(partial(partition_keys, p.table, p.date, p.pid), x, created,
                                             kind="committed", main_from=k)[1])  # fmt: skip
        partition = Partition(planned.table, _day(created), self._next_pid(), planned.append, k)
        appended, records = self._new_objects(
            partial(partition_keys, partition.table, partition.date, partition.pid), partition.count, created,
            kind="committed", main_from=k,
        )  # fmt: skip
        streams.append(records)
        if partition.count:
            self.partitions.append(partition)
            self._partition_commits.append(k)
        previous.scratch = None
        if planned.short_lived:
            keys = partial(scratch_keys, planned.table, partition.date, self._next_pid())
            scratch, records = self._new_objects(
                keys, planned.short_lived, created, kind="deleted", main_from=k
            )
            streams.append(records)
            previous.scratch = (keys, planned.short_lived, scratch)
        previous.partition, previous.group = partition, appended
        previous.overwrite = planned.overwrite_next
        return heapq.merge(*streams, key=_key)

    def _branch(self, branch: BranchPlan, head: CommitRow, tree: Tree) -> None:
        ids: list[str] = []
        kind = "deleted-branch" if branch.deleted else "committed"
        for j, (created, count, table) in enumerate(zip(branch.dates, branch.appends, branch.tables,
                                                         strict=True)):  # fmt: skip
            keys = partial(partition_keys, table, _day(created), self._next_pid())
            changes = self._new_objects(keys, count, created, kind=kind, branch=branch.index, branch_from=j)[
                1
            ]
            tree = commit_tree(self.tables, tree, changes)
            head = self._commit(head, tree, created, f"{branch.name}: write t{table:04d}")
            ids.append(head.id)
        self.branch_ids[branch.index] = ids
        if not branch.deleted:
            self.heads[branch.name] = (head.id, branch.hidden)

    def _new_objects(
        self, keys: KeyRange, count: int, created: int, *, kind: str, main_from: int = -1, branch: int = -1,
        branch_from: int = 0,
    ) -> tuple[Group, Iterator[Change]]:  # fmt: skip
        """Allocate ``count`` objects now; their records (and files) come as they are consumed."""
        first = self.objects.create(count, created)
        group = self.ledger.add(Group(first, count, created, kind, main_from, -1, branch, branch_from))
        return group, self._records(keys, first, count, created)

    def _records(self, keys: KeyRange, first: int, count: int, created: int) -> Iterator[Change]:
        for start in range(0, count, RECORD_CHUNK):
            n = min(RECORD_CHUNK, count - start)
            chunk = keys(start, n)
            values = self.objects.entries(first + start, n, created, graveler=True)
            yield from zip(chunk, values, self.tables.split.flags(chunk), strict=True)

    def _commit(self, parent: CommitRow, tree: Tree, date: int, message: str) -> CommitRow:
        row = self.refs._new_commit(
            parents=(parent.id,), message=message, metarange=tree.metarange_id, date=date, metadata={},
            generation=parent.generation + 1,
        )  # fmt: skip
        self._pending.append(row)
        self._node(row)
        if len(self._pending) >= COMMIT_BATCH:
            self._flush_commits()
        return row

    def _node(self, row: CommitRow) -> None:
        created = datetime.fromtimestamp(row.creation_date, tz=timezone.utc)
        self.nodes[row.id] = CommitNode(row.id, created, row.parents, row.version, row.meta_range_id)

    def _flush_commits(self) -> None:
        with self.ctx.store.transaction():
            for row in self._pending:
                self.ctx.store.put_commit(self.repo, row)
        self._pending = []

    def _next_pid(self) -> int:
        self._pid += 1
        return self._pid

    # -- staging --------------------------------------------------------------------------
    def _staging(self) -> None:
        """Staged uploads on main and the live branches (some re-uploading committed paths, a few
        deleting them), what deleted branches had staged, and reset uploads."""
        plan = self.plan
        self._stage("main", len(plan.main) - 1, plan.main_staged, plan.main_staged_window)
        for b in plan.branches:
            if b.deleted:
                self._storage_only(b.staged, b.staged_window[0], "deleted-branch")
            else:
                self._stage(b.name, b.fork, b.staged, b.staged_window)
        for created, count in plan.resets:
            self._storage_only(count, created, "reset")
        self._say(f"staged {self.staged_entries:,} entries")

    def _storage_only(self, count: int, created: int, kind: str) -> None:
        """Uploads nothing references any more (reset, or staged on a branch since deleted)."""
        first = self.objects.create(count, created)
        self.ledger.add(Group(first, count, created, kind))
        self.objects.entries(first, count, created, graveler=False)

    def _stage(self, branch: str, fork: int, count: int, window: tuple[int, int]) -> None:
        if count <= 0:
            return
        known = bisect.bisect_right(self._partition_commits, fork)  # partitions in the branch's tree
        rows: list[tuple[str, bytes | None]] = []
        used: set[int] = set()
        overwritten = 0
        for keys in self._committed_paths(known, round(count * STAGED_OVERWRITES), used):
            rows += self._staged_objects(keys, self.rng.randint(*window))
            rows = self._flush_staged(branch, rows)
            overwritten += len(keys)
        for keys in self._committed_paths(known, round(count * TOMBSTONES), used):
            rows += [(key.decode(), None) for key in keys]
        remaining = count - overwritten
        while remaining > 0:
            n = min(STAGED_GROUP, remaining)
            created = self.rng.randint(*window)
            table = self.rng.randrange(self.plan.tables)
            keys = partition_keys(table, _day(created), self._next_pid(), 0, n)
            rows += self._staged_objects(keys, created)
            rows = self._flush_staged(branch, rows)
            remaining -= n
        self._flush_staged(branch, rows, force=True)

    def _committed_paths(self, known: int, count: int, used: set[int]) -> list[list[bytes]]:
        """Paths of ``count`` committed objects from partitions a branch holds, each partition once."""
        out: list[list[bytes]] = []
        tries = 0
        while count > 0 and known and tries < 4 * known + 10:
            tries += 1
            i = self.rng.randrange(known)
            if i in used:
                continue
            used.add(i)
            p = self.partitions[i]
            n = min(count, p.count)
            out.append(partition_keys(p.table, p.date, p.pid, 0, n))
            count -= n
        return out

    def _staged_objects(self, keys: list[bytes], created: int) -> list[tuple[str, bytes | None]]:
        first = self.objects.create(len(keys), created)
        self.ledger.add(Group(first, len(keys), created, "staged", staged=True))
        entries = self.objects.entries(first, len(keys), created, graveler=False)
        return [(key.decode(), entry) for key, entry in zip(keys, entries, strict=True)]

    def _flush_staged(
        self, branch: str, rows: list[tuple[str, bytes | None]], *, force: bool = False
    ) -> list[tuple[str, bytes | None]]:
        if rows and (force or len(rows) >= STAGE_CHUNK):
            self.ctx.store.stage_many(self.repo, branch, rows)
            self.staged_entries += len(rows)
            return []
        return rows

    def _say(self, message: str) -> None:
        self._said = time.perf_counter()
        s = self.tables.stats
        self.progress(
            f"{message}: {self.objects.next_seq:,} objects, {s.ranges:,} ranges, "
            f"{s.metaranges:,} metaranges, "
            f"{s.bytes / 2**20:,.0f} MiB of metadata, {time.perf_counter() - self._started:,.0f}s"
        )


def _deletes(keys: KeyRange, count: int) -> Iterator[Change]:
    for start in range(0, count, RECORD_CHUNK):
        for key in keys(start, min(RECORD_CHUNK, count - start)):
            yield key, None, False


def _key(change: Change) -> bytes:
    return change[0]


def _day(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%d")
