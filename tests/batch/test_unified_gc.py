"""lakeFS's TestUnifiedGC scenario, end to end through ``lakefs-gc run``, on every storage backend."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from lakefs_gc.testing.faults import Fault
from tests.support.gc_env import GcEnv, run_cli
from tests.support.object_stores import s3_client
from tests.support.servers import AzuriteServer, MotoServer
from tests.testing.unified_gc import EXPECTED_SURVIVORS, build_unified_gc

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakefs_gc.testing.blockstore import NamespaceStore

pytestmark = pytest.mark.usefixtures("spark")


def check_unified_gc(env: GcEnv, capsys: pytest.CaptureFixture[str], namespace: str) -> NamespaceStore:
    repo = "unified"
    scenario = build_unified_gc(env.lakefs, repo, namespace)
    store = env.store(namespace)
    for name in scenario.address:
        assert store.exists(scenario.relative(name)), name

    code, lines, err = run_cli(
        capsys, "run", "--repo", repo, "--yes", "--unsafe-min-age", "0s", "--output", "json",
        "--max-delete-fraction", "1",  # 6 of the 10 objects are garbage, above the default 0.5
        *env.args(),
    )  # fmt: skip
    assert code == 0, err
    mark, sweep = lines
    garbage = {scenario.relative(n) for n, survives in EXPECTED_SURVIVORS.items() if not survives}
    assert mark["success"] is True and mark["summary"]["num_deleted_objects"] == len(garbage)
    assert (sweep["deleted"], sweep["missing"], sweep["failed"]) == (len(garbage), 0, 0)

    survivors = {name: store.exists(scenario.relative(name)) for name in scenario.address}
    assert survivors == EXPECTED_SURVIVORS
    # what lakeFS still shows is readable: file_1 and file_6 in history, file_3 staged on main
    assert env.lakefs.objects.get_object(repo, "main", "file_3") == b"file_3"
    report = f"_lakefs/retention/gc/unified/{mark['mark_id']}/"
    summary = json.loads(store.get(report + "summary.json") or b"{}")
    assert list(summary)[:6] == [
        "run_id",
        "success",
        "first_slice",
        "start_time",
        "cutoff_time",
        "num_deleted_objects",
    ]
    assert summary["run_id"] == mark["mark_id"] and summary["success"] is True
    assert summary["sweep"]["deleted"] == len(garbage)
    assert summary["revalidation"]["saved"] == sweep["saved"] == 0 and sweep["revalidated"] is True
    assert store.exists(report + "deleted/_SUCCESS") and store.exists(report + "swept/_SUCCESS")
    return store


def test_unified_gc_local(local_env: GcEnv, capsys: pytest.CaptureFixture[str], spark: SparkSession) -> None:
    # count the range-location calls the executors make: each distinct range is resolved and read once
    faults = local_env.server.faults
    ranges = faults.inject(Fault(method="GET", path=r"/metadata/range/[^/]+$", rewrite=lambda body: body))
    metaranges = faults.inject(
        Fault(method="GET", path=r"/metadata/meta_range/[^/]+$", rewrite=lambda body: body)
    )
    store = check_unified_gc(local_env, capsys, "local://unified")
    (summary_path,) = (local_env.storage_root / "unified/_lakefs/retention/gc/unified").glob("*/summary.json")
    summary = json.loads(summary_path.read_text())
    assert faults.hits(ranges) == summary["num_ranges"] > 0
    assert summary["num_metaranges"] == 4
    # and the identity-twin guard reads each branch HEAD's metarange once more (there is garbage)
    branches = local_env.lakefs.branches.list_branches("unified", show_hidden=True).results
    heads = {local_env.lakefs.commits.get_commit("unified", b.commit_id).meta_range_id for b in branches}
    assert faults.hits(metaranges) == summary["num_metaranges"] + len(heads - {""})
    assert summary["kept"] == {
        "committed": {"objects": 3, "bytes": 18},
        "uncommitted": {"objects": 1, "bytes": 6},
        "too_young": {"objects": 0, "bytes": 0},
        "retention_cross_check": {"objects": 0, "bytes": 0},
        "identity_twin": {"objects": 0, "bytes": 0},
    }
    assert store.exists("_lakefs/dummy")
    marked = spark.read.parquet(
        str(local_env.storage_root / "unified/_lakefs/retention/gc/unified") + "/*/deleted"
    )
    assert marked.columns[0] == "address" and marked.count() == 6


def test_unified_gc_s3(
    cloud_env: GcEnv, capsys: pytest.CaptureFixture[str], moto: MotoServer, s3_bucket: str
) -> None:
    check_unified_gc(cloud_env, capsys, f"s3://{s3_bucket}/repos/unified")
    keys = {o["Key"] for o in s3_client(moto).list_objects_v2(Bucket=s3_bucket)["Contents"]}
    assert "repos/unified/_lakefs/dummy" in keys


def test_unified_gc_azure(
    cloud_env: GcEnv, capsys: pytest.CaptureFixture[str], azurite: AzuriteServer, azure_container: str
) -> None:
    namespace = f"https://{azurite.account_name}.blob.core.windows.net/{azure_container}/repos/unified"
    check_unified_gc(cloud_env, capsys, namespace)
