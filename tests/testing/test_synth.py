"""Synthetic repositories: served by the same server, and their manifest is the GC ground truth."""

from __future__ import annotations

import json
from pathlib import Path

import lakefs_sdk
import pyarrow.parquet as pq
import pytest

from lakefs_gc.cli.main import main as cli_main
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.testing.context import ServerContext, ServerSettings
from lakefs_gc.testing.server import LakeFSTestServer
from lakefs_gc.testing.store import Store
from lakefs_gc.testing.synth import SynthSpec, synthesize
from tests.testing.gc_view import gc_view
from tests.testing.sdk import Lakefs


def test_synthetic_repository_exports_match_its_manifest(tmp_path: Path) -> None:
    root, state, manifest = tmp_path / "root", tmp_path / "state", tmp_path / "manifest.parquet"
    store = Store(state)
    settings = ServerSettings(storage=StorageOptions(local_root=str(root)))
    spec = SynthSpec(objects=3000, commits=60, days=30, branches=6, uncommitted=200, garbage=600, seed=3)
    report = synthesize(ServerContext(store, settings), spec, manifest=manifest, progress=lambda _m: None)
    store.close()
    assert report.commits > spec.commits and report.branches == spec.branches
    kinds = {k.split(":")[0] for k in report.by_kind}
    assert kinds == {"committed", "overwritten", "deleted", "deleted-branch", "staged", "reset"}

    rows = pq.read_table(manifest).to_pylist()
    assert len(rows) == report.physical_objects == len({r["address"] for r in rows})
    assert all((root / "synth" / r["address"]).is_file() for r in rows)
    with (
        LakeFSTestServer(storage_root=root, state_dir=state) as server,
        lakefs_sdk.ApiClient(server.sdk_configuration()) as client,
    ):
        lakefs = Lakefs(client)
        branches = lakefs.branches.list_branches("synth", show_hidden=True, amount=1000).results
        assert len(branches) == spec.branches
        view = gc_view(lakefs, "synth", str(root))
        some = next(r for r in rows if r["kind"] == "committed" and not r["garbage"])
        assert some["address"] in view.committed
    expected_garbage = {r["address"] for r in rows if r["garbage"]}
    assert {r["address"] for r in rows} - view.referenced == expected_garbage
    assert {r["address"] for r in rows if r["kind"] == "staged"} <= view.uncommitted
    assert {r["address"] for r in rows if r["kind"] in ("deleted-branch", "reset")} <= expected_garbage
    assert len(expected_garbage) == report.garbage > 0


def test_synth_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(
        ["test-server", "synth", "--storage-root", str(tmp_path / "r"), "--state-dir", str(tmp_path / "s"),
         "--objects", "500", "--commits", "20", "--branches", "3", "--uncommitted", "20", "--garbage", "50"]
    )  # fmt: skip
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["repository"] == "synth" and Path(report["manifest"]).is_file()
    assert report["physical_objects"] >= 500 + 20  # committed + staged, plus garbage
