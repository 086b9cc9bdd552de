"""Synthetic repositories: served by the same server, and their manifest is the GC ground truth.

The must-shows of the streamed generator: at 10K objects the real mark (``lakefs-gc mark`` on
the served exports, candidates from a listing of the physical objects, or from the Parquet S3
Inventory delivery written instead of them) marks exactly the manifest's garbage and keeps
exactly the rest; the gzip CSV delivery, read by the mark's own reader and router, lists exactly
the manifest's objects; and the generator's peak RSS does not grow from 50K to 500K objects.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from lakefs_gc.cli.main import main as cli_main
from lakefs_gc.inventory.delivery import Delivery
from lakefs_gc.inventory.mapping import NamespaceRoute, route_rows
from lakefs_gc.inventory.s3.manifest import discover
from lakefs_gc.inventory.s3.reader import read_data_file
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_location, parse_storage_namespace
from lakefs_gc.testing.context import ServerContext, ServerSettings
from lakefs_gc.testing.server import LakeFSTestServer
from lakefs_gc.testing.store import Store
from lakefs_gc.testing.synth import SynthSpec, synthesize
from lakefs_gc.testing.synth.outputs import InventoryTarget, next_delivery
from tests.support.gc_env import run_cli
from tests.testing.gc_view import gc_view
from tests.testing.sdk import Lakefs

KINDS = {"committed", "overwritten", "deleted", "deleted-branch", "staged", "reset"}


def manifest_rows(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
    return rows


def test_synthetic_repository_exports_match_its_manifest(tmp_path: Path) -> None:
    root, state, manifest = tmp_path / "root", tmp_path / "state", tmp_path / "manifest"
    store = Store(state)
    settings = ServerSettings(storage=StorageOptions(local_root=str(root)))
    spec = SynthSpec(objects=3000, commits=60, days=30, branches=6, uncommitted=200, garbage=600, seed=3,
                     range_entries=64)  # fmt: skip
    report = synthesize(ServerContext(store, settings), spec, manifest=manifest, progress=lambda _m: None)
    store.close()
    assert report.commits > spec.commits and report.branches == spec.branches
    assert {k.split(":")[0] for k in report.by_kind} == KINDS
    assert report.garbage == spec.garbage and report.head_ranges > 10

    rows = manifest_rows(manifest)
    assert len(rows) == report.physical_objects == len({r["address"] for r in rows})
    assert all((root / "synth" / r["address"]).is_file() for r in rows)
    with (
        LakeFSTestServer(storage_root=root, state_dir=state) as server,
        server.sdk_client() as client,
    ):
        lakefs = Lakefs(client)
        branches = lakefs.branches.list_branches("synth", show_hidden=True, amount=1000).results
        visible = lakefs.branches.list_branches("synth", amount=1000).results
        assert len(branches) == spec.branches == len(visible) + 1  # one hidden
        view = gc_view(lakefs, "synth", str(root))
    expected_garbage = {r["address"] for r in rows if r["garbage"]}
    assert {r["address"] for r in rows} - view.referenced == expected_garbage
    assert {r["address"] for r in rows if r["kind"] == "staged"} <= view.uncommitted
    assert {r["address"] for r in rows if r["kind"] in ("deleted-branch", "reset")} <= expected_garbage
    kept = {r["address"] for r in rows if r["kind"] in ("deleted", "overwritten") and not r["garbage"]}
    assert kept and kept <= view.committed  # deleted or overwritten, but still held by active commits


def test_synth_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(
        ["test-server", "synth", "--storage-root", str(tmp_path / "r"), "--state-dir", str(tmp_path / "s"),
         "--objects", "500", "--commits", "20", "--branches", "3", "--uncommitted", "20", "--garbage", "50"]
    )  # fmt: skip
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["repository"] == "synth" and Path(report["manifest"]).is_dir()
    assert report["physical_objects"] >= 500 + 20  # committed + staged, plus garbage


# ---------------------------------------------------------------------------------------------
# the real mark on a 10K-object repository


@dataclass
class Synthesized:
    root: Path
    state: Path
    rows: list[dict[str, Any]]
    inventory: str | None

    @property
    def garbage(self) -> set[str]:
        return {r["address"] for r in self.rows if r["garbage"]}

    @property
    def live(self) -> set[str]:
        return {r["address"] for r in self.rows if not r["garbage"]}


def synth(base: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> Synthesized:
    root, state = base / "storage root+1", base / "state"  # a space and a '+': CSV keys are form-encoded
    argv = ["test-server", "synth", "--storage-root", str(root), "--state-dir", str(state),
            "--objects", "10000", "--commits", "120", "--branches", "12", "--uncommitted", "1000",
            "--garbage", "1500", "--seed", "7", *extra]  # fmt: skip
    capsys.readouterr()
    assert cli_main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["garbage"] == 1500 and report["head_ranges"] > 10
    return Synthesized(root, state, manifest_rows(Path(report["manifest"])), report["inventory_to"])


def mark(
    repo: Synthesized, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[set[str], dict[str, Any]]:
    """``lakefs-gc mark`` against the test server serving ``repo``: the marked set and the summary."""
    with LakeFSTestServer(storage_root=repo.root, state_dir=repo.state) as server:
        info = server.connection_info()
        code, lines, err = run_cli(
            capsys, "mark", "--repo", "synth", "--unsafe-min-age", "0s", "--output", "json",
            "--lakefs-endpoint", info["endpoint"], f"--lakefs-access-key-id={info['access_key_id']}",
            f"--lakefs-secret-access-key={info['secret_access_key']}", "--local-root", str(repo.root), *extra,
        )  # fmt: skip
    assert code == 0, err
    result = lines[0]
    deleted = repo.root / "synth" / "_lakefs/retention/gc/unified" / str(result["mark_id"]) / "deleted"
    fs = pafs.LocalFileSystem()
    marked: list[str] = []
    for part in sorted(deleted.glob("*.parquet")):
        marked += [str(a) for a in pq.read_table(part, filesystem=fs).column("address").to_pylist()]
    assert len(marked) == len(set(marked))
    return set(marked), result["summary"]


@pytest.mark.usefixtures("spark")
def test_mark_of_a_synthesized_repository_is_its_manifest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = synth(tmp_path, capsys)
    marked, summary = mark(repo, capsys)
    assert marked == repo.garbage
    assert summary["num_listed_objects"] - len(marked) == len(repo.live)  # everything else is kept


@pytest.mark.usefixtures("spark")
def test_inventory_mark_of_a_synthesized_namespace_is_its_manifest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = synth(
        tmp_path, capsys, "--no-objects", "--inventory-format", "parquet", "--inventory-rows-per-file", "4000"
    )
    assert not (repo.root / "synth" / "data").exists(), "--no-objects writes no object"
    assert repo.inventory is not None
    marked, summary = mark(repo, capsys, "--inventory", repo.inventory)
    assert summary["candidates"]["source"] == "inventory" and summary["candidates"]["data_files"] > 3
    assert marked == repo.garbage
    assert summary["num_listed_objects"] - len(marked) == len(repo.live)


def test_csv_inventory_of_a_synthesized_namespace_lists_its_manifest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The gzip CSV delivery (form-encoded keys) describes exactly the manifest's objects, read by
    the mark's own reader and router: the classification on top is the Parquet test's."""
    repo = synth(
        tmp_path, capsys, "--no-objects", "--inventory-format", "csv", "--inventory-rows-per-file", "4000"
    )
    assert repo.inventory is not None
    fs = pafs.LocalFileSystem()
    found = discover(fs, repo.inventory)
    assert not found.rejected and not found.pending and len(found.complete) == 1
    delivery = found.complete[0]
    assert len(delivery.files) > 3 and {f.format for f in delivery.files} == {"csv"}
    assert listed_addresses(fs, delivery, repo.root) == repo.garbage | repo.live


def listed_addresses(fs: pafs.FileSystem, delivery: Delivery, root: Path) -> set[str]:
    """The namespace ``local://synth``'s addresses ``delivery`` lists, through the mark's own reader
    and router (each listed once)."""
    route = NamespaceRoute.of("synth", parse_storage_namespace("local://synth", local_root=str(root)))
    listed: list[str] = []
    for data_file in delivery.files:
        for batch in read_data_file(fs, delivery, data_file):
            out = route_rows(batch, [route], delivery_id=delivery.id, snapshot_time=delivery.snapshot_time)
            listed += [str(a) for a in out.column("address").to_pylist()]
    assert len(listed) == len(set(listed))
    return set(listed)


def test_the_next_delivery_drops_the_deleted_objects_and_lists_the_new_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The delivery after a sweep (the seed-scale benchmark's second cycle reads it): the previous
    one's objects without the deleted ones, plus what was written since, in the real layout."""
    repo = synth(
        tmp_path, capsys, "--no-objects", "--inventory-format", "parquet", "--inventory-rows-per-file", "4000"
    )
    assert repo.inventory is not None
    fs = pafs.LocalFileSystem()
    previous = discover(fs, repo.inventory).complete[0]
    deleted = sorted(repo.garbage)[::2]
    new = repo.root / "synth" / "data" / "gnew" / "written-since"
    new.parent.mkdir(parents=True)
    new.write_bytes(b"0123456789abcdef")
    namespace = parse_storage_namespace("local://synth", local_root=str(repo.root))
    destination = parse_location(str(tmp_path / "after-sweep"))
    written = next_delivery(
        previous, InventoryTarget(destination, "parquet", 3000), namespace, StorageOptions(),
        previous.snapshot_time + timedelta(days=1), deleted=pa.array(deleted),
    )  # fmt: skip
    found = discover(fs, str(tmp_path / "after-sweep"))
    assert not found.rejected and not found.pending and len(found.complete) == 1
    delivery = found.complete[0]
    assert written.endswith("manifest.json") and len(delivery.files) > 3
    expected = (repo.garbage | repo.live) - set(deleted) | {"data/gnew/written-since"}
    assert listed_addresses(fs, delivery, repo.root) == expected


# ---------------------------------------------------------------------------------------------
# memory


def peak_rss_mib(base: Path, objects: int) -> int:
    """Peak RSS of ``test-server synth`` over ``objects`` objects (and 10% staged, 10% garbage)."""
    argv = [sys.executable, "-m", "lakefs_gc.cli.main", "test-server", "synth", "--storage-root",
            str(base / "root"), "--state-dir", str(base / "state"), "--objects", str(objects),
            "--commits", "300", "--branches", "30", "--uncommitted", str(objects // 10),
            "--garbage", str(objects // 10), "--range-entries", "500", "--no-objects"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert child.stdout is not None
    out = child.stdout.read()
    _pid, status, usage = os.wait4(child.pid, 0)  # this child's own rusage, not all children's
    child.returncode = os.waitstatus_to_exitcode(status)
    assert child.returncode == 0, out
    assert json.loads(out)["physical_objects"] >= objects
    return usage.ru_maxrss // 1024


def test_generator_memory_does_not_grow_with_the_objects(tmp_path: Path) -> None:
    small = peak_rss_mib(tmp_path / "small", 50_000)
    large = peak_rss_mib(tmp_path / "large", 500_000)
    assert large <= 1.2 * small + 16, f"peak RSS {small} MiB at 50K objects, {large} MiB at 500K"
