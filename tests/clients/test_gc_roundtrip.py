"""A lakeFS user's month, written only through ``lakefs`` and ``lakefs-spec``, then ``lakefs-gc run``.

pandas tables (CSV and Parquet) through ``lakefs://`` paths, both clients' transactions, copies, a
revert, a cherry-pick, tags (one deleted), a deleted branch with staged data, a deleted branch with
old commits, a reset, overwritten uploads and commits dated past retention. Then the real CLI runs
mark and sweep with the repository's retention rules, and every file of every branch and tag is read
back through lakefs-spec and compared byte for byte with what it was before. The GC must have
collected exactly the garbage the history made, and no client call may have hit a missing route.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow.parquet as pq
import pytest
from lakefs_sdk.models import GarbageCollectionRules

import lakefs
from lakefs_gc.cli.main import main
from tests.clients.conftest import Clients, start_clients

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO = "analytics"
DAY = 86400
Snapshot = dict[str, dict[str, bytes]]  # ref -> path -> bytes


@dataclass
class History:
    """What the history wrote, and the physical addresses it made garbage."""

    clients: Clients
    written: Snapshot = field(default_factory=dict)
    garbage: dict[str, str] = field(default_factory=dict)  # why -> namespace-relative key
    frames: dict[str, pd.DataFrame] = field(default_factory=dict)  # "ref/path" -> table

    def url(self, ref: str, path: str) -> str:
        return f"lakefs://{REPO}/{ref}/{path}"

    def parquet(self, ref: str, path: str, frame: pd.DataFrame) -> str:
        frame.to_parquet(self.url(ref, path), storage_options=self.clients.storage_options)
        self.frames[f"{ref}/{path}"] = frame
        return self.address(ref, path)

    def csv(self, ref: str, path: str, frame: pd.DataFrame) -> str:
        frame.to_csv(self.url(ref, path), index=False, storage_options=self.clients.storage_options)
        self.frames[f"{ref}/{path}"] = frame
        return self.address(ref, path)

    def put(self, ref: str, path: str, data: bytes, **metadata: str) -> str:
        with self.clients.fs.open(self.url(ref, path), "wb", metadata=metadata or None) as f:
            f.write(data)
        self.written.setdefault(ref, {})[path] = data
        return self.address(ref, path)

    def address(self, ref: str, path: str) -> str:
        physical = lakefs.Repository(REPO, client=self.clients.client).ref(ref).object(path).stat()
        return physical.physical_address.split(f"/{REPO}/", 1)[1]


def users(version: int) -> pd.DataFrame:
    return pd.DataFrame({"id": range(50), "name": [f"user-{i}-v{version}" for i in range(50)]})


def build_history(clients: Clients) -> History:
    h = History(clients)
    now = int(time.time())
    repo = clients.repository(REPO)
    rules = GarbageCollectionRules(default_retention_days=7, branches=[])
    clients.client.sdk_client.repositories_api.set_gc_rules(REPO, rules)  # lakefs has no rules API of its own
    main, fs = repo.branch("main"), clients.fs

    h.garbage["users v1, overwritten 20 days ago"] = h.parquet("main", "tables/users.parquet", users(1))
    h.garbage["events, deleted 20 days ago"] = h.csv("main", "raw/events.csv", pd.DataFrame({"e": [1, 2]}))
    h.put("main", "docs/readme.txt", b"the analytics repository\n", owner="data-team")
    main.commit("initial load", date=now - 30 * DAY)
    h.parquet("main", "tables/users.parquet", users(2))
    fs.rm(h.url("main", "raw/events.csv"))
    del h.frames["main/raw/events.csv"]
    h.csv("main", "raw/events-2.csv", pd.DataFrame({"e": [3, 4, 5]}))
    v2 = main.commit("users v2", date=now - 20 * DAY)
    repo.tag("users-v2").create(v2)

    with fs.transaction(REPO, "main") as tx:  # lakefs-spec: ephemeral branch, commit, merge, delete
        h.parquet(
            tx.branch.id, "tables/orders.parquet", pd.DataFrame({"order": [1, 2], "amount": [9.5, 3.0]})
        )
        tx.commit(message="orders")
    with main.transact(commit_message="regions", tag="release-1") as btx:  # lakefs: the same, tagged
        btx.object("tables/regions.csv").upload(b"region\neu\nus\n", content_type="text/csv")

    fs.cp_file(h.url("main", "tables/users.parquet"), h.url("main", "archive/users-v2.parquet"))
    repo.ref("release-1").object("tables/regions.csv").copy("main", "archive/regions.csv")
    draft = h.put("main", "tmp/draft.txt", b"draft 1")
    h.put("main", "tmp/draft.txt", b"draft 2")
    h.garbage["draft 1, overwritten before its commit"] = draft
    main.commit("archive")

    fix = repo.branch("fix").create(main)
    h.parquet("fix", "tables/users.parquet", users(666))
    bad = fix.commit("bad users")
    fix.revert(bad, parent_number=0)
    del h.frames["fix/tables/users.parquet"]
    dev = repo.branch("dev").create(main)
    h.put("dev", "features/f1.txt", b"feature one")
    feature = dev.commit("feature one")
    main.cherry_pick(feature)
    h.put("dev", "features/wip.txt", b"staged on dev, never committed")  # staged: must survive

    tmp = repo.tag("tmp").create(main)
    tmp.delete()
    scratch = repo.branch("scratch").create(main)
    for i in range(3):
        h.garbage[f"scratch {i}, staged on a deleted branch"] = h.parquet(
            "scratch", f"s/{i}.parquet", users(i)
        )
    scratch.delete()
    experiment = repo.branch("experiment").create(main)
    h.garbage["model, committed 30 days ago on a deleted branch"] = h.put(
        "experiment", "model.bin", b"\x00" * 4096
    )
    experiment.commit("model", date=now - 30 * DAY)
    experiment.delete()
    wip = repo.branch("wip").create(main)
    h.garbage["wip, staged then reset"] = h.put("wip", "w.txt", b"reset me")
    wip.reset_changes()
    for ref in ("scratch", "experiment", "wip"):
        h.written.pop(ref, None)
        for key in [k for k in h.frames if k.startswith(ref + "/")]:
            del h.frames[key]
    return h


def snapshot(clients: Clients) -> Snapshot:
    """Every file of every branch and tag, read through lakefs-spec."""
    repo = lakefs.Repository(REPO, client=clients.client)
    refs = [b.id for b in repo.branches()] + [t.id for t in repo.tags()]
    out: Snapshot = {}
    for ref in refs:
        paths = clients.fs.find(f"lakefs://{REPO}/{ref}/")
        out[ref] = {p.split("/", 2)[2]: clients.fs.cat_file(f"lakefs://{p}") for p in paths}
    return out


def run_gc(clients: Clients) -> tuple[int, list[dict[str, Any]], str]:
    info = clients.server.connection_info()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([
            "run", "--repo", REPO, "--yes", "--unsafe-min-age", "0s", "--output", "json",
            "--max-delete-fraction", "1",
            "--lakefs-endpoint", info["endpoint"], f"--lakefs-access-key-id={info['access_key_id']}",
            f"--lakefs-secret-access-key={info['secret_access_key']}",
            "--local-root", str(clients.storage_root),
        ])  # fmt: skip
    lines = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    return code, lines, err.getvalue()


@dataclass
class Collected:
    history: History
    before: Snapshot
    after: Snapshot
    code: int
    lines: list[dict[str, Any]]
    stderr: str
    deleted: set[str]


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> Iterator[Collected]:
    for clients in start_clients(tmp_path_factory.mktemp("clients") / "storage"):
        history = build_history(clients)
        before = snapshot(clients)
        code, lines, stderr = run_gc(clients)
        reports = clients.storage_root / REPO / "_lakefs/retention/gc/unified"
        deleted = set(pq.read_table(next(reports.glob("*/deleted"))).column("address").to_pylist())
        yield Collected(history, before, snapshot(clients), code, lines, stderr, deleted)


def test_gc_collected_exactly_the_garbage_the_history_made(collected: Collected) -> None:
    assert collected.code == 0, collected.stderr
    mark, sweep = collected.lines
    assert mark["success"] is True
    assert collected.deleted == set(collected.history.garbage.values()), collected.history.garbage
    assert (sweep["deleted"], sweep["failed"]) == (len(collected.history.garbage), 0)
    root = collected.history.clients.storage_root / REPO
    assert not any((root / key).exists() for key in collected.history.garbage.values())


def test_every_file_of_every_branch_and_tag_reads_back_unchanged(collected: Collected) -> None:
    assert set(collected.before) == {"main", "dev", "fix", "wip", "release-1", "users-v2"}
    assert collected.after == collected.before
    for ref, files in collected.history.written.items():
        for path, data in files.items():
            assert collected.after[ref][path] == data, (ref, path)


def test_pandas_reads_every_table_back(collected: Collected) -> None:
    options = collected.history.clients.storage_options
    for key, frame in collected.history.frames.items():
        ref, path = key.split("/", 1)
        if ref not in collected.after:
            continue  # the transaction's ephemeral branch: its tables were merged into main
        url = f"lakefs://{REPO}/{key}"
        read = pd.read_parquet(url, storage_options=options) if path.endswith(".parquet") else None
        read = pd.read_csv(url, storage_options=options) if read is None else read
        pd.testing.assert_frame_equal(read, frame)
    merged = pd.read_parquet(f"lakefs://{REPO}/main/tables/orders.parquet", storage_options=options)
    assert merged["amount"].sum() == 12.5
    assert pd.read_parquet(f"lakefs://{REPO}/fix/tables/users.parquet", storage_options=options).equals(
        users(2)
    )
    assert pd.read_parquet(f"lakefs://{REPO}/users-v2/tables/users.parquet", storage_options=options).equals(
        users(2)
    )


def test_no_client_call_hit_a_missing_route(collected: Collected) -> None:
    assert collected.history.clients.server.unrouted_requests == []
