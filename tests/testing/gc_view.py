"""What a GC client sees of a repository: read the server's exports with our own readers.

Used by tests to check that the exports are what lakeFS produces and that the survivors of a GC
follow from them (referenced = addresses of active commits' ranges ∪ uncommitted addresses).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from lakefs_sdk.models.prepare_gc_uncommitted_request import PrepareGCUncommittedRequest

from lakefs_gc.lakefs.exports import read_commits_csv, read_uncommitted_addresses
from lakefs_gc.lakefs.ranges import committed_addresses, range_ids_of_metaranges
from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
from lakefs_gc.storage.locations import parse_location, parse_storage_namespace
from tests.testing.sdk import Lakefs


@dataclass(frozen=True)
class GcView:
    active_commits: frozenset[str]
    committed: frozenset[str]
    uncommitted: frozenset[str]
    pages: int

    @property
    def referenced(self) -> frozenset[str]:
        return self.committed | self.uncommitted


def gc_view(lakefs: Lakefs, repo: str, local_root: str, options: StorageOptions | None = None) -> GcView:
    options = (options or StorageOptions()).model_copy(update={"local_root": local_root})
    namespace = lakefs.repositories.get_repository(repo).storage_namespace
    pages = 0
    token: str | None = None
    location = ""
    while True:
        page = lakefs.internal.prepare_garbage_collection_uncommitted(
            repo, PrepareGCUncommittedRequest(continuation_token=token)
        )
        pages += 1
        location = page.gc_uncommitted_location or location
        token = page.continuation_token
        if not token:
            break
    uncommitted: set[str] = set()
    if location:
        loc = parse_location(location, local_root=local_root)
        fs, path = filesystem_for(loc, options)
        uncommitted = set(read_uncommitted_addresses(fs, path, required=True).column(0).to_pylist())
    export = lakefs.internal.prepare_garbage_collection_commits(repo)
    csv_location = parse_location(export.gc_commits_location, local_root=local_root)
    fs, path = filesystem_for(csv_location, options)
    commits = read_commits_csv(fs, path)
    with fs.open_input_stream(path) as f:
        rows = list(csv.DictReader(io.StringIO(f.read().decode())))
    assert all(r["expired"] == "false" for r in rows), "lakeFS lists only active commits"
    ns = parse_storage_namespace(namespace, local_root=local_root)
    ns_fs, _ = filesystem_for(ns, options)
    ranges = range_ids_of_metaranges(ns_fs, ns, commits.metarange_ids)
    committed = committed_addresses(ns_fs, ns, namespace, ranges)
    return GcView(
        frozenset(r["commit_id"] for r in rows), frozenset(committed), frozenset(uncommitted), pages
    )
