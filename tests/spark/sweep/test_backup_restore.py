"""Backup -> sweep -> restore through the CLI leaves the namespace byte-identical, on every store.

lakeFS's TestUnifiedGC scenario is marked; the mark's six garbage objects are backed up (server-side
within a store, streamed across stores), swept, and restored. Every object of the namespace outside
the mark's own report directory is then byte for byte what it was before the backup.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs
import pytest

from lakefs_gc.errors import ConfigError
from lakefs_gc.gc.reports import report_dir
from lakefs_gc.spark.report.layout import ReportDir
from lakefs_gc.spark.sweep.backup import backup_location, read_copy_report
from lakefs_gc.storage.copiers import ObjectCopier
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_location
from lakefs_gc.storage.object_stores import LocalObjectStore, store_for
from tests.support.gc_env import GcEnv, run_cli
from tests.support.object_stores import azure_options, blob_service, s3_client, s3_options, unique_name
from tests.support.servers import AzuriteServer, MotoServer
from tests.testing.unified_gc import EXPECTED_SURVIVORS, UnifiedGcScenario, build_unified_gc

if TYPE_CHECKING:
    from lakefs_gc.testing.blockstore import NamespaceStore

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("spark")]

REPO = "unified"
GARBAGE = sorted(name for name, survives in EXPECTED_SURVIVORS.items() if not survives)


def snapshot(store: NamespaceStore, skip: str) -> dict[str, bytes]:
    """Every object of the namespace (relative key -> bytes) except those under ``skip``."""
    infos = store.fs.get_file_info(pafs.FileSelector(store.base, recursive=True, allow_not_found=True))
    keys = [i.path[len(store.base) + 1 :] for i in infos if i.type == pafs.FileType.File]
    return {k: store.get(k) or b"" for k in sorted(keys) if not k.startswith(skip)}


def mark(env: GcEnv, capsys: pytest.CaptureFixture[str], namespace: str) -> tuple[UnifiedGcScenario, str]:
    scenario = build_unified_gc(env.lakefs, REPO, namespace)
    code, lines, err = run_cli(
        capsys, "mark", "--repo", REPO, "--unsafe-min-age", "0s", "--output", "json", *env.args()
    )
    assert code == 0, err
    assert lines[0]["summary"]["num_deleted_objects"] == len(GARBAGE)
    return scenario, str(lines[0]["mark_id"])


def copy(
    env: GcEnv, capsys: pytest.CaptureFixture[str], command: str, mark_id: str, root: str
) -> dict[str, Any]:
    flag = "--to" if command == "backup" else "--from"
    code, lines, err = run_cli(
        capsys, command, "--repo", REPO, "--mark-id", mark_id, flag, root, "--output", "json", *env.args()
    )
    (line,) = lines
    line["exit_code"] = code
    line["stderr"] = err
    return line


def counts(line: dict[str, Any]) -> tuple[int, ...]:
    return tuple(line[o] for o in ("copied", "already", "missing", "conflict", "failed"))


def round_trip(
    env: GcEnv, capsys: pytest.CaptureFixture[str], namespace: str, backup_root: str
) -> tuple[UnifiedGcScenario, str, NamespaceStore]:
    scenario, mark_id = mark(env, capsys, namespace)
    store = env.store(namespace)
    reports = report_dir(mark_id)
    gc_files = "_lakefs/retention/gc/"  # the mark's reports, and the exports lakeFS writes for GC runs
    before = snapshot(store, gc_files)  # (the sweep's revalidation starts one)
    garbage = {scenario.relative(n) for n in GARBAGE}
    assert garbage <= set(before)

    backup = copy(env, capsys, "backup", mark_id, backup_root)
    assert backup["exit_code"] == 0, backup["stderr"]
    assert counts(backup) == (len(garbage), 0, 0, 0, 0)
    assert backup["bytes_copied"] == sum(len(before[a]) for a in garbage)
    assert snapshot(store, gc_files) == before, "backup changed the namespace"
    assert copy(env, capsys, "backup", mark_id, backup_root)["already"] == len(garbage)  # resumable

    code, lines, err = run_cli(
        capsys, "sweep", "--repo", REPO, "--mark-id", mark_id, "--output", "json",
        "--max-delete-fraction", "1", *env.args(),
    )  # fmt: skip
    assert code == 0, err
    assert lines[0]["deleted"] == len(garbage)
    assert not garbage & set(snapshot(store, gc_files))

    restore = copy(env, capsys, "restore", mark_id, backup_root)
    assert restore["exit_code"] == 0, restore["stderr"]
    assert counts(restore) == (len(garbage), 0, 0, 0, 0)
    assert snapshot(store, gc_files) == before, "the round trip changed the namespace"

    again = copy(env, capsys, "restore", mark_id, backup_root)
    assert counts(again) == (0, len(garbage), 0, 0, 0)
    report = ReportDir(store.location, mark_id, store.options)
    table = read_copy_report(report, "restore")
    assert sorted(table.column("address").to_pylist()) == sorted(garbage)
    assert set(table.column("outcome").to_pylist()) == {"already"}
    assert json.loads(store.get(reports + "backup.json") or b"{}")["location"] == backup["location"]
    return scenario, mark_id, store


def test_round_trip_local(local_env: GcEnv, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    root = tmp_path / "backups"
    scenario, mark_id, store = round_trip(local_env, capsys, f"local://{REPO}", str(root))
    # the layout: <root>/<repo>/<mark_id>/<address>, the namespace's own bytes
    for name in GARBAGE:
        address = scenario.relative(name)
        assert (root / REPO / mark_id / address).read_bytes() == store.get(address) == name.encode()


def test_round_trip_s3(
    cloud_env: GcEnv,
    capsys: pytest.CaptureFixture[str],
    moto: MotoServer,
    s3_bucket: str,
    request: pytest.FixtureRequest,
) -> None:
    """Server-side: CopyObject from the namespace's bucket to another bucket, and back."""
    backups = unique_name(request)
    s3_client(moto).create_bucket(Bucket=backups)
    round_trip(cloud_env, capsys, f"s3://{s3_bucket}/repos/{REPO}", f"s3://{backups}/gc-backups")


def test_round_trip_azure(
    cloud_env: GcEnv,
    capsys: pytest.CaptureFixture[str],
    azurite: AzuriteServer,
    azure_container: str,
    request: pytest.FixtureRequest,
) -> None:
    """Server-side: Copy Blob between two containers of the account, and back."""
    backups = unique_name(request)
    blob_service(azurite).create_container(backups)
    account = f"https://{azurite.account_name}.blob.core.windows.net"
    round_trip(cloud_env, capsys, f"{account}/{azure_container}/repos/{REPO}", f"{account}/{backups}/b")


def test_round_trip_across_stores(
    cloud_env: GcEnv,
    capsys: pytest.CaptureFixture[str],
    azurite: AzuriteServer,
    azure_container: str,
    moto: MotoServer,
    s3_bucket: str,
) -> None:
    """Streamed: an Azure namespace backed up to S3 and restored from there."""
    namespace = f"https://{azurite.account_name}.blob.core.windows.net/{azure_container}/repos/{REPO}"
    scenario, mark_id, _ = round_trip(cloud_env, capsys, namespace, f"s3://{s3_bucket}/gc-backups")
    body = s3_client(moto).get_object(
        Bucket=s3_bucket, Key=f"gc-backups/{REPO}/{mark_id}/{scenario.relative('file_2')}"
    )["Body"]
    assert body.read() == b"file_2"


def test_resume_conflict_and_refusals(
    local_env: GcEnv, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    scenario, mark_id = mark(local_env, capsys, f"local://{REPO}")
    store = local_env.store(f"local://{REPO}")
    root = tmp_path / "backups"
    first, second, *_ = (scenario.relative(n) for n in GARBAGE)

    # a backup killed part-way: two objects copied already; the rerun copies the rest
    for address in (first, second):
        (root / REPO / mark_id / address).parent.mkdir(parents=True, exist_ok=True)
        (root / REPO / mark_id / address).write_bytes(store.get(address) or b"")
    line = copy(local_env, capsys, "backup", mark_id, str(root))
    assert counts(line) == (len(GARBAGE) - 2, 2, 0, 0, 0) and line["exit_code"] == 0
    code, _, err = run_cli(
        capsys, "sweep", "--repo", REPO, "--mark-id", mark_id, "--max-delete-fraction", "1", *local_env.args()
    )
    assert code == 0, err

    # someone wrote new data at a marked address after the sweep: restore keeps it
    store.put(first, b"newer data")
    line = copy(local_env, capsys, "restore", mark_id, str(root))
    assert counts(line) == (len(GARBAGE) - 1, 0, 0, 1, 0) and line["exit_code"] == 9
    assert store.get(first) == b"newer data"
    table = read_copy_report(ReportDir(store.location, mark_id, store.options), "restore")
    (error,) = [r["error"] for r in table.to_pylist() if r["outcome"] == "conflict"]
    assert "not overwritten" in error

    # refusals: no such mark, a failed mark, a backup inside the namespace
    line_code, _, err = run_cli(
        capsys, "backup", "--repo", REPO, "--mark-id", "nope", "--to", str(root), *local_env.args()
    )
    assert line_code == 3 and "does not exist" in err
    failed = local_env.storage_root / REPO / report_dir("failedmark")
    failed.mkdir(parents=True)
    (failed / "summary.json").write_text('{"run_id":"failedmark","success":false}')
    line_code, _, err = run_cli(
        capsys, "backup", "--repo", REPO, "--mark-id", "failedmark", "--to", str(root), *local_env.args()
    )
    assert line_code == 10 and "failed run" in err
    inside = str(local_env.storage_root / REPO / "backups")
    line_code, _, err = run_cli(
        capsys, "backup", "--repo", REPO, "--mark-id", mark_id, "--to", inside, *local_env.args()
    )
    assert line_code == 3 and "overlaps the storage namespace" in err


def test_copier_refuses_unsafe_keys(tmp_path: Path) -> None:
    source, destination = tmp_path / "src", tmp_path / "dst"
    (source / "_lakefs").mkdir(parents=True)
    (source / "_lakefs" / "x").write_bytes(b"x")
    (source / "data" / "s1").mkdir(parents=True)
    (source / "data" / "s1" / "o").write_bytes(b"o")
    (destination / "data").mkdir(parents=True)
    os.symlink(tmp_path / "elsewhere", destination / "data" / "s1")  # a directory escaping the root
    copier = ObjectCopier(
        LocalObjectStore(parse_location(str(source))), LocalObjectStore(parse_location(str(destination)))
    )
    outcomes = {a: copier.copy(a) for a in ("_lakefs/x", "../src/data/s1/o", "data/s1/o")}
    assert all(o.outcome == "failed" for o in outcomes.values()), outcomes
    assert "not a deletable key" in (outcomes["_lakefs/x"].error or "")
    assert "resolves outside" in (outcomes["data/s1/o"].error or "")
    assert not (tmp_path / "elsewhere").exists()


def test_backup_location_layout() -> None:
    location = backup_location("s3://b/p", "repo", "m1", StorageOptions())
    assert (location.container, location.key) == ("b", "p/repo/m1/")
    with pytest.raises(ConfigError):
        backup_location("s3://b/p", "repo", "../m1", StorageOptions())


@pytest.mark.parametrize("kind", ["s3", "azure"])
def test_copier_compares_md5_where_the_store_reports_one(
    kind: str, moto: MotoServer, azurite: AzuriteServer, s3_bucket: str, azure_container: str
) -> None:
    """Same size, other bytes: a conflict, not ``already`` (S3 ETag / Azure Content-MD5)."""
    options = StorageOptions(s3=s3_options(moto), azure=azure_options(azurite))
    roots = {
        "s3": f"s3://{s3_bucket}",
        "azure": f"https://{azurite.account_name}.blob.core.windows.net/{azure_container}",
    }
    source = store_for(parse_location(roots[kind] + "/ns"), options)
    destination = store_for(parse_location(roots[kind] + "/backup"), options)
    for store, data in ((source, b"same"), (destination, b"diff")):
        assert store.write_new("data/s/o", io.BytesIO(data), 4)
    source.write_new("data/s/p", io.BytesIO(b"copy me"), 7)
    copier = ObjectCopier(source, destination)
    conflict, copied, already = (copier.copy(a) for a in ("data/s/o", "data/s/p", "data/s/p"))
    copier.close()
    assert conflict.outcome == "conflict" and "MD5" in (conflict.error or "")
    assert (copied.outcome, already.outcome) == ("copied", "already")
