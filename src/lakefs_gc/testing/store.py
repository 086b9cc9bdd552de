"""Durable state of the test server: repositories, branches, commits, tags, staging, rules.

SQLite (stdlib) gives transactions, survives restarts with ``--state`` (even a kill -9
between requests) and scales to synthetic repositories with millions of staged entries.
Committed trees are *not* here: like lakeFS, they live in the storage namespace as ranges and
metaranges. Without a state directory the database is in memory.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

#: at most this many commits kept read (~0.5 KB each)
COMMIT_CACHE = 200_000

SCHEMA = """
CREATE TABLE IF NOT EXISTS repositories (
    id TEXT PRIMARY KEY, storage_namespace TEXT NOT NULL, default_branch TEXT NOT NULL,
    storage_id TEXT NOT NULL, creation_date INTEGER NOT NULL, read_only INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS branches (
    repo TEXT NOT NULL, id TEXT NOT NULL, commit_id TEXT NOT NULL, hidden INTEGER NOT NULL,
    PRIMARY KEY (repo, id)
);
CREATE TABLE IF NOT EXISTS commits (
    repo TEXT NOT NULL, id TEXT NOT NULL, parents TEXT NOT NULL, committer TEXT NOT NULL,
    message TEXT NOT NULL, creation_date INTEGER NOT NULL, meta_range_id TEXT NOT NULL,
    metadata TEXT NOT NULL, version INTEGER NOT NULL, generation INTEGER NOT NULL,
    PRIMARY KEY (repo, id)
);
CREATE TABLE IF NOT EXISTS tags (
    repo TEXT NOT NULL, id TEXT NOT NULL, commit_id TEXT NOT NULL, PRIMARY KEY (repo, id)
);
CREATE TABLE IF NOT EXISTS staging (
    repo TEXT NOT NULL, branch TEXT NOT NULL, path TEXT NOT NULL, entry BLOB,
    PRIMARY KEY (repo, branch, path)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gc_rules (repo TEXT PRIMARY KEY, rules TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS repository_metadata (
    repo TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (repo, key)
);
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY, repo TEXT NOT NULL, completed INTEGER NOT NULL, update_time REAL NOT NULL,
    result TEXT, error TEXT
);
"""


@dataclass(frozen=True)
class RepositoryRow:
    id: str
    storage_namespace: str
    default_branch: str
    storage_id: str
    creation_date: int
    read_only: bool


@dataclass(frozen=True)
class BranchRow:
    id: str
    commit_id: str
    hidden: bool


@dataclass(frozen=True)
class CommitRow:
    id: str
    parents: tuple[str, ...]
    committer: str
    message: str
    creation_date: int
    meta_range_id: str
    metadata: dict[str, str]
    version: int
    generation: int


@dataclass(frozen=True)
class TaskRow:
    id: str
    repo: str
    completed: bool
    update_time: float
    result: dict[str, str] | None
    error: str | None


class Store:
    """Thread-safe access to the SQLite database (one connection, one lock)."""

    def __init__(self, state_dir: Path | None) -> None:
        if state_dir is not None:
            state_dir.mkdir(parents=True, exist_ok=True)
            target = str(state_dir / "lakefs-test-server.db")
        else:
            target = ":memory:"
        self._db = sqlite3.connect(target, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL" if state_dir else "PRAGMA journal_mode=MEMORY")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self._lock = threading.RLock()
        #: commits read, by (repository, id): a commit id names its content, so an entry never goes
        #: stale; a log walks the whole ancestry per call, 30K rows at lakeFS's bottom-line scale
        self._commits: dict[tuple[str, str], CommitRow] = {}

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic unit of work; nested use joins the outer transaction."""
        with self._lock:
            if self._db.in_transaction:
                yield self._db
                return
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # -- repositories ---------------------------------------------------------------------
    def put_repository(self, r: RepositoryRow) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO repositories VALUES (?,?,?,?,?,?)",
                (
                    r.id,
                    r.storage_namespace,
                    r.default_branch,
                    r.storage_id,
                    r.creation_date,
                    int(r.read_only),
                ),
            )

    def get_repository(self, repo: str) -> RepositoryRow | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM repositories WHERE id=?", (repo,)).fetchone()
        return None if row is None else _repository(row)

    def list_repositories(self) -> list[RepositoryRow]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM repositories ORDER BY id").fetchall()
        return [_repository(r) for r in rows]

    def delete_repository(self, repo: str) -> None:
        with self.transaction() as db:
            for table in ("branches", "commits", "tags", "staging", "repository_metadata"):
                db.execute(f"DELETE FROM {table} WHERE repo=?", (repo,))
            db.execute("DELETE FROM gc_rules WHERE repo=?", (repo,))
            db.execute("DELETE FROM tasks WHERE repo=?", (repo,))
            db.execute("DELETE FROM repositories WHERE id=?", (repo,))
            self._commits = {k: c for k, c in self._commits.items() if k[0] != repo}

    def repository_metadata(self, repo: str) -> dict[str, str]:
        with self._lock:
            rows = self._db.execute(
                "SELECT key, value FROM repository_metadata WHERE repo=? ORDER BY key", (repo,)
            ).fetchall()
        return {str(k): str(v) for k, v in rows}

    def update_repository_metadata(self, repo: str, set_: dict[str, str], delete: list[str]) -> None:
        with self.transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO repository_metadata VALUES (?,?,?)",
                [(repo, k, v) for k, v in set_.items()],
            )
            db.executemany(
                "DELETE FROM repository_metadata WHERE repo=? AND key=?", [(repo, k) for k in delete]
            )

    # -- branches -------------------------------------------------------------------------
    def put_branch(self, repo: str, b: BranchRow) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO branches VALUES (?,?,?,?)", (repo, b.id, b.commit_id, int(b.hidden))
            )

    def get_branch(self, repo: str, branch: str) -> BranchRow | None:
        with self._lock:
            row = self._db.execute(
                "SELECT id, commit_id, hidden FROM branches WHERE repo=? AND id=?", (repo, branch)
            ).fetchone()
        return None if row is None else BranchRow(row[0], row[1], bool(row[2]))

    def list_branches(self, repo: str) -> list[BranchRow]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, commit_id, hidden FROM branches WHERE repo=? ORDER BY id", (repo,)
            ).fetchall()
        return [BranchRow(r[0], r[1], bool(r[2])) for r in rows]

    def delete_branch(self, repo: str, branch: str) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM branches WHERE repo=? AND id=?", (repo, branch))
            db.execute("DELETE FROM staging WHERE repo=? AND branch=?", (repo, branch))

    # -- commits --------------------------------------------------------------------------
    def put_commit(self, repo: str, c: CommitRow) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO commits VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    repo, c.id, json.dumps(list(c.parents)), c.committer, c.message, c.creation_date,
                    c.meta_range_id, json.dumps(c.metadata, sort_keys=True), c.version, c.generation,
                ),
            )  # fmt: skip

    def get_commit(self, repo: str, commit_id: str) -> CommitRow | None:
        with self._lock:
            if (known := self._commits.get((repo, commit_id))) is not None:
                return known
            row = self._db.execute(
                "SELECT * FROM commits WHERE repo=? AND id=?", (repo, commit_id)
            ).fetchone()
            if row is None:
                return None
            commit = _commit(row)
            if not self._db.in_transaction:  # a row of an open transaction may yet be rolled back
                if len(self._commits) >= COMMIT_CACHE:
                    self._commits.clear()
                self._commits[(repo, commit_id)] = commit
        return commit

    def find_commits_by_prefix(self, repo: str, prefix: str) -> list[str]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id FROM commits WHERE repo=? AND id >= ? AND id < ? LIMIT 2",
                (repo, prefix, prefix + "~"),
            ).fetchall()
        return [r[0] for r in rows]

    def list_commits(self, repo: str) -> list[CommitRow]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM commits WHERE repo=? ORDER BY id", (repo,)).fetchall()
        return [_commit(r) for r in rows]

    # -- tags -----------------------------------------------------------------------------
    def put_tag(self, repo: str, tag: str, commit_id: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO tags VALUES (?,?,?)", (repo, tag, commit_id))

    def get_tag(self, repo: str, tag: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT commit_id FROM tags WHERE repo=? AND id=?", (repo, tag)).fetchone()
        return None if row is None else str(row[0])

    def delete_tag(self, repo: str, tag: str) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM tags WHERE repo=? AND id=?", (repo, tag))

    def list_tags(self, repo: str) -> list[tuple[str, str]]:
        with self._lock:
            return [
                (r[0], r[1])
                for r in self._db.execute("SELECT id, commit_id FROM tags WHERE repo=? ORDER BY id", (repo,))
            ]

    # -- staging --------------------------------------------------------------------------
    def stage(self, repo: str, branch: str, path: str, entry: bytes | None) -> None:
        """Stage an encoded entry, or a tombstone (``None``) that hides a committed path."""
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO staging VALUES (?,?,?,?)", (repo, branch, path, entry))

    def stage_many(self, repo: str, branch: str, items: list[tuple[str, bytes | None]]) -> None:
        with self.transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO staging VALUES (?,?,?,?)", [(repo, branch, p, e) for p, e in items]
            )

    def staged(self, repo: str, branch: str, path: str) -> tuple[bool, bytes | None]:
        """``(present, entry)``: present with ``None`` entry means a tombstone."""
        with self._lock:
            row = self._db.execute(
                "SELECT entry FROM staging WHERE repo=? AND branch=? AND path=?", (repo, branch, path)
            ).fetchone()
        return (False, None) if row is None else (True, row[0])

    def iter_staging(
        self, repo: str, branch: str, *, start: str = "", prefix: str = "", limit: int = -1
    ) -> list[tuple[str, bytes | None]]:
        """Staged paths ``>= start`` under ``prefix`` in path order."""
        with self._lock:
            rows = self._db.execute(
                "SELECT path, entry FROM staging WHERE repo=? AND branch=? AND path>=? AND path>=? "
                "AND substr(path, 1, ?)=? ORDER BY path LIMIT ?",
                (repo, branch, start, prefix, len(prefix), prefix, limit),
            ).fetchall()
        return [(r[0], r[1]) for r in rows]

    def clear_staging(
        self, repo: str, branch: str, *, prefix: str | None = None, path: str | None = None
    ) -> None:
        with self.transaction() as db:
            if path is not None:
                db.execute("DELETE FROM staging WHERE repo=? AND branch=? AND path=?", (repo, branch, path))
            elif prefix:
                db.execute(
                    "DELETE FROM staging WHERE repo=? AND branch=? AND substr(path, 1, ?)=?",
                    (repo, branch, len(prefix), prefix),
                )
            else:
                db.execute("DELETE FROM staging WHERE repo=? AND branch=?", (repo, branch))

    # -- GC rules and tasks ---------------------------------------------------------------
    def put_gc_rules(self, repo: str, rules: dict[str, object] | None) -> None:
        with self.transaction() as db:
            if rules is None:
                db.execute("DELETE FROM gc_rules WHERE repo=?", (repo,))
            else:
                db.execute("INSERT OR REPLACE INTO gc_rules VALUES (?,?)", (repo, json.dumps(rules)))

    def get_gc_rules(self, repo: str) -> dict[str, object] | None:
        with self._lock:
            row = self._db.execute("SELECT rules FROM gc_rules WHERE repo=?", (repo,)).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def put_task(self, t: TaskRow) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO tasks VALUES (?,?,?,?,?,?)",
                (
                    t.id,
                    t.repo,
                    int(t.completed),
                    t.update_time,
                    json.dumps(t.result) if t.result else None,
                    t.error,
                ),
            )

    def get_task(self, task_id: str) -> TaskRow | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM tasks WHERE id=?", (task_id,)).fetchone()
        if row is None:
            return None
        return TaskRow(row[0], row[1], bool(row[2]), row[3], json.loads(row[4]) if row[4] else None, row[5])


def _commit(row: tuple[object, ...]) -> CommitRow:
    return CommitRow(
        id=str(row[1]),
        parents=tuple(json.loads(str(row[2]))),
        committer=str(row[3]),
        message=str(row[4]),
        creation_date=int(str(row[5])),
        meta_range_id=str(row[6]),
        metadata=dict(json.loads(str(row[7]))),
        version=int(str(row[8])),
        generation=int(str(row[9])),
    )


def _repository(row: tuple[object, ...]) -> RepositoryRow:
    return RepositoryRow(str(row[0]), str(row[1]), str(row[2]), str(row[3]), int(str(row[4])), bool(row[5]))
