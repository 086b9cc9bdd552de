"""Three-way merges of committed trees, as lakeFS's ``committed.merger`` does them, and the three
operations built on them: merge into a branch, revert a commit, cherry-pick a commit.

Entries are compared by *identity* only (``catalog.EntryToValue``: size, ETag, metadata, content
type), never by physical address. Where source and destination hold the same identity the
source's entry is written, with its address: which address a branch ends up referencing is what
the GC must know, so this follows lakeFS exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

from lakefs_gc.sstable import Entry
from lakefs_gc.sstable.catalog import entry_identity
from lakefs_gc.testing.context import BadRequest, Conflict
from lakefs_gc.testing.refs import Refs
from lakefs_gc.testing.store import BranchRow, CommitRow, RepositoryRow

STRATEGIES = {None: None, "": None, "dest-wins": "dest-wins", "source-wins": "source-wins"}
#: the key lakeFS adds to every merge commit's metadata, and its values per strategy
STRATEGY_KEY = ".lakefs.merge.strategy"
STRATEGY_NAMES = {None: "default", "dest-wins": "dest-wins", "source-wins": "source-wins"}

Tree = dict[bytes, Entry]


@dataclass(frozen=True)
class CommitOverrides:
    """lakeFS's ``commit_overrides``: a non-empty message or any metadata replaces the commit's."""

    message: str = ""
    metadata: dict[str, str] | None = None

    @classmethod
    def parse(cls, body: object) -> CommitOverrides:
        if not isinstance(body, dict):
            return cls()
        metadata = body.get("metadata")
        return cls(str(body.get("message") or ""), None if metadata is None else dict(metadata))

    def apply(self, message: str, metadata: dict[str, str]) -> tuple[str, dict[str, str]]:
        return self.message or message, metadata if self.metadata is None else dict(self.metadata)


def three_way(dest: Tree, source: Tree, base: Tree, strategy: str | None) -> dict[bytes, Entry | None]:
    """The changes to ``dest`` that merging ``source`` into it makes, relative to ``base``
    (``None`` deletes); raises 409 on a conflict that ``strategy`` does not resolve."""
    changes: dict[bytes, Entry | None] = {}
    for key in sorted(dest.keys() | source.keys()):
        d, s, b = dest.get(key), source.get(key), base.get(key)
        if d is not None and s is not None:
            if _same(s, d) or (b is not None and _same(d, b)):
                result: Entry | None = s
            elif b is not None and _same(s, b):
                result = d
            else:  # both changed it, or both added it differently
                result = _resolve(key, s, d, strategy)
        elif d is not None:  # not in source: deleted there, or added by dest
            if b is None:
                result = d
            elif _same(d, b):
                result = None
            else:  # deleted by source, changed by dest
                result = _resolve(key, None, d, strategy)
        else:  # not in dest: deleted there, or added by source
            assert s is not None
            if b is None:
                result = s
            elif _same(s, b):
                result = None
            else:  # deleted by dest, changed by source
                result = _resolve(key, s, None, strategy)
        if result != d:
            changes[key] = result
    return changes


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
    strategy = STRATEGIES[strategy]
    repository = refs.repository(repo)
    dest_row = refs.branch(repo, destination)
    dest = refs.commit(repo, dest_row.commit_id)
    _check_clean(refs, repository, destination, dest)
    source = refs.resolve(repo, source_ref).commit
    base_id = refs.merge_base(repo, dest.id, source.id)
    base = refs.commit(repo, base_id) if base_id else None
    metarange = _merged_metarange(
        refs, repository, dest, source.meta_range_id, base.meta_range_id if base else "", strategy,
        allow_empty=allow_empty,
    )  # fmt: skip
    commit = refs._new_commit(
        parents=(dest.id,) if squash else (dest.id, source.id),
        message=message or f"Merge '{source_ref}' into '{destination}'",
        metarange=metarange,
        date=int(refs.ctx.now().timestamp()),
        metadata={**metadata, STRATEGY_KEY: STRATEGY_NAMES[strategy]},
        generation=max(dest.generation, source.generation) + 1,
    )
    return _advance(refs, repo, dest_row, commit, "merge")


def revert_commit(
    refs: Refs, repo: str, branch: str, ref: str, *, parent_number: int, allow_empty: bool,
    overrides: CommitOverrides,
) -> CommitRow:  # fmt: skip
    """lakeFS's ``Graveler.Revert``: merge the commit's parent into the branch with the commit as base."""
    repository = refs.repository(repo)
    target = refs.resolve(repo, ref).commit
    if parent_number < 0:
        raise BadRequest("parent_number must not be negative")
    if len(target.parents) > 1 and parent_number <= 0:
        raise Conflict(f"commit {target.id} is a merge commit: a parent number is required")
    if parent_number > len(target.parents):
        raise BadRequest(f"commit {target.id} has no parent {parent_number}")
    parent = refs.commit(repo, target.parents[max(parent_number, 1) - 1]) if target.parents else None
    row = refs.branch(repo, branch)
    head = refs.commit(repo, row.commit_id)
    _check_clean(refs, repository, branch, head)
    metarange = _merged_metarange(
        refs, repository, head, parent.meta_range_id if parent else "", target.meta_range_id, None,
        allow_empty=allow_empty,
    )  # fmt: skip
    if metarange == head.meta_range_id and not allow_empty:
        raise BadRequest("revert: no changes")
    message, metadata = overrides.apply(f"Revert {ref}", {})
    commit = refs._new_commit(
        parents=(head.id,), message=message, metarange=metarange, date=int(refs.ctx.now().timestamp()),
        metadata=metadata, generation=head.generation + 1,
    )  # fmt: skip
    return _advance(refs, repo, row, commit, "revert")


def cherry_pick(
    refs: Refs, repo: str, branch: str, ref: str, *, parent_number: int | None, overrides: CommitOverrides
) -> CommitRow:
    """lakeFS's ``Graveler.CherryPick``: merge the commit into the branch with its parent as base."""
    repository = refs.repository(repo)
    target = refs.resolve(repo, ref).commit
    if parent_number is None and len(target.parents) > 1:
        raise BadRequest(f"commit {target.id} is a merge commit: a parent number is required")
    number = 1 if parent_number is None else parent_number
    if number < 1 or number > len(target.parents):
        raise BadRequest(f"commit {target.id} has no parent {number}")
    parent = refs.commit(repo, target.parents[number - 1])
    row = refs.branch(repo, branch)
    head = refs.commit(repo, row.commit_id)
    _check_clean(refs, repository, branch, head)
    metarange = _merged_metarange(
        refs, repository, head, target.meta_range_id, parent.meta_range_id, None, allow_empty=False
    )
    message, metadata = overrides.apply(target.message, dict(target.metadata))
    metadata |= {"cherry-pick-origin": target.id, "cherry-pick-committer": target.committer}
    commit = refs._new_commit(
        parents=(head.id,), message=message, metarange=metarange, date=int(refs.ctx.now().timestamp()),
        metadata=metadata, generation=head.generation + 1,
    )  # fmt: skip
    return _advance(refs, repo, row, commit, "cherry-pick")


def _merged_metarange(
    refs: Refs, repository: RepositoryRow, dest: CommitRow, source: str, base: str, strategy: str | None,
    *, allow_empty: bool,
) -> str:  # fmt: skip
    """lakeFS's ``committedManager.Merge`` on metarange ids."""
    if source == base and not allow_empty:
        raise BadRequest("no changes")
    if dest.meta_range_id == base:
        return source
    trees = refs.ctx.trees(repository.storage_namespace)

    def tree(metarange: str) -> Tree:
        return dict(trees.entries(metarange)) if metarange else {}

    changes = three_way(tree(dest.meta_range_id), tree(source), tree(base), strategy)
    if not changes:
        return dest.meta_range_id
    return trees.apply(dest.meta_range_id, changes)


def _check_clean(refs: Refs, repository: RepositoryRow, branch: str, head: CommitRow) -> None:
    if refs.staged_changes(repository, branch, head.meta_range_id):
        raise BadRequest(f"branch {branch} has uncommitted changes (dirty branch)")


def _advance(refs: Refs, repo: str, row: BranchRow, commit: CommitRow, what: str) -> CommitRow:
    with refs.store.transaction():
        if refs.store.get_branch(repo, row.id) != row:
            raise Conflict(f"branch {row.id} moved during {what}")
        refs.store.put_commit(repo, commit)
        refs.store.put_branch(repo, BranchRow(row.id, commit.id, row.hidden))
    return commit


def _same(a: Entry, b: Entry) -> bool:
    return entry_identity(a) == entry_identity(b)


def _resolve(key: bytes, source: Entry | None, dest: Entry | None, strategy: str | None) -> Entry | None:
    if strategy == "dest-wins":
        return dest
    if strategy == "source-wins":
        return source
    raise Conflict(f"merge conflict at {key.decode(errors='replace')!r}")
