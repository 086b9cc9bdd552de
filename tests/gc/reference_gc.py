"""A reference model of one GC run, from the lakeFS API and the file system only
(docs/formats/lakefs-gc-api.md, "What a GC computes").

    expected deleted = { listed objects older than the cutoff }
                     − { physical addresses of every object of every ACTIVE commit }
                     − { physical addresses of everything visible on every branch, hidden ones included }

It does not import ``lakefs_gc``'s GC, Spark or lakeFS-client code: the active commits come from the
independent reference of ``tests/testing/test_retention_property.py`` over the commit graph read back
through lakefs-sdk, the referenced addresses from listing objects at those commits and on every branch,
and the listing from walking the storage namespace on the local disk.

* listed: files under ``data/`` at least two levels deep (``data/<slice>/<xid>``, also sharded layouts),
  plus files at the namespace root other than ``dummy``; never ``_lakefs/``, never a file directly under
  ``data/`` (lakeFS's client lists it under a key that does not exist: lakefs-storage.md, "Namespace layout").
* visible on a branch = staged and committed entries with tombstones applied; a tombstone hides a
  committed entry, but that entry is in the branch's HEAD commit, which is always active.
* ``restaged_identical`` names the referenced addresses lakeFS's own exports miss: a staged entry with
  the same identity as the HEAD entry it shadows (the same bytes uploaded again) but another address.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.testing.sdk import Lakefs
from tests.testing.test_retention_property import Rules, paged, read_graph, reference_active

LOCAL_SCHEME = "local://"


def namespace_files(root: Path) -> dict[str, int]:
    """Every file under the namespace root (``_lakefs/`` included): relative key -> mtime in ns."""
    files = {}
    for path in root.rglob("*"):
        if path.is_file():
            files[path.relative_to(root).as_posix()] = path.stat().st_mtime_ns
    return files


def is_listed(key: str) -> bool:
    """What a GC run may list and delete: ``data/<a>/<b>...`` or a root file other than ``dummy``."""
    parts = key.split("/")
    if parts[0] == "data":
        return len(parts) >= 3 and all(parts)
    return len(parts) == 1 and key != "dummy"


def relative_address(physical_address: str, root: Path) -> str | None:
    """The namespace-relative key of a ``local://`` physical address; None outside the namespace."""
    prefix = f"{LOCAL_SCHEME}{root}/"
    return physical_address[len(prefix) :] if physical_address.startswith(prefix) else None


@dataclass(frozen=True)
class Reading:
    """One referenced object as the API shows it: read ``path`` at ``ref``, expect the file's bytes."""

    ref: str
    path: str


@dataclass
class References:
    """Referenced addresses, each with the (ref, path) readings that reach it."""

    readings: dict[str, list[Reading]] = field(default_factory=dict)
    #: staged entries equal in content (lakeFS identity) to the HEAD entry they shadow, at another address
    restaged_identical: set[str] = field(default_factory=set)

    def add(self, address: str | None, reading: Reading) -> None:
        if address is not None:  # None: outside the namespace, never listed, never collected
            self.readings.setdefault(address, []).append(reading)

    @property
    def addresses(self) -> set[str]:
        return set(self.readings)


def objects_at(lakefs: Lakefs, repo: str, ref: str) -> Iterator[Any]:
    """Every object visible at ``ref`` (a commit ID or a branch: staged + committed, tombstones applied)."""
    yield from paged(lakefs.objects.list_objects, repo, ref, amount=3)


def _restaged_identical(committed: Any, staged: Any) -> bool:
    """A staged entry lakeFS's ``DiffUncommitted`` skips: same identity as HEAD's, another address.

    The identity (``catalog.EntryToValue``) hashes size, etag, metadata and content type, not the
    address, so such an entry is visible on the branch but not in the uncommitted export.
    """

    def identity(stats: Any) -> tuple[Any, ...]:
        return stats.size_bytes, stats.checksum, sorted((stats.metadata or {}).items()), stats.content_type

    return identity(committed) == identity(staged) and committed.physical_address != staged.physical_address


@dataclass(frozen=True)
class Model:
    """The reference's view of one repository just before a GC run."""

    active_commits: frozenset[str]
    branches: Mapping[str, str]  # hidden included, name -> HEAD
    references: References
    listed: Mapping[str, int]  # key -> mtime ns

    def expected_deleted(self, cutoff_ns: int) -> set[str]:
        old = {key for key, mtime in self.listed.items() if mtime < cutoff_ns}
        return old - self.references.addresses


def build_model(
    lakefs: Lakefs,
    repo: str,
    root: Path,
    *,
    created: Collection[str],
    rules: Rules,
    now: datetime,
) -> Model:
    """Read the repository back through the API and the namespace from disk."""
    graph = read_graph(lakefs, repo, created)
    active_commits = reference_active(graph.nodes, graph.branches, rules, now)
    references = References()
    at_commit: dict[str, dict[str, Any]] = {}
    for commit_id in sorted(active_commits):
        at_commit[commit_id] = {stats.path: stats for stats in objects_at(lakefs, repo, commit_id)}
        for path, stats in at_commit[commit_id].items():
            references.add(relative_address(stats.physical_address, root), Reading(commit_id, path))
    for branch, head in sorted(graph.branches.items()):
        for stats in objects_at(lakefs, repo, branch):
            address = relative_address(stats.physical_address, root)
            references.add(address, Reading(branch, stats.path))
            committed = at_commit[head].get(stats.path)
            if address and committed is not None and _restaged_identical(committed, stats):
                references.restaged_identical.add(address)
    listed = {key: mtime for key, mtime in namespace_files(root).items() if is_listed(key)}
    return Model(frozenset(active_commits), graph.branches, references, listed)
