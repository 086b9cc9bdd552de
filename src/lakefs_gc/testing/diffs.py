"""Diffs as lakeFS lists them: a branch's uncommitted changes (``Graveler.DiffUncommitted``), the
two-dot diff of two refs (``Graveler.Diff``) and the three-dot comparison against their merge base
(``Graveler.Compare``), paged with prefix, delimiter and ``after`` by ``catalog.listDiffHelper``.

Entries are compared by identity (:func:`~lakefs_gc.sstable.catalog.entry_identity`), as lakeFS
does: a re-upload of the same bytes, metadata and content type is no change.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass

from lakefs_gc.sstable import Entry
from lakefs_gc.sstable.catalog import decode_entry, entry_identity
from lakefs_gc.testing.refs import Refs

ADDED, REMOVED, CHANGED, CONFLICT = "added", "removed", "changed", "conflict"
PREFIX_CHANGED = "prefix_changed"


@dataclass(frozen=True)
class Difference:
    """One line of a diff; ``entry`` is the right side (left for ``removed``; None for an uncommitted
    delete, whose size lakeFS reports as 0)."""

    path: bytes
    type: str
    entry: Entry | None = None

    @property
    def common_prefix(self) -> bool:
        return self.type == PREFIX_CHANGED


def uncommitted(refs: Refs, repo: str, branch: str) -> list[Difference]:
    """Staged entries against the branch's head: tombstones of committed paths, additions, changes."""
    repository = refs.repository(repo)
    head = refs.commit(repo, refs.branch(repo, branch).commit_id)
    trees = refs.ctx.trees(repository.storage_namespace)
    out = []
    for path, raw in refs.store.iter_staging(repo, branch):
        key = path.encode("utf-8", "surrogateescape")
        committed = trees.get(head.meta_range_id, key) if head.meta_range_id else None
        if raw is None:
            if committed is not None:
                out.append(Difference(key, REMOVED))
            continue
        entry = decode_entry(raw)
        if committed is None:
            out.append(Difference(key, ADDED, entry))
        elif entry_identity(committed) != entry_identity(entry):
            out.append(Difference(key, CHANGED, entry))
    return sorted(out, key=lambda d: d.path)


def two_dot(refs: Refs, repo: str, left: str, right: str) -> list[Difference]:
    """The committed trees of two refs compared directly (a branch means its head commit)."""
    left_tree = _tree(refs, repo, refs.resolve(repo, left).commit.meta_range_id)
    right_tree = _tree(refs, repo, refs.resolve(repo, right).commit.meta_range_id)
    return list(_tree_diff(left_tree, right_tree))


def three_dot(refs: Refs, repo: str, left: str, right: str) -> list[Difference]:
    """What ``right`` changed since its merge base with ``left`` (what merging it would bring),
    with conflicts marked, as lakeFS's ``compareIterator`` filters the two-dot diff."""
    left_commit, right_commit = refs.resolve(repo, left).commit, refs.resolve(repo, right).commit
    base_id = refs.merge_base(repo, left_commit.id, right_commit.id)
    base = _tree(refs, repo, refs.commit(repo, base_id).meta_range_id if base_id else "")
    left_tree = _tree(refs, repo, left_commit.meta_range_id)
    out = []
    for diff in _tree_diff(left_tree, _tree(refs, repo, right_commit.meta_range_id)):
        assert diff.entry is not None
        old, new = base.get(diff.path), diff.entry
        if diff.type == ADDED:
            kind = ADDED if old is None else (None if _same(old, new) else CONFLICT)
        elif diff.type == CHANGED:
            if old is not None and _same(old, new):
                kind = None  # only the left side changed it
            else:
                kind = CHANGED if old is not None and _same(old, left_tree[diff.path]) else CONFLICT
        else:  # removed on the right
            kind = None if old is None else (REMOVED if _same(old, new) else CONFLICT)
        if kind is not None:
            out.append(Difference(diff.path, kind, diff.entry))
    return out


def page(
    diffs: list[Difference], *, prefix: str, delimiter: str, after: str, limit: int
) -> tuple[list[Difference], bool]:
    """One page of ``diffs`` (sorted by path) as lakeFS's ``listDiffHelper`` cuts it: paths under
    ``prefix`` after ``after``, grouped into ``prefix_changed`` common prefixes by ``delimiter``."""
    keys = [d.path for d in diffs]
    prefix_b, after_b, delim_b = (s.encode("utf-8", "surrogateescape") for s in (prefix, after, delimiter))
    if not after_b or after_b < prefix_b:
        start = prefix_b
    elif not delim_b:
        start = after_b
    else:
        start = _upper_bound(after_b) or b"\xff" * (len(after_b) + 1)
    out: list[Difference] = []
    i = bisect.bisect_left(keys, start)
    while i < len(diffs) and len(out) <= limit:
        path = keys[i]
        if path == after_b:
            i += 1
            continue
        if not path.startswith(prefix_b):
            break
        rest = path[len(prefix_b) :]
        cut = rest.find(delim_b) if delim_b else -1
        if cut >= 0:
            common = prefix_b + rest[:cut] + delim_b
            out.append(Difference(common, PREFIX_CHANGED))
            bound = _upper_bound(common)
            i = len(keys) if bound is None else bisect.bisect_left(keys, bound)
            continue
        out.append(diffs[i])
        i += 1
    return out[:limit], len(out) > limit


def _tree(refs: Refs, repo: str, metarange: str) -> dict[bytes, Entry]:
    if not metarange:
        return {}
    return dict(refs.ctx.trees(refs.repository(repo).storage_namespace).entries(metarange))


def _tree_diff(left: dict[bytes, Entry], right: dict[bytes, Entry]) -> Iterator[Difference]:
    for path in sorted(left.keys() | right.keys()):
        old, new = left.get(path), right.get(path)
        if new is None:
            yield Difference(path, REMOVED, old)
        elif old is None:
            yield Difference(path, ADDED, new)
        elif not _same(old, new):
            yield Difference(path, CHANGED, new)


def _same(a: Entry, b: Entry) -> bool:
    return entry_identity(a) == entry_identity(b)


def _upper_bound(prefix: bytes) -> bytes | None:
    """lakeFS's ``UpperBoundForPrefix``: the least key above every key starting with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])
