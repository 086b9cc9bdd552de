"""Mark-only and sweep-only: across processes (spark-submit), and with marks written by lakeFS's Scala job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.conftest import REPO_ROOT
from tests.support.gc_env import GcEnv, run_cli
from tests.testing.unified_gc import EXPECTED_SURVIVORS, build_unified_gc

REPO = "unified"
GARBAGE = sorted(name for name, survives in EXPECTED_SURVIVORS.items() if not survives)


def spark_submit() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


@pytest.mark.slow  # a minute or more: two spark-submit processes
def test_mark_then_sweep_in_other_processes(local_env: GcEnv, spark: SparkSession) -> None:
    """``spark-submit batch/mark.py`` marks; a later ``lakefs-gc sweep`` process deletes exactly that."""
    scenario = build_unified_gc(local_env.lakefs, REPO, f"local://{REPO}")
    store = local_env.store(f"local://{REPO}")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    common = ["--repo", REPO, "--unsafe-min-age", "0s", "--output", "json", *local_env.args()]
    marked = subprocess.run(
        [spark_submit(), "--master", "local[2]", str(REPO_ROOT / "batch/mark.py"), *common],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert marked.returncode == 0, marked.stderr[-3000:]
    # Spark at WARN under spark-submit (its default is INFO: thousands of lines burying ours); only
    # SparkContext's first lines come before spark.log.level applies
    info = [line for line in marked.stderr.splitlines() if " INFO " in line]
    assert len(info) <= 5 and all("SparkContext" in line for line in info), marked.stderr[-3000:]
    (mark,) = [json.loads(line) for line in marked.stdout.splitlines() if line.startswith("{")]
    assert mark["summary"]["num_deleted_objects"] == len(GARBAGE)
    assert all(store.exists(scenario.relative(name)) for name in scenario.address), "mark deleted something"

    common = [c for c in common if c not in ("--unsafe-min-age", "0s")]
    swept = subprocess.run(
        [sys.executable, "-m", "lakefs_gc.cli.main", "sweep", "--mark-id", mark["mark_id"],
         "--max-delete-fraction", "1", *common],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert swept.returncode == 0, swept.stderr[-3000:]
    noise = ("WARNING: Using incubator modules", " INFO ", "log4j", "NativeCodeLoader")
    assert not [line for line in swept.stderr.splitlines() if any(n in line for n in noise)], swept.stderr
    (sweep,) = [json.loads(line) for line in swept.stdout.splitlines() if line.startswith("{")]
    assert (sweep["deleted"], sweep["missing"], sweep["failed"]) == (len(GARBAGE), 0, 0)
    assert {n: store.exists(scenario.relative(n)) for n in scenario.address} == EXPECTED_SURVIVORS


def write_scala_mark(
    spark: SparkSession, report: Path, mark_id: str, addresses: list[str], *, success: bool
) -> None:
    """What lakeFS's GarbageCollection.writeReports leaves: Spark parquet/text and a one-line summary."""
    df = spark.createDataFrame([(a,) for a in addresses], "address string").coalesce(2)
    df.write.parquet(str(report / "deleted"))
    df.write.text(str(report / "deleted.text"))
    summary = {
        "run_id": mark_id, "success": success, "first_slice": "g5adr8f5pvec73cpia80",
        "start_time": "2025-11-10T10:34:37.245361091Z", "cutoff_time": "2025-11-10T04:34:37.243Z",
        "num_deleted_objects": len(addresses),
    }  # fmt: skip
    (report / "summary.json").write_text(json.dumps(summary, separators=(",", ":")))


def test_sweep_a_mark_written_by_lakefs(
    local_env: GcEnv, spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = build_unified_gc(local_env.lakefs, REPO, f"local://{REPO}")
    store = local_env.store(f"local://{REPO}")
    reports = local_env.storage_root / REPO / "_lakefs/retention/gc/unified"
    mark_id = "g4uk6erfnfus73frbnqg"
    garbage = [scenario.relative(n) for n in GARBAGE]
    write_scala_mark(spark, reports / mark_id, mark_id, garbage, success=True)
    before_cutoff = datetime(2025, 11, 1, tzinfo=timezone.utc).timestamp()  # as a year-old mark saw them
    for address in garbage:
        os.utime(local_env.storage_root / REPO / address, (before_cutoff, before_cutoff))

    # lakeFS's summary has no num_listed_objects: the delete-fraction guard cannot be evaluated
    code, _, err = run_cli(capsys, "sweep", "--repo", REPO, "--mark-id", mark_id, *local_env.args())
    assert code == 10 and "no num_listed_objects" in err
    sweep = ("sweep", "--repo", REPO, "--mark-id", mark_id, "--force", "--output", "json", *local_env.args())
    code, lines, err = run_cli(capsys, *sweep)
    assert code == 0, err
    assert (lines[0]["deleted"], lines[0]["failed"]) == (len(garbage), 0)
    assert lines[0]["revalidated"] is True and lines[0]["saved"] == 0  # a year old: swept as revalidated
    assert {n: store.exists(scenario.relative(n)) for n in scenario.address} == EXPECTED_SURVIVORS
    summary = json.loads((reports / mark_id / "summary.json").read_text())
    assert list(summary)[:7] == [
        "run_id", "success", "first_slice", "start_time", "cutoff_time", "num_deleted_objects", "revalidation"
    ]  # fmt: skip
    swept = spark.read.parquet(str(reports / mark_id / "swept"))
    assert sorted(r["address"] for r in swept.filter("outcome = 'deleted'").collect()) == sorted(garbage)

    # sweeping again is harmless: swept/ confirms every object, none is deleted again, the counts stay
    code, lines, err = run_cli(capsys, *sweep)
    assert code == 0, err
    assert f"resuming: {len(garbage)} objects confirmed by earlier runs" in err
    assert (lines[0]["deleted"], lines[0]["missing"], lines[0]["failed"]) == (len(garbage), 0, 0)


def test_our_mark_reads_as_lakefs_reads_it(
    local_env: GcEnv, spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    """lakeFS's sweep-only reads ``spark.read.parquet(deleted)`` and uses the ``address`` column."""
    scenario = build_unified_gc(local_env.lakefs, REPO, f"local://{REPO}")
    code, lines, err = run_cli(
        capsys, "mark", "--repo", REPO, "--unsafe-min-age", "0s", "--output", "json", *local_env.args()
    )
    assert code == 0, err
    report = local_env.storage_root / REPO / "_lakefs/retention/gc/unified" / lines[0]["mark_id"]
    summary = spark.read.json(str(report / "summary.json")).first()
    assert summary is not None and summary["success"] is True
    deleted = spark.read.parquet(str(report / "deleted"))
    assert deleted.columns[0] == "address"
    expected = sorted(scenario.relative(n) for n in GARBAGE)
    assert sorted(r[0] for r in deleted.select("address").collect()) == expected
    assert sorted(r[0] for r in spark.read.text(str(report / "deleted.text")).collect()) == expected
    assert all(local_env.store(f"local://{REPO}").exists(a) for a in expected), "mark-only deleted something"


@pytest.mark.parametrize("success", [False, None], ids=["failed-mark", "no-summary"])
def test_sweep_refuses_failed_or_missing_marks(
    local_env: GcEnv, spark: SparkSession, capsys: pytest.CaptureFixture[str], success: bool | None
) -> None:
    scenario = build_unified_gc(local_env.lakefs, REPO, f"local://{REPO}")
    reports = local_env.storage_root / REPO / "_lakefs/retention/gc/unified"
    mark_id = "g4uk6erfnfus73frbnqg"
    garbage = [scenario.relative(n) for n in GARBAGE]
    write_scala_mark(spark, reports / mark_id, mark_id, garbage, success=bool(success))
    if success is None:
        (reports / mark_id / "summary.json").unlink()
    code, _, err = run_cli(capsys, "sweep", "--repo", REPO, "--mark-id", mark_id, *local_env.args())
    assert code != 0
    expected = "is of a failed run" if success is False else f"Mark ID ({mark_id}) does not exist"
    assert expected in err
    assert all(local_env.store(f"local://{REPO}").exists(a) for a in garbage)


def test_several_repositories_in_one_invocation(local_env: GcEnv, capsys: pytest.CaptureFixture[str]) -> None:
    scenarios = {
        repo: build_unified_gc(local_env.lakefs, repo, f"local://{repo}") for repo in ("repo-a", "repo-b")
    }
    code, marks, err = run_cli(
        capsys, "mark", "--repo", "repo-a", "--repo", "repo-b", "--unsafe-min-age", "0s", "--output", "json",
        *local_env.args(),
    )  # fmt: skip
    assert code == 0, err
    assert [m["repository"] for m in marks] == ["repo-a", "repo-b"]
    assert all(m["summary"]["num_deleted_objects"] == len(GARBAGE) for m in marks)
    argv = ["sweep", "--output", "json", "--max-delete-fraction", "1", *local_env.args()]
    for mark in marks:
        argv += ["--repo", mark["repository"], "--mark-id", mark["mark_id"]]
    code, sweeps, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert [(s["repository"], s["deleted"]) for s in sweeps] == [("repo-a", 6), ("repo-b", 6)]
    for repo, scenario in scenarios.items():
        store = local_env.store(f"local://{repo}")
        assert {n: store.exists(scenario.relative(n)) for n in scenario.address} == EXPECTED_SURVIVORS
