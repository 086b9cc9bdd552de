"""The README's exit-status table, row by row: each outcome really ends with its documented code.

Every row is provoked for real (a wrong flag, a malformed config file, an unreachable lakeFS, a
mark that does not exist, a corrupt report, a backup that conflicts, a refused sweep, a Spark task
that fails) through ``lakefs-gc``'s own entry point, except the two that only a bug can provoke
(1: an unexpected exception; 11: the demo finding the GC did something wrong), which are provoked
by making the command itself misbehave.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from lakefs_gc.cli import demo as demo_cli
from lakefs_gc.cli import sstable as sstable_cli
from lakefs_gc.cli.exits import MEANING
from lakefs_gc.cli.main import main
from lakefs_gc.errors import ExitCode
from lakefs_gc.spark.runtime.failures import job_failure
from lakefs_gc.storage.filesystems import StorageOptions
from tests.support.gc_env import GcEnv, gc_env
from tests.testing.unified_gc import build_unified_gc

README = Path(__file__).resolve().parents[2] / "README.md"
REPO = "codes"
Capsys = pytest.CaptureFixture[str]
ROWS: dict[int, str] = {}  # code → the test that provoked it, filled as the tests run


def code_of(capsys: Capsys, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(argv))
    return code, capsys.readouterr().err


def provoked(code: int, expected: ExitCode, err: str = "") -> None:
    assert code == expected, err
    ROWS[int(expected)] = err


def test_the_readme_table_is_the_code_table() -> None:
    """README's `| code | meaning |` rows == :data:`MEANING`, in order."""
    text = README.read_text()
    section = text[text.index("#### Exit status") :]
    rows = re.findall(r"^\| (\d+) \| (.+?) \|$", section, re.MULTILINE)
    assert [(int(c), m) for c, m in rows] == [(int(c), m) for c, m in MEANING.items()]


def test_0_ok_and_2_usage(capsys: Capsys) -> None:
    code, _ = code_of(capsys, "--version")
    provoked(code, ExitCode.OK)
    for argv in ([], ["mark", "--no-such-flag"], ["sstable"], ["inventory"], ["mark", "--parallelism", "x"]):
        code, err = code_of(capsys, *argv)
        provoked(code, ExitCode.USAGE, err)
        assert err.strip(), argv


def test_1_an_unexpected_error_prints_its_traceback(capsys: Capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_args: Any) -> int:
        raise RuntimeError("a bug")

    monkeypatch.setattr(sstable_cli, "run_dump", broken)
    code, err = code_of(capsys, "sstable", "dump", "x.sst")
    provoked(code, ExitCode.INTERNAL, err)
    assert "Traceback" in err and "RuntimeError: a bug" in err and "please report it" in err


def test_3_settings(capsys: Capsys, tmp_path: Path) -> None:
    config = tmp_path / "gc.yaml"
    config.write_text("gc:\n  min_age: 1h\n  bogus: 3\nstorage:\n  local_root: [x\n")
    code, err = code_of(capsys, "mark", "--repo", "r", "--config", str(config))
    provoked(code, ExitCode.SETTINGS, err)
    assert err.strip() == f"lakefs-gc: error: config file {config}: line 6, column 1: expected ',' or ']', " \
        "but got '<stream end>'"  # fmt: skip
    config.write_text("gc:\n  min_age: 1h\n  bogus: 3\n")
    code, err = code_of(capsys, "mark", "--repo", "r", "--config", str(config), "--lakefs-endpoint", "x")
    provoked(code, ExitCode.SETTINGS, err)
    assert "gc.bogus: unknown key" in err and "lakeFS connection incomplete" in err  # both at once


def test_4_lakefs_unreachable_fails_before_spark_starts(tmp_path: Path) -> None:
    env = {**os.environ, "LAKEFS_GC_LAKEFS__MAX_ATTEMPTS": "1"}
    argv = ["mark", "--repo", "r", "--lakefs-endpoint", "http://127.0.0.1:9", "--lakefs-access-key-id", "k",
            "--lakefs-secret-access-key", "s"]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "lakefs_gc", *argv], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    provoked(done.returncode, ExitCode.LAKEFS, done.stderr)
    assert done.stderr.startswith("lakefs-gc: error: lakeFS get repository for repository 'r' failed")
    assert "starting Spark" not in done.stderr and "log4j" not in done.stderr and "Spark" not in done.stdout


def test_6_storage_and_8_corrupt_range(capsys: Capsys, tmp_path: Path, pebble_testdata: Path) -> None:
    code, err = code_of(capsys, "sstable", "dump", str(tmp_path / "missing.sst"))
    provoked(code, ExitCode.STORAGE, err)
    code, err = code_of(capsys, "sstable", "dump", str(pebble_testdata / "h.ldb"))
    provoked(code, ExitCode.CORRUPT_RANGE, err)


def test_7_inventory(capsys: Capsys, tmp_path: Path) -> None:
    code, err = code_of(capsys, "inventory", "show", str(tmp_path))
    provoked(code, ExitCode.INVENTORY, err)


def test_11_the_demo_check(capsys: Capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's check failing (a GC that misbehaved) is its own code; provoked by a check that fails."""
    from lakefs_gc.testing import demo as demo_scenario

    real = demo_scenario.check_results

    def strict(*args: Any, **kwargs: Any) -> demo_scenario.DemoCheck:
        check = real(*args, **kwargs)
        return demo_scenario.DemoCheck(check.outcomes, (*check.problems, "provoked by the test"))

    monkeypatch.setattr(demo_scenario, "check_results", strict)
    code, err = code_of(capsys, "demo", "--output", "json")
    provoked(code, ExitCode.CHECK_FAILED, err)
    assert "provoked by the test" in err and demo_cli.EXIT_EXPECTATIONS_FAILED == ExitCode.CHECK_FAILED


def test_12_a_failed_spark_job(spark: SparkSession) -> None:
    def fail(_row: Any) -> int:
        raise ZeroDivisionError("in a task")

    with pytest.raises(Exception) as raised:
        spark.sparkContext.parallelize([1], 1).map(fail).collect()
    error = job_failure(raised.value, "a job")
    provoked(error.exit_code, ExitCode.SPARK, str(error))
    assert "ZeroDivisionError" in str(error)


def test_13_a_second_service_on_one_state(capsys: Capsys, tmp_path: Path) -> None:
    from lakefs_gc.service.lease import StateLease
    from lakefs_gc.storage.directories import StoreDirectory

    holder = StateLease(StoreDirectory.of(tmp_path / "state"), timedelta(minutes=1), settle=0)
    holder.acquire()
    lakefs = {"endpoint": "http://127.0.0.1:9", "access_key_id": "k", "secret_access_key": "s"}
    config = tmp_path / "gc.yaml"
    config.write_text(
        json.dumps({"lakefs": lakefs, "service": {"state": str(tmp_path / "state")}, "repositories": ["r"]})
    )
    code, err = code_of(capsys, "serve", "--config", str(config))
    provoked(code, ExitCode.STATE_IN_USE, err)
    assert f"pid {holder.pid}" in err
    holder.release()


# ---- the rows that need a repository and a mark ------------------------------------------------


@pytest.fixture(scope="module")
def marked(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> Iterator[tuple[GcEnv, str]]:
    """The TestUnifiedGC repository on local disk and one successful mark of it."""
    for env in gc_env(tmp_path_factory.mktemp("codes"), StorageOptions(), ("local",), []):
        build_unified_gc(env.lakefs, REPO, f"local://{REPO}")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["mark", "--repo", REPO, "--unsafe-min-age", "0s", "--output", "json", *env.args()])
        assert code == 0
        yield env, str(json.loads(out.getvalue().splitlines()[0])["mark_id"])


def test_3_unknown_mark_and_missing_local_root(marked: tuple[GcEnv, str], capsys: Capsys) -> None:
    env, _ = marked
    code, err = code_of(capsys, "sweep", "--repo", REPO, "--mark-id", "nope", *env.args())
    provoked(code, ExitCode.SETTINGS, err)
    assert "Mark ID (nope) does not exist" in err and "starting Spark" not in err
    args = env.args()
    without_root = args[: args.index("--local-root")] + args[args.index("--local-root") + 2 :]
    code, err = code_of(capsys, "mark", "--repo", REPO, *without_root)
    provoked(code, ExitCode.SETTINGS, err)
    assert "--local-root" in err


def test_4_unknown_repository(marked: tuple[GcEnv, str], capsys: Capsys) -> None:
    env, _ = marked
    code, err = code_of(capsys, "mark", "--repo", "no-such-repo", *env.args())
    provoked(code, ExitCode.LAKEFS, err)
    assert "repository 'no-such-repo' does not exist" in err and "starting Spark" not in err


def test_5_unreadable_mark_report(marked: tuple[GcEnv, str], capsys: Capsys) -> None:
    env, _ = marked
    store = env.store(f"local://{REPO}")
    key = "_lakefs/retention/gc/unified/broken/summary.json"
    store.put(key, b"{not json")
    code, err = code_of(capsys, "sweep", "--repo", REPO, "--mark-id", "broken", *env.args())
    provoked(code, ExitCode.EXPORT, err)
    assert "summary.json is not JSON" in err


def test_9_partial_and_10_refused(marked: tuple[GcEnv, str], capsys: Capsys, tmp_path: Path) -> None:
    env, mark_id = marked
    store = env.store(f"local://{REPO}")
    summary = json.loads(store.get(f"_lakefs/retention/gc/unified/{mark_id}/summary.json") or b"")
    failed = {**summary, "run_id": "failedmark", "success": False}
    store.put("_lakefs/retention/gc/unified/failedmark/summary.json", json.dumps(failed).encode())
    code, err = code_of(capsys, "sweep", "--repo", REPO, "--mark-id", "failedmark", *env.args())
    provoked(code, ExitCode.REFUSED, err)
    assert "is of a failed run" in err
    sweep = ["sweep", "--repo", REPO, "--mark-id", mark_id, *env.args()]
    code, err = code_of(capsys, *sweep, "--max-delete-fraction", "0.01")
    provoked(code, ExitCode.REFUSED, err)
    assert "--force" in err

    backups = tmp_path / "backups"
    code, err = code_of(
        capsys, "backup", "--repo", REPO, "--mark-id", mark_id, "--to", str(backups), *env.args()
    )
    assert code == 0, err
    [one] = sorted(p for p in (backups / REPO / mark_id).rglob("*") if p.is_file())[:1]
    one.write_bytes(b"something else entirely")  # the next backup finds a different object there
    code, err = code_of(
        capsys, "backup", "--repo", REPO, "--mark-id", mark_id, "--to", str(backups), *env.args()
    )
    provoked(code, ExitCode.PARTIAL, err)


def test_every_row_was_provoked() -> None:
    """Runs last in this module: every code of the table (but 130, Ctrl-C) came out of a real run."""
    if len(ROWS) < 3:
        pytest.skip("only part of the module ran")
    assert sorted(ROWS) == sorted(int(c) for c in MEANING if c != ExitCode.INTERRUPTED)
