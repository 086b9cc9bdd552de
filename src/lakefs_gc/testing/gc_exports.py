"""What lakeFS's GC endpoints produce: rules, the active-commits CSV, the uncommitted dump.

Paths, file formats and pagination follow docs/formats/lakefs-gc-api.md ("The commits export"
and "The uncommitted export") so a GC client reading them cannot tell this server from lakeFS: the CSV lists
only active commits (``expired=false``); the uncommitted dump is one GZIP parquet file per page *that had
data*, and a page can end between branches, so the last page may carry no data and an empty location.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakefs_gc.lakefs.xid import new_descending_xid, new_xid
from lakefs_gc.sstable import AddressType, Entry
from lakefs_gc.sstable.catalog import decode_entry, entry_identity
from lakefs_gc.testing.context import ApiError, BadRequest, Forbidden, NotFound, ServerContext
from lakefs_gc.testing.refs import Refs
from lakefs_gc.testing.retention import CommitNode, GCRules, active_commits
from lakefs_gc.testing.store import RepositoryRow, TaskRow

GC_PREFIX = "_lakefs/retention/gc"
UNCOMMITTED_SCHEMA = pa.schema([("physical_address", pa.string()), ("creation_date", pa.int64())])
RULES_NOT_FOUND = "garbage collection rules not found"
STAGING_CHUNK = 10_000


@dataclass(frozen=True)
class UncommittedMark:
    run_id: str
    branch: str
    path: str

    def token(self) -> str:
        body = {"run_id": self.run_id, "branch": self.branch, "path": self.path, "key": ""}
        return base64.b64encode(json.dumps(body).encode()).decode()

    @classmethod
    def parse(cls, token: str) -> UncommittedMark:
        try:
            body = json.loads(base64.b64decode(token, validate=True))
            return cls(str(body["run_id"]), str(body["branch"]), str(body.get("path", "")))
        except (binascii.Error, ValueError, KeyError, TypeError) as e:
            raise BadRequest(f"invalid continuation token: {e}") from e


class GcExports:
    def __init__(self, refs: Refs) -> None:
        self.refs = refs
        self.ctx: ServerContext = refs.ctx
        self.store = refs.store
        self._tasks_lock = threading.Lock()

    # -- rules ----------------------------------------------------------------------------
    def set_rules(self, repo: str, body: dict[str, Any]) -> None:
        self.refs.repository(repo)
        try:
            rules = {
                "default_retention_days": int(body["default_retention_days"]),
                "branches": [
                    {"branch_id": str(b["branch_id"]), "retention_days": int(b["retention_days"])}
                    for b in body.get("branches") or []
                ],
            }
        except (KeyError, TypeError, ValueError) as e:
            raise BadRequest(f"invalid GC rules: {e}") from e
        self.store.put_gc_rules(repo, rules)

    def get_rules(self, repo: str) -> dict[str, Any]:
        self.refs.repository(repo)
        rules = self.store.get_gc_rules(repo)
        if rules is None:
            raise NotFound(RULES_NOT_FOUND)
        return rules

    def delete_rules(self, repo: str) -> None:
        self.refs.repository(repo)
        self.store.put_gc_rules(repo, None)

    # -- active commits -------------------------------------------------------------------
    def prepare_commits(self, repo: str) -> dict[str, str]:
        repository = self.refs.repository(repo)
        _writable(repository)
        raw = self.get_rules(repo)
        rules = GCRules(
            int(raw["default_retention_days"]),
            {b["branch_id"]: int(b["retention_days"]) for b in raw["branches"]},
        )
        # branches before commits: commits are never removed, so every HEAD read first is among the
        # commits read next, as lakeFS's walk (which looks commits up one by one) always finds them;
        # the other order fails on a commit made in between ("HEAD missing from the commits map")
        branches = {b.id: b.commit_id for b in self.store.list_branches(repo)}  # hidden included
        commits = {
            c.id: CommitNode(
                c.id,
                datetime.fromtimestamp(c.creation_date, tz=timezone.utc),
                c.parents,
                c.version,
                c.meta_range_id,
            )
            for c in self.store.list_commits(repo)
        }
        active = active_commits(commits, branches, rules, self.ctx.now())
        run_id = new_descending_xid(self.ctx.now())
        lines = ["commit_id,expired,metarange_id"] + [
            f"{c},false,{commits[c].metarange_id}" for c in sorted(active)
        ]
        ns = self.ctx.namespace_store(repository.storage_namespace)
        key = f"{GC_PREFIX}/commits/run_id={run_id}/commits.csv"
        ns.put(key, ("\n".join(lines) + "\n").encode())
        return {
            "run_id": run_id,
            "gc_commits_location": ns.qualified(key),
            "gc_addresses_location": ns.qualified(f"{GC_PREFIX}/addresses/"),
        }

    def start_prepare_commits(self, repo: str) -> str:
        self.refs.repository(repo)
        task_id = "GCPC" + new_xid(self.ctx.now())
        self.store.put_task(TaskRow(task_id, repo, False, self.ctx.now().timestamp(), None, None))
        threading.Thread(target=self._run_task, args=(task_id, repo), daemon=True).start()
        return task_id

    def _run_task(self, task_id: str, repo: str) -> None:
        result: dict[str, str] | None = None
        error: str | None = None
        try:
            result = self.prepare_commits(repo)
        except ApiError as e:
            error = e.message
        except Exception as e:  # a task must always complete, with its error
            error = f"prepare commits failed: {e}"
        self.store.put_task(TaskRow(task_id, repo, True, self.ctx.now().timestamp(), result, error))

    def task_status(self, repo: str, task_id: str) -> TaskRow:
        self.refs.repository(repo)
        task = self.store.get_task(task_id)
        if task is None or task.repo != repo:
            raise NotFound(f"task not found: {task_id}")
        return task

    # -- uncommitted ----------------------------------------------------------------------
    def prepare_uncommitted(self, repo: str, token: str | None) -> dict[str, str]:
        repository = self.refs.repository(repo)
        _writable(repository)
        if token:
            mark = UncommittedMark.parse(token)
        else:
            mark = UncommittedMark(new_descending_xid(self.ctx.now()), "", "")
        rows, next_mark = self._collect_page(repository, mark)
        location = ""
        if rows:
            location = self._write_page(repository, mark.run_id, rows)
        response = {"run_id": mark.run_id, "gc_uncommitted_location": location}
        if next_mark is not None:
            response["continuation_token"] = next_mark.token()
        return response

    def _collect_page(
        self, repository: RepositoryRow, mark: UncommittedMark
    ) -> tuple[list[tuple[str, int]], UncommittedMark | None]:
        settings = self.ctx.settings
        branches = [b for b in self.store.list_branches(repository.id) if b.id >= mark.branch]
        prefix = self.ctx.namespace_store(repository.storage_namespace).qualified("")
        rows: list[tuple[str, int]] = []
        for index, branch in enumerate(branches):
            head = self.refs.commit(repository.id, branch.commit_id)
            start = mark.path if branch.id == mark.branch else ""
            changes = self._staged_changes(repository, branch.id, head.meta_range_id, start)
            for _path, entry in changes:
                address = _uncommitted_address(entry.address, entry.address_type, prefix)
                if address is not None:
                    rows.append((address, (entry.last_modified_ns or 0) // 1_000_000_000))
                if len(rows) >= settings.uncommitted_page_entries:
                    following = next(changes, None)
                    if following is not None:
                        return rows, UncommittedMark(mark.run_id, branch.id, following[0])
                    break
            done = index + 1
            page_full = (
                len(rows) >= settings.uncommitted_page_entries or done >= settings.uncommitted_page_branches
            )
            if page_full and done < len(branches):
                return rows, UncommittedMark(mark.run_id, branches[done].id, "")
        return rows, None

    def _staged_changes(
        self, repository: RepositoryRow, branch: str, metarange: str, start: str
    ) -> Iterator[tuple[str, Entry]]:
        """Staged entries from ``start`` on that differ from the committed tree (lakeFS's diff by
        identity), in path order, read from the staging table a chunk at a time: a branch with
        millions of staged entries is never held in memory, nor re-read from its start per page."""
        trees = self.ctx.trees(repository.storage_namespace)
        position = start
        while True:
            chunk = self.store.iter_staging(repository.id, branch, start=position, limit=STAGING_CHUNK)
            for path, raw in chunk:
                if raw is None:  # a staged delete references nothing
                    continue
                entry = decode_entry(raw)
                committed = trees.get(metarange, path.encode()) if metarange else None
                if committed is None or entry_identity(committed) != entry_identity(entry):
                    yield path, entry
            if len(chunk) < STAGING_CHUNK:
                return
            position = chunk[-1][0] + "\x00"  # the next path after the chunk's last

    def _write_page(self, repository: RepositoryRow, run_id: str, rows: list[tuple[str, int]]) -> str:
        table = pa.table(
            {"physical_address": [r[0] for r in rows], "creation_date": [r[1] for r in rows]},
            schema=UNCOMMITTED_SCHEMA,
        )
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="gzip", row_group_size=100_000)
        ns = self.ctx.namespace_store(repository.storage_namespace)
        directory = f"{GC_PREFIX}/uncommitted/{run_id}/uncommitted/"
        ns.put(directory + new_xid(self.ctx.now()), buf.getvalue())
        return ns.qualified(directory)


def _uncommitted_address(address: str, kind: AddressType, namespace_prefix: str) -> str | None:
    """RELATIVE kept; other types only under ``<namespace>/`` (prefix stripped), as lakeFS does."""
    if kind is AddressType.RELATIVE:
        return address
    if address.startswith(namespace_prefix):
        return address[len(namespace_prefix) :]
    return None


def _writable(repository: RepositoryRow) -> None:
    if repository.read_only:
        raise Forbidden(f"repository {repository.id} is read-only")
