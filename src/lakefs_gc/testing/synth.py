"""Synthetic repositories at scale, written straight into the test server's state and storage.

A history of ``commits`` commits over ``days`` days with ``objects`` committed objects, ``branches``
branches (one hidden, some deleted), ``uncommitted`` staged objects and ``garbage`` objects of
every kind lakeFS's GC collects: deleted and overwritten data past retention, data of deleted
branches, and uploads that were staged then reset. Paths grow in key order and deletions hit
contiguous blocks, as partitioned tables do, so each commit rewrites only a few ranges.

The result comes with a manifest of every physical object and whether a correct GC must delete
it, derived from lakeFS's retention (:mod:`.retention`) and the written trees: the ground truth
for differential tests and benchmarks.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lakefs_gc.lakefs.xid import new_descending_xid, new_xid
from lakefs_gc.sstable import AddressType, Entry
from lakefs_gc.sstable.catalog import decode_address, encode_entry
from lakefs_gc.sstable.graveler import unmarshal_value
from lakefs_gc.testing.context import ServerContext
from lakefs_gc.testing.refs import Refs
from lakefs_gc.testing.retention import CommitNode, GCRules, active_commits
from lakefs_gc.testing.store import BranchRow, CommitRow

MANIFEST_SCHEMA = pa.schema(
    [("address", pa.string()), ("size", pa.int64()), ("last_modified", pa.timestamp("s", tz="UTC")),
     ("kind", pa.string()), ("garbage", pa.bool_())]
)  # fmt: skip


@dataclass(frozen=True)
class SynthSpec:
    repository: str = "synth"
    namespace: str | None = None  # default local://<repository>
    objects: int = 10_000
    commits: int = 100
    days: int = 30
    branches: int = 10  # existing at the end, main included; deleted ones come on top
    uncommitted: int = 1_000
    garbage: int = 1_000
    retention_days: int = 7
    object_size: int = 16
    seed: int = 0


@dataclass
class SynthReport:
    repository: str
    namespace: str
    seconds: float = 0.0
    physical_objects: int = 0
    commits: int = 0
    branches: int = 0
    live: int = 0
    garbage: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


@dataclass
class _Object:
    address: str
    size: int
    mtime: datetime
    kind: str


class Synthesizer:
    def __init__(
        self, ctx: ServerContext, refs: Refs, spec: SynthSpec, progress: Callable[[str], None]
    ) -> None:
        self.ctx, self.refs, self.spec, self.progress = ctx, refs, spec, progress
        self.rng = random.Random(spec.seed)
        self.now = ctx.now()
        self.objects: list[_Object] = []
        self.seq = 0
        self.slice = ""
        self.slice_count = 0
        self.namespace = spec.namespace or f"local://{spec.repository}"

    # -- building blocks ------------------------------------------------------------------
    def _write_object(self, when: datetime, kind: str) -> Entry:
        if self.slice_count == 0 or self.slice_count >= self.ctx.settings.slice_objects:
            self.slice, self.slice_count = new_descending_xid(when), 0
        self.slice_count += 1
        address = f"data/{self.slice}/{new_xid(when)}"
        ns = self.ctx.namespace_store(self.namespace)
        data = address.encode()[-self.spec.object_size :].rjust(self.spec.object_size, b".")
        if ns.is_local:
            path = ns.path(address)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, data)
            os.close(fd)
            stamp = int(when.timestamp() * 1e9)
            os.utime(path, ns=(stamp, stamp))
        else:
            ns.put(address, data)
        self.objects.append(_Object(address, len(data), when, kind))
        stamp_ns = int(when.timestamp()) * 1_000_000_000
        return Entry(
            address, AddressType.RELATIVE, len(data), f"{self.seq:032x}", stamp_ns, "application/octet-stream"
        )

    def _path(self, prefix: str) -> bytes:
        self.seq += 1
        return f"{prefix}/part-{self.seq:010d}.parquet".encode()

    def _commit(
        self, branch: str, parent: CommitRow, changes: dict[bytes, Entry | None], when: datetime
    ) -> CommitRow:
        trees = self.ctx.trees(self.namespace)
        metarange = trees.apply(parent.meta_range_id, changes) if changes else parent.meta_range_id
        commit = self.refs._new_commit(
            parents=(parent.id,), message=f"synthetic commit on {branch}", metarange=metarange,
            date=int(when.timestamp()), metadata={}, generation=parent.generation + 1,
        )  # fmt: skip
        self.ctx.store.put_commit(self.spec.repository, commit)
        return commit

    # -- the history ----------------------------------------------------------------------
    def run(self, manifest: Path | None = None) -> SynthReport:
        started = time.perf_counter()
        spec, store = self.spec, self.ctx.store
        repo = self.refs.create_repository(spec.repository, self.namespace, "main", "")
        rule = {"default_retention_days": spec.retention_days, "branches": []}
        store.put_gc_rules(repo.id, rule)
        head = self.refs.commit(repo.id, self.refs.branch(repo.id, "main").commit_id)
        dates = self._commit_dates()
        safe = self.now - timedelta(days=spec.retention_days + 1)
        old = [k for k, d in enumerate(dates) if d < safe]
        budget = _split(spec.garbage, {"deleted": 4, "overwritten": 3, "deleted-branch": 1.5, "reset": 1.5})
        deletes, overwrites = _spread(budget["deleted"], len(old)), _spread(budget["overwritten"], len(old))
        per_commit = _spread(spec.objects, spec.commits)
        main_commits: list[CommitRow] = []
        tables: list[bytes] = []  # live table paths, in key order
        index: dict[bytes, int] = {}  # path -> position of its object in self.objects
        doomed: list[bytes] = []
        for k, when in enumerate(dates):
            changes: dict[bytes, Entry | None] = {}
            for _ in range(per_commit[k]):
                path = self._path(f"tables/t{k // 10:05d}")
                changes[path] = self._write_object(when, "committed")
                index[path] = len(self.objects) - 1
                tables.append(path)
            if k in old:
                i = old.index(k)
                changes.update(dict.fromkeys(doomed))
                doomed = []
                if i + 1 < len(old):  # a doomed block must be deleted by a later old commit
                    for _ in range(deletes[i]):
                        path = self._path(f"scratch/c{k:05d}")
                        changes[path] = self._write_object(when, "deleted")
                        doomed.append(path)
                self._overwrite(tables, index, overwrites[i], when, changes, upto=len(tables) - per_commit[k])
            head = self._commit("main", head, changes, when)
            main_commits.append(head)
            if k % 100 == 99:
                self.progress(f"{k + 1}/{spec.commits} commits, {len(self.objects):,} objects")
        store.put_branch(repo.id, BranchRow("main", head.id, False))
        self._branches(repo.id, main_commits, [main_commits[k] for k in old], budget["deleted-branch"])
        self._staging(repo.id, spec.uncommitted, budget["reset"])
        report = self._expected(repo.id, manifest)
        report.seconds = time.perf_counter() - started
        return report

    def _commit_dates(self) -> list[datetime]:
        """Spread over ``days``, keeping clear of the retention threshold (±1 day) so that the
        expected outcome does not depend on when, within the next day, the GC runs."""
        spec = self.spec
        start, end = self.now - timedelta(days=spec.days), self.now - timedelta(hours=1)
        threshold = self.now - timedelta(days=spec.retention_days)
        out = []
        for k in range(spec.commits):
            when = start + (end - start) * (k + 1) / (spec.commits + 1)
            if abs(when - threshold) < timedelta(days=1):
                when = (
                    threshold + timedelta(days=1, hours=1)
                    if when > threshold
                    else threshold - timedelta(days=1)
                )
            out.append(when)
        return out

    def _overwrite(
        self, tables: list[bytes], index: dict[bytes, int], count: int, when: datetime,
        changes: dict[bytes, Entry | None], upto: int,
    ) -> None:  # fmt: skip
        """Re-upload a contiguous block of older paths: their previous objects become garbage."""
        if count <= 0 or upto <= 0:
            return
        start = self.rng.randrange(max(1, upto - count))
        for path in tables[start : start + min(count, upto)]:
            self.objects[index[path]].kind = "overwritten"
            changes[path] = self._write_object(when, "committed")
            index[path] = len(self.objects) - 1

    def _branches(self, repo: str, main: list[CommitRow], old: list[CommitRow], garbage: int) -> None:
        """``branches - 1`` live branches besides main (one hidden) and, for the branch garbage,
        about a fifth as many deleted ones whose commits are past retention."""
        spec, store = self.spec, self.ctx.store
        deleted = max(1, spec.branches // 5) if garbage and old else 0
        per_deleted = _spread(garbage, deleted)
        for i in range(deleted):  # commit on a branch from an old commit, then delete the branch
            base = old[self.rng.randrange(len(old))]
            when = datetime.fromtimestamp(base.creation_date, tz=timezone.utc) + timedelta(minutes=5)
            changes: dict[bytes, Entry | None] = {}
            for _ in range(per_deleted[i]):
                changes[self._path(f"branches/deleted-{i:04d}")] = self._write_object(when, "deleted-branch")
            self._commit(f"deleted-{i}", base, changes, when)
        recent = [c for c in main if c not in old] or main  # forks after the garbage was made
        for i in range(max(0, spec.branches - 1)):
            base = recent[self.rng.randrange(len(recent))]
            row_head = base
            if i % 2 == 0:  # half of the branches carry a commit of their own
                when = datetime.fromtimestamp(base.creation_date, tz=timezone.utc) + timedelta(minutes=10)
                changes = {self._path(f"branches/b{i:04d}"): self._write_object(when, "committed")}
                row_head = self._commit(f"branch-{i}", base, changes, when)
            store.put_branch(repo, BranchRow(f"branch-{i:04d}", row_head.id, i == 1))  # one hidden

    def _staging(self, repo: str, uncommitted: int, reset: int) -> None:
        """Staged objects on main and branches; reset ones exist only in storage."""
        branches = [b.id for b in self.ctx.store.list_branches(repo)]
        when = self.now - timedelta(days=max(2, self.spec.days // 2))
        staged: dict[str, list[tuple[str, bytes | None]]] = {}
        for _ in range(uncommitted):
            branch = branches[self.rng.randrange(len(branches))]
            entry = self._write_object(when, "staged")
            staged.setdefault(branch, []).append((self._path("staged").decode(), encode_entry(entry)))
        for branch, items in staged.items():
            self.ctx.store.stage_many(repo, branch, items)
        for _ in range(reset):
            self._write_object(when, "reset")

    # -- ground truth ---------------------------------------------------------------------
    def _expected(self, repo: str, manifest: Path | None) -> SynthReport:
        store, trees = self.ctx.store, self.ctx.trees(self.namespace)
        rows = store.list_commits(repo)
        commits = {c.id: _node(c) for c in rows}
        branches = {b.id: b.commit_id for b in store.list_branches(repo)}
        rules = GCRules(self.spec.retention_days, {})
        active = active_commits(commits, branches, rules, self.now)
        range_ids = {
            r.id for c in active if commits[c].metarange_id for r in trees.ranges(commits[c].metarange_id)
        }
        referenced: set[str] = set()
        for range_id in range_ids:
            for _key, value in trees.range_records(range_id):
                address, kind = decode_address(unmarshal_value(value)[1])
                if kind is AddressType.RELATIVE:
                    referenced.add(address)
        for branch in branches:
            for _path, raw in store.iter_staging(repo, branch):
                if raw is not None:
                    referenced.add(decode_address(raw)[0])
        report = SynthReport(repo, self.namespace, commits=len(rows), branches=len(branches))
        garbage = [o.address not in referenced for o in self.objects]
        report.physical_objects = len(self.objects)
        report.garbage = sum(garbage)
        report.live = report.physical_objects - report.garbage
        for o, g in zip(self.objects, garbage, strict=True):
            key = f"{o.kind}:{'garbage' if g else 'live'}"
            report.by_kind[key] = report.by_kind.get(key, 0) + 1
        if manifest is not None:
            self._write_manifest(manifest, garbage)
        return report

    def _write_manifest(self, path: Path, garbage: list[bool]) -> None:
        table = pa.table(
            {
                "address": [o.address for o in self.objects],
                "size": [o.size for o in self.objects],
                "last_modified": [o.mtime for o in self.objects],
                "kind": [o.kind for o in self.objects],
                "garbage": garbage,
            },
            schema=MANIFEST_SCHEMA,
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)


def synthesize(
    ctx: ServerContext,
    spec: SynthSpec,
    *,
    manifest: Path | None = None,
    progress: Callable[[str], None] = print,
) -> SynthReport:
    """Write the repository ``spec`` describes into the server state and storage of ``ctx``."""
    return Synthesizer(ctx, Refs(ctx), spec, progress).run(manifest)


def _node(c: CommitRow) -> CommitNode:
    created = datetime.fromtimestamp(c.creation_date, tz=timezone.utc)
    return CommitNode(c.id, created, c.parents, c.version, c.meta_range_id)


def _spread(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` near-equal integers."""
    if parts <= 0:
        return []
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _split(total: int, weights: dict[str, float]) -> dict[str, int]:
    scale = sum(weights.values())
    out = {k: int(total * w / scale) for k, w in weights.items()}
    first = next(iter(out))
    out[first] += total - sum(out.values())
    return out
