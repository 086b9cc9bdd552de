"""The test server as a process: command line, credentials, restart with --state-dir, its ranges."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import lakefs_sdk
import pytest
from lakefs_sdk.configuration import Configuration
from lakefs_sdk.exceptions import ApiException

from lakefs_gc.cli.main import main as cli_main
from lakefs_gc.testing.server import LakeFSTestServer
from tests.support.rocksdb import SstDump
from tests.testing.sdk import Lakefs


@contextmanager
def server_process(*args: str) -> Iterator[dict[str, str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "lakefs_gc.cli.main", "test-server", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        yield json.loads(line)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


def client(info: dict[str, str]) -> lakefs_sdk.ApiClient:
    return lakefs_sdk.ApiClient(
        Configuration(
            host=info["endpoint"], username=info["access_key_id"], password=info["secret_access_key"]
        )
    )


def test_restart_with_state_dir_keeps_everything(tmp_path: Path) -> None:
    root, state = tmp_path / "root", tmp_path / "state"
    args = ("--storage-root", str(root), "--state-dir", str(state))
    with server_process(*args) as info:
        assert info["endpoint"].endswith("/api/v1")
        lakefs = Lakefs(client(info))
        lakefs.create_repo("keep", "local://keep")
        lakefs.branch("keep", "feature", "main")
        lakefs.branch("keep", "hidden-one", "main", hidden=True)
        lakefs.upload("keep", "feature", "a.txt", b"committed")
        commit = lakefs.commit("keep", "feature", "add a", date=1_700_000_000)
        lakefs.upload("keep", "feature", "b.txt", b"staged")
        lakefs.set_rules("keep", 3)
        lakefs.tags.create_tag("keep", lakefs_sdk.TagCreation(id="v1", ref=commit.id))
    with server_process(*args) as again:
        assert again["access_key_id"] == info["access_key_id"]  # credentials kept in the state dir
        assert again["secret_access_key"] == info["secret_access_key"]
        lakefs = Lakefs(client(again))
        assert lakefs.repositories.get_repository("keep").storage_namespace == "local://keep"
        branches = lakefs.branches.list_branches("keep", show_hidden=True).results
        assert {b.id for b in branches} == {"main", "feature", "hidden-one"}
        assert lakefs.branches.get_branch("keep", "feature").commit_id == commit.id
        assert lakefs.commits.get_commit("keep", commit.id).creation_date == 1_700_000_000
        assert lakefs.objects.get_object("keep", "feature", "a.txt") == b"committed"
        assert lakefs.objects.get_object("keep", "feature", "b.txt") == b"staged"
        assert lakefs.tags.get_tag("keep", "v1").commit_id == commit.id
        assert lakefs.repositories.get_gc_rules("keep").default_retention_days == 3


def test_wrong_credentials_get_401(tmp_path: Path) -> None:
    with server_process("--storage-root", str(tmp_path)) as info:
        bad = Lakefs(client({**info, "secret_access_key": "nope"}))
        with pytest.raises(ApiException) as err:
            bad.repositories.list_repositories()
        assert err.value.status == 401


def test_cli_help_explains_namespaces(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["test-server", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--state DIR" in out and "local://" in out and "s3://" in out


def test_ranges_written_by_the_server_read_back_with_dump_and_sst_dump(
    lakefs: Lakefs,
    server: LakeFSTestServer,
    storage_root: Path,
    sst_dump: SstDump,
    capsys: pytest.CaptureFixture[str],
) -> None:
    lakefs.create_repo("ranges", "local://ranges")
    paths = [f"dir{i % 7}/object-{i:04d}" for i in range(300)]
    for path in paths:
        lakefs.upload("ranges", "main", path, path.encode())
    commit = lakefs.commit("ranges", "main", "many objects")
    metarange = storage_root / "ranges" / "_lakefs" / commit.meta_range_id
    assert cli_main(["sstable", "dump", str(metarange)]) == 0
    ranges = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sum(r["count"] for r in ranges) == 300
    entries = []
    for r in ranges:
        range_file = storage_root / "ranges" / "_lakefs" / r["range_id"]
        assert cli_main(["sstable", "dump", str(range_file)]) == 0
        dumped = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [k for k, _ in sst_dump(range_file)] == [d["key"].encode() for d in dumped]
        entries += dumped
    assert [e["key"] for e in entries] == sorted(paths)
    assert all(e["address_type"] == "RELATIVE" and e["address"].startswith("data/") for e in entries)
    assert len(sst_dump(metarange)) == len(ranges)
