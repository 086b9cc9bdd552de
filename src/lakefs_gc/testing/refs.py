"""Repositories, branches, tags, commits and merges with lakeFS's semantics and errors."""

from __future__ import annotations

import hashlib
import json
import re
from collections import deque
from dataclasses import dataclass

from lakefs_gc.sstable import Entry
from lakefs_gc.sstable.catalog import decode_entry, entry_identity
from lakefs_gc.testing.context import BadRequest, Conflict, Forbidden, NotFound, ServerContext
from lakefs_gc.testing.store import BranchRow, CommitRow, RepositoryRow

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{2,62}$")
_BRANCH = re.compile(r"^\w[-\w]*$")
DUMMY_KEY = "_lakefs/dummy"
COMMITTER = "admin"


@dataclass(frozen=True)
class ResolvedRef:
    """A ref resolved to a commit; ``branch`` is set when the ref names a branch."""

    commit: CommitRow
    branch: str | None


class Refs:
    """Everything about the commit graph of a repository."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.store = ctx.store

    # -- repositories ---------------------------------------------------------------------
    def create_repository(
        self, name: str, namespace: str, default_branch: str, storage_id: str
    ) -> RepositoryRow:
        if not _NAME.match(name):
            raise BadRequest(f"invalid repository name {name!r}: must match {_NAME.pattern}")
        if not _BRANCH.match(default_branch):
            raise BadRequest(f"invalid branch name {default_branch!r}")
        if self.store.get_repository(name) is not None:
            raise Conflict(f"repository {name!r} already exists")
        ns = self.ctx.namespace_store(namespace)
        if ns.exists(DUMMY_KEY):
            raise BadRequest(f"storage namespace already in use: {namespace}")
        ns.put(DUMMY_KEY, b"")
        now = int(self.ctx.now().timestamp())
        repo = RepositoryRow(name, namespace, default_branch, storage_id, now, False)
        first = self._new_commit(
            parents=(), message="Repository created", metarange="", date=now, metadata={}
        )
        with self.store.transaction():
            self.store.put_repository(repo)
            self.store.put_commit(name, first)
            self.store.put_branch(name, BranchRow(default_branch, first.id, False))
        return repo

    def repository(self, name: str) -> RepositoryRow:
        repo = self.store.get_repository(name)
        if repo is None:
            raise NotFound(f"repository not found: {name}")
        return repo

    # -- refs -----------------------------------------------------------------------------
    def branch(self, repo: str, branch: str) -> BranchRow:
        self.repository(repo)
        row = self.store.get_branch(repo, branch)
        if row is None:
            raise NotFound(f"branch not found: {branch}")
        return row

    def commit(self, repo: str, commit_id: str) -> CommitRow:
        row = self.store.get_commit(repo, commit_id)
        if row is None:
            raise NotFound(f"commit not found: {commit_id}")
        return row

    def resolve(self, repo: str, ref: str) -> ResolvedRef:
        """Branch, tag, full or abbreviated commit id, with lakeFS's ``~N`` / ``^N`` suffixes."""
        self.repository(repo)
        base, ops = _split_modifiers(ref)
        branch = self.store.get_branch(repo, base)
        if branch is not None:
            commit = self.commit(repo, branch.commit_id)
        elif (tag := self.store.get_tag(repo, base)) is not None:
            commit = self.commit(repo, tag)
        else:
            commit = self._commit_by_prefix(repo, base)
        for op, n in ops:
            commit = self._walk(repo, commit, op, n)
        return ResolvedRef(commit, base if branch is not None and not ops else None)

    def _commit_by_prefix(self, repo: str, ref: str) -> CommitRow:
        if len(ref) >= 6 and re.fullmatch(r"[0-9a-f]+", ref):
            matches = self.store.find_commits_by_prefix(repo, ref)
            if len(matches) == 1:
                return self.commit(repo, matches[0])
        raise NotFound(f"ref not found: {ref}")

    def _walk(self, repo: str, commit: CommitRow, op: str, n: int) -> CommitRow:
        if op == "^":
            if n > len(commit.parents) or n == 0:
                raise NotFound(f"commit {commit.id} has no parent {n}")
            return self.commit(repo, commit.parents[n - 1])
        for _ in range(n):
            if not commit.parents:
                raise NotFound(f"commit {commit.id} has no ancestor that far")
            commit = self.commit(repo, commit.parents[0])
        return commit

    def create_branch(self, repo: str, name: str, source: str, *, hidden: bool, force: bool) -> BranchRow:
        if not _BRANCH.match(name):
            raise BadRequest(f"invalid branch name {name!r}")
        if self.store.get_branch(repo, name) is not None and not force:
            raise Conflict(f"branch already exists: {name}")
        if self.store.get_tag(repo, name) is not None:
            raise Conflict(f"a tag named {name!r} already exists")
        row = BranchRow(name, self.resolve(repo, source).commit.id, hidden)
        self.store.put_branch(repo, row)
        return row

    def delete_branch(self, repo: str, name: str) -> None:
        repository = self.repository(repo)
        self.branch(repo, name)
        if name == repository.default_branch:
            raise Forbidden(f"cannot delete the repository's default branch {name!r}")  # lakeFS: 403
        self.store.delete_branch(repo, name)

    def create_tag(self, repo: str, tag: str, ref: str, *, force: bool) -> tuple[str, str]:
        if not _BRANCH.match(tag):
            raise BadRequest(f"invalid tag name {tag!r}")
        if self.store.get_tag(repo, tag) is not None and not force:
            raise Conflict(f"tag already exists: {tag}")
        commit_id = self.resolve(repo, ref).commit.id
        self.store.put_tag(repo, tag, commit_id)
        return tag, commit_id

    # -- commits --------------------------------------------------------------------------
    def _new_commit(
        self,
        *,
        parents: tuple[str, ...],
        message: str,
        metarange: str,
        date: int,
        metadata: dict[str, str],
        generation: int = 1,
    ) -> CommitRow:
        payload = json.dumps(
            [COMMITTER, message, metarange, date, list(parents), sorted(metadata.items()), 1, generation]
        )
        commit_id = hashlib.sha256(payload.encode()).hexdigest()
        return CommitRow(commit_id, parents, COMMITTER, message, date, metarange, metadata, 1, generation)

    def commit_branch(
        self,
        repo: str,
        branch: str,
        *,
        message: str,
        metadata: dict[str, str],
        date: int | None,
        allow_empty: bool,
    ) -> CommitRow:
        repository = self.repository(repo)
        row = self.branch(repo, branch)
        head = self.commit(repo, row.commit_id)
        changes = self.staged_changes(repository, branch, head.meta_range_id)
        if not changes and not allow_empty:
            raise BadRequest("commit: no changes")
        trees = self.ctx.trees(repository.storage_namespace)
        metarange = trees.apply(head.meta_range_id, changes) if changes or head.meta_range_id else ""
        when = int(self.ctx.now().timestamp()) if date is None else date
        new = self._new_commit(
            parents=(head.id,), message=message, metarange=metarange, date=when, metadata=metadata,
            generation=head.generation + 1,
        )  # fmt: skip
        with self.store.transaction():
            if self.store.get_branch(repo, branch) != row:
                raise Conflict(f"branch {branch} moved during commit")
            self.store.put_commit(repo, new)
            self.store.put_branch(repo, BranchRow(branch, new.id, row.hidden))
            self.store.clear_staging(repo, branch)
        return new

    def staged_changes(
        self, repository: RepositoryRow, branch: str, metarange: str
    ) -> dict[bytes, Entry | None]:
        """Staged entries that differ from the committed tree (lakeFS's diff by identity)."""
        trees = self.ctx.trees(repository.storage_namespace)
        changes: dict[bytes, Entry | None] = {}
        for path, raw in self.store.iter_staging(repository.id, branch):
            key = path.encode()
            committed = trees.get(metarange, key) if metarange else None
            if raw is None:
                if committed is not None:
                    changes[key] = None
                continue
            entry = decode_entry(raw)
            if committed is None or entry_identity(committed) != entry_identity(entry):
                changes[key] = entry
        return changes

    def log(self, repo: str, ref: str, *, first_parent: bool = False) -> list[CommitRow]:
        """Commits reachable from ref, newest first (by creation date, then id)."""
        start = self.resolve(repo, ref).commit
        seen = {start.id: start}
        queue = deque([start])
        while queue:
            commit = queue.popleft()
            parents = commit.parents[:1] if first_parent else commit.parents
            for p in parents:
                if p not in seen:
                    seen[p] = self.commit(repo, p)
                    queue.append(seen[p])
        return sorted(seen.values(), key=lambda c: (-c.creation_date, c.id))

    def ancestors(self, repo: str, commit_id: str) -> set[str]:
        return {c.id for c in self.log(repo, commit_id)}

    def merge_base(self, repo: str, a: str, b: str) -> str | None:
        """The nearest common ancestor of ``b`` reached breadth-first from it, as lakeFS finds it."""
        left = self.ancestors(repo, a)
        queue = deque([b])
        seen = {b}
        while queue:
            cid = queue.popleft()
            if cid in left:
                return cid
            for p in self.commit(repo, cid).parents:
                if p not in seen:
                    seen.add(p)
                    queue.append(p)
        return None


def _split_modifiers(ref: str) -> tuple[str, list[tuple[str, int]]]:
    match = re.match(r"^(.*?)((?:[~^]\d*)*)$", ref)
    assert match is not None
    base, tail = match.group(1), match.group(2)
    ops = [(op, int(n) if n else 1) for op, n in re.findall(r"([~^])(\d*)", tail)]
    return base, ops
