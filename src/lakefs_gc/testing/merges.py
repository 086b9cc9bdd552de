"""Three-way merge into a branch, producing a merge commit whose first parent is the destination."""

from __future__ import annotations

from lakefs_gc.sstable import Entry
from lakefs_gc.sstable.catalog import entry_identity
from lakefs_gc.testing.context import BadRequest, Conflict
from lakefs_gc.testing.refs import Refs
from lakefs_gc.testing.store import BranchRow, CommitRow

STRATEGIES = (None, "", "dest-wins", "source-wins")


def merge_into_branch(
    refs: Refs,
    repo: str,
    source_ref: str,
    destination: str,
    *,
    message: str | None,
    metadata: dict[str, str],
    strategy: str | None,
    allow_empty: bool,
    squash: bool,
) -> CommitRow:
    if strategy not in STRATEGIES:
        raise BadRequest(f"invalid merge strategy {strategy!r}")
    repository = refs.repository(repo)
    dest_row = refs.branch(repo, destination)
    dest = refs.commit(repo, dest_row.commit_id)
    if refs.staged_changes(repository, destination, dest.meta_range_id):
        raise BadRequest(f"branch {destination} has uncommitted changes (dirty branch)")
    source = refs.resolve(repo, source_ref).commit
    if source.id in refs.ancestors(repo, dest.id) and not allow_empty:
        raise BadRequest("no changes: source is already merged into the destination")
    base_id = refs.merge_base(repo, dest.id, source.id)
    trees = refs.ctx.trees(repository.storage_namespace)

    def tree(commit: CommitRow | None) -> dict[bytes, Entry]:
        return dict(trees.entries(commit.meta_range_id)) if commit and commit.meta_range_id else {}

    base = tree(refs.commit(repo, base_id) if base_id else None)
    src_tree, dst_tree = tree(source), tree(dest)
    src_diff, dst_diff = _diff(base, src_tree), _diff(base, dst_tree)
    changes: dict[bytes, Entry | None] = {}
    for path, value in src_diff.items():
        if path in dst_diff and not _same(value, dst_diff[path]):
            if strategy == "dest-wins":
                continue
            if strategy != "source-wins":
                raise Conflict(f"merge conflict at {path.decode(errors='replace')!r}")
        changes[path] = value
    if not changes and not allow_empty and source.id != dest.id:
        raise BadRequest("no changes to merge")
    metarange = trees.apply(dest.meta_range_id, changes) if changes else dest.meta_range_id
    parents = (dest.id,) if squash else (dest.id, source.id)
    commit = refs._new_commit(
        parents=parents,
        message=message or f"Merge '{source_ref}' into '{destination}'",
        metarange=metarange,
        date=int(refs.ctx.now().timestamp()),
        metadata=metadata,
        generation=max(dest.generation, source.generation) + 1,
    )
    with refs.store.transaction():
        if refs.store.get_branch(repo, destination) != dest_row:
            raise Conflict(f"branch {destination} moved during merge")
        refs.store.put_commit(repo, commit)
        refs.store.put_branch(repo, BranchRow(destination, commit.id, dest_row.hidden))
    return commit


def _diff(base: dict[bytes, Entry], other: dict[bytes, Entry]) -> dict[bytes, Entry | None]:
    out: dict[bytes, Entry | None] = {}
    for path, entry in other.items():
        old = base.get(path)
        if old is None or entry_identity(old) != entry_identity(entry) or old.address != entry.address:
            out[path] = entry
    for path in base.keys() - other.keys():
        out[path] = None
    return out


def _same(a: Entry | None, b: Entry | None) -> bool:
    if a is None or b is None:
        return a is b
    return entry_identity(a) == entry_identity(b) and a.address == b.address
