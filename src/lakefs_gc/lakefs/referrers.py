"""Who references a few addresses, from the inputs a mark reads: for ``lakefs-gc explain``.

A mark reads the same things at scale on the executors (:mod:`lakefs_gc.spark.mark`); here the
driver reads them for a handful of addresses, which takes a few lakeFS calls and one read of each
distinct active range:

1. lakeFS's uncommitted dump (``prepareGarbageCollectionUncommitted``): staged or not;
2. lakeFS's active commits (``prepareGarbageCollectionCommits``) and the retention cross-check
   over the commit graph (:func:`~lakefs_gc.lakefs.commit_graph.cross_check_export`): the union
   is active, each commit with the branch and rule that keep it (:mod:`lakefs_gc.gc.retention`);
3. each active metarange and each distinct range once: which commit holds which address at which
   path, and the HEAD entries of the addresses' sizes (the identity-twin guard's pairs);
4. ``statObject`` for twin pairs, and each branch's uncommitted diff for staged addresses, to name
   the branch serving them.

Any error raises, like the mark: an ``explain`` that could not read a reference never answers
"nothing references it".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from lakefs_sdk.api.branches_api import BranchesApi

from lakefs_gc.gc import twins
from lakefs_gc.gc.explain import CommitRef, TwinFinding
from lakefs_gc.gc.retention import CommitGraph, KeepReason, active_commits
from lakefs_gc.lakefs.addresses import normalize_committed_address
from lakefs_gc.lakefs.client import LakeFSClient
from lakefs_gc.lakefs.commit_graph import CheckedCommits, LakeFSCommitGraph, cross_check_export
from lakefs_gc.lakefs.exports import read_commits_csv, read_uncommitted_addresses
from lakefs_gc.lakefs.ranges import metadata_location, open_sstable, range_ids_of_metarange
from lakefs_gc.sstable.graveler import iter_range_entries
from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
from lakefs_gc.storage.locations import StorageLocation, parse_location, uri_scheme

#: at most this many uncommitted diff entries are stat'ed to name the branch staging an address
DIFF_STAT_BUDGET = 1_000


@dataclass(frozen=True)
class Repo:
    """The repository as ``explain`` reaches it."""

    id: str
    storage_namespace: str
    namespace: StorageLocation
    options: StorageOptions

    def relative(self, address: str) -> str | None:
        """``address`` (relative, ``<namespace>/key`` or any location of the store) as a namespace-relative
        key; None when it lies outside the namespace."""
        if not uri_scheme(address):
            return address
        key = normalize_committed_address(address, "FULL", self.storage_namespace)
        if key is not None and not uri_scheme(key):
            return key
        location = parse_location(address, local_root=self.options.local_root)
        ns, base = self.namespace, self.namespace.key.rstrip("/") + "/"
        same = (location.kind, location.container, location.account) == (ns.kind, ns.container, ns.account)
        return location.key[len(base) :] if same and location.key.startswith(base) else None


@dataclass
class Referrers:
    """What references each target address (namespace-relative)."""

    committed: dict[str, list[CommitRef]] = field(default_factory=dict)
    staged: set[str] = field(default_factory=set)
    staged_on: dict[str, list[str]] = field(default_factory=dict)
    twins: dict[str, TwinFinding] = field(default_factory=dict)
    dump_run_id: str = ""
    export_run_id: str = ""


def find_referrers(
    client: LakeFSClient,
    graph: LakeFSCommitGraph,
    repo: Repo,
    targets: Mapping[str, int | None],
    *,
    start: datetime,
    timeout: float,
) -> Referrers:
    """Who references ``targets`` (address → size, None if unknown); see the module docstring."""
    found = Referrers()
    dump = client.prepare_uncommitted(repo.id, storage_namespace=repo.storage_namespace)
    fs, path = filesystem_for(parse_location(dump.location, local_root=repo.options.local_root), repo.options)
    staged = read_uncommitted_addresses(fs, path, required=dump.data_expected).column(0).to_pylist()
    found.staged = set(targets) & set(staged)
    found.dump_run_id = dump.run_id
    export = client.prepare_commits(repo.id, timeout=timeout)
    fs, path = filesystem_for(
        parse_location(export.location, local_root=repo.options.local_root), repo.options
    )
    exported = read_commits_csv(fs, path)
    found.export_run_id = export.run_id
    checked = cross_check_export(graph, repo.id, exported, export_run_id=export.run_id, start=start)
    tree = _Trees(client, repo, targets)
    tree.read(checked)
    found.committed = _commit_refs(checked, tree)
    found.staged_on = _staging_branches(client, graph, repo, found.staged, checked.graph)
    loose = {a: s for a, s in targets.items() if s is not None and a not in found.committed}
    found.twins = _twins(graph, repo, {a: s for a, s in loose.items() if a not in found.staged}, tree)
    return found


class _Trees:
    """Reads the active trees once: where each target sits, and HEAD entries of the targets' sizes."""

    def __init__(self, client: LakeFSClient, repo: Repo, targets: Mapping[str, int | None]) -> None:
        self.client, self.repo = client, repo
        self.targets = set(targets)
        self.sizes = {s for s in targets.values() if s is not None}
        self.fs, _ = filesystem_for(repo.namespace, repo.options)
        #: metarange → range ids
        self.ranges: dict[str, list[str]] = {}
        #: range id → [(address, path)] of the targets it holds
        self.holds: dict[str, list[tuple[str, str]]] = {}
        #: range id → [(path, size)] of entries of a target's size
        self.sized: dict[str, list[tuple[str, int]]] = {}
        #: HEAD metarange → the branches whose HEAD has that tree
        self.heads: dict[str, list[str]] = {}

    def read(self, checked: CheckedCommits) -> None:
        for branch, head in sorted(checked.graph.branches.items()):
            if checked.graph.metaranges.get(head):
                self.heads.setdefault(checked.graph.metaranges[head], []).append(branch)
        for commit_id in sorted(checked.check.active | set(checked.graph.branches.values())):
            metarange = checked.graph.metaranges.get(commit_id, "")
            if metarange and metarange not in self.ranges:
                self.ranges[metarange] = self._range_ids(metarange)
        for range_id in sorted({r for ids in self.ranges.values() for r in ids}):
            self._read_range(range_id)

    def _range_ids(self, metarange: str) -> list[str]:
        location = self._resolve(metarange, self.client.meta_range_location(self.repo.id, metarange))
        with open_sstable(self.fs, location, location.fs_path) as table:
            return list(range_ids_of_metarange(table))

    def _read_range(self, range_id: str) -> None:
        location = self._resolve(range_id, self.client.range_location(self.repo.id, range_id))
        holds, sized = [], []
        with open_sstable(self.fs, location, location.fs_path) as table:
            for key, entry in iter_range_entries(table):
                path = key.decode("utf-8", "surrogateescape")
                address = normalize_committed_address(
                    entry.address, entry.address_type, self.repo.storage_namespace
                )
                if address in self.targets:
                    holds.append((address, path))
                if entry.size in self.sizes:
                    sized.append((path, entry.size))
        self.holds[range_id], self.sized[range_id] = holds, sized

    def _resolve(self, object_id: str, api_location: str) -> StorageLocation:
        return metadata_location(
            self.repo.namespace, object_id, api_location=api_location, local_root=self.repo.options.local_root
        )

    def held_by(self, metarange: str) -> Iterator[tuple[str, str]]:
        for range_id in self.ranges.get(metarange, ()):
            yield from self.holds.get(range_id, ())


def _commit_refs(checked: CheckedCommits, tree: _Trees) -> dict[str, list[CommitRef]]:
    graph = checked.graph
    ours = active_commits(graph.commits, graph.branches, graph.rules, checked.now).reasons
    refs: dict[str, list[CommitRef]] = {}
    for commit_id in sorted(checked.check.active):
        kept_by = "cross_check" if commit_id in checked.check.kept_beyond_lakefs else "lakefs"
        commit = graph.commits.get(commit_id)
        why = _why(ours.get(commit_id, ()))
        for address, path in tree.held_by(graph.metaranges.get(commit_id, "")):
            date = commit.creation if commit else None
            refs.setdefault(address, []).append(CommitRef(commit_id, date, path, kept_by, why))
    return refs


def _why(keep: tuple[KeepReason, ...] | list[KeepReason]) -> str:
    """The strongest reason the documented rule keeps a commit, in words."""
    if not keep:
        return "lakeFS's export lists it (the documented rule alone would expire it)"
    reason = keep[0]
    rule = f"{reason.via.days}-day rule"
    if reason.kind == "head":
        return f"HEAD of branch {reason.via.branch!r}"
    if reason.kind == "dangling":
        return f"a dangling commit within the default {rule}"
    where = f"branch {reason.via.branch!r}" if reason.via.branch else "a dangling leaf"
    return f"was the HEAD of {where} within its {rule} (until commit {reason.child})"


def _staging_branches(
    client: LakeFSClient, graph: LakeFSCommitGraph, repo: Repo, staged: set[str], commits: CommitGraph
) -> dict[str, list[str]]:
    """Branch → which staged targets it serves, found through each branch's uncommitted diff."""
    found: dict[str, list[str]] = {}
    budget = DIFF_STAT_BUDGET
    for branch in sorted(commits.branches) if staged else ():
        for path in _uncommitted_paths(client, repo.id, branch):
            if budget <= 0:
                return found
            budget -= 1
            answer = graph.served_address(repo.id, branch, path)
            address = repo.relative(answer.address) if answer.address else None
            if address in staged:
                found.setdefault(address, []).append(f"{branch} at {path!r}")
    return found


def _uncommitted_paths(client: LakeFSClient, repository: str, branch: str) -> Iterator[str]:
    api, after = BranchesApi(client.sdk), ""
    while True:
        page: Any = client.call(
            "diff branch",
            repository,
            partial(
                api.diff_branch,
                repository,
                branch,
                after=after,
                amount=1000,
                _request_timeout=client.request_timeout,
            ),
            detail=branch,
        )
        for diff in page.results:
            if diff.type in ("added", "changed") and diff.path_type == "object":
                yield str(diff.path)
        if not page.pagination.has_more:
            return
        after = str(page.pagination.next_offset)


def _twins(
    graph: LakeFSCommitGraph, repo: Repo, loose: Mapping[str, int], tree: _Trees
) -> dict[str, TwinFinding]:
    """The identity-twin guard on the unreferenced targets: HEAD entries of their size, stat'ed."""
    entries = [
        twins.HeadEntry(branch, path, size, "")
        for metarange, branches in tree.heads.items()
        for range_id in tree.ranges.get(metarange, ())
        for path, size in tree.sized.get(range_id, ())
        for branch in branches
    ]
    pairs = twins.find_twins([twins.MarkedObject(a, s) for a, s in loose.items()], entries)
    answers = {}
    for branch, path in twins.stat_requests(pairs):
        answer = graph.served_address(repo.id, branch, path)
        if answer.kind == "address" and answer.address is not None:
            answer = twins.StatAnswer.at(repo.relative(answer.address))
        answers[(branch, path)] = answer
    return {d.address: TwinFinding(d.verdict.value, d.reason) for d in twins.decide(pairs, answers)}
