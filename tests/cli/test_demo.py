"""``lakefs-gc demo``: one real run (test server, lakefs-sdk over HTTP, mark and sweep on the suite's
Spark session), then its output, its JSON and its failure path from that same run."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from lakefs_gc.cli import demo as demo_cli
from lakefs_gc.cli.main import main
from lakefs_gc.gc import reasons
from lakefs_gc.testing.demo import DemoObject, Scenario, check_results

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: object → (expected and actual fate, part of the why) as the table must show them
EXPECTED_TABLE = {
    "raw/2023-archive.csv": ("deleted", "expired commits"),
    "config/settings.json (v1)": ("deleted", "expired commits"),
    "experiment/scratch.parquet": ("deleted", "commit expired"),
    "incoming/batch-1.csv": ("deleted", "no longer staged"),
    "incoming/typo.csv": ("deleted", "no longer staged"),
    "(root)": ("deleted", "no commit or staging area"),
    "tables/users.parquet": ("kept", "main's HEAD"),
    "config/settings.json (v2)": ("kept", "main's HEAD"),
    "raw/last-week.csv": ("kept", "within main's 14 days"),
    "checkpoints/state.bin": ("kept", "hidden branches"),
    "fixes/patch.sql": ("kept", "younger than 7 days"),
    "incoming/batch-2.csv": ("kept", "staged on branch ingest"),
    "incoming/batch-3.csv": ("kept", "24h safety cutoff"),
}


@dataclasses.dataclass(frozen=True)
class Recorded:
    code: int
    out: str
    err: str
    run: demo_cli.DemoRun
    workdir: Path


@pytest.fixture(scope="module")
def recorded(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    """The one real demo run of this module, with the DemoRun it rendered."""
    workdir = tmp_path_factory.mktemp("demo") / "kept"
    runs: list[demo_cli.DemoRun] = []
    real = demo_cli._run

    def spy(*args: Any, **kwargs: Any) -> demo_cli.DemoRun:
        result = real(*args, **kwargs)
        runs.append(result)
        return result

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        mp.setattr(demo_cli, "_run", spy)
        code = main(["demo", "--keep", str(workdir)])
    assert len(runs) == 1, err.getvalue()
    yield Recorded(code, out.getvalue(), err.getvalue(), runs[0], workdir)


def test_demo_exits_0_and_tells_the_story(recorded: Recorded) -> None:
    assert recorded.code == 0, recorded.out + recorded.err
    lines = recorded.out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("OBJECT"))
    assert lines[header].split() == ["OBJECT", "WHAT", "HAPPENED", "EXPECTED", "ACTUAL", "WHY"]
    rows = lines[header + 1 : header + 1 + len(EXPECTED_TABLE)]
    for name, (fate, why) in EXPECTED_TABLE.items():
        row = next(r for r in rows if name in r)
        assert f"  {fate}  " in row and row.count(fate) >= 2, row  # expected and actual
        assert why in row, row
        assert "WRONG" not in row
    assert lines[header + 1 + len(EXPECTED_TABLE)] == ""
    assert "OK: all 13 objects met their expected fate (6 deleted, 7 kept)" in recorded.out
    assert "cutoff:" in recorded.out and "min age 1d" in recorded.out  # the real default safety


def test_progress_goes_to_stderr(recorded: Recorded) -> None:
    for step in ("[1/5]", "[2/5]", "[3/5]", "[4/5] mark", "[5/5] sweep"):
        assert f"lakefs-gc demo: {step}" in recorded.err
    assert "using the Spark session already running in this process" in recorded.err
    assert "lakefs-gc demo:" not in recorded.out


def test_demo_leaves_the_suite_spark_session_running(recorded: Recorded, spark: SparkSession) -> None:
    assert recorded.code == 0
    assert spark.range(3).count() == 3


def test_kept_directory_holds_reports_and_can_be_served_again(recorded: Recorded) -> None:
    from lakefs_sdk.api.objects_api import ObjectsApi

    from lakefs_gc.testing.server import LakeFSTestServer

    run = recorded.run
    reports = run.scenario.namespace_dir / "_lakefs/retention/gc/unified" / run.mark.mark_id
    assert str(reports) in recorded.out
    assert json.loads((reports / "summary.json").read_text())["success"] is True
    assert (reports / "swept" / "_SUCCESS").exists()
    assert "lakefs-gc test-server --storage-root" in recorded.out
    with (
        LakeFSTestServer(
            storage_root=recorded.workdir / "storage", state_dir=recorded.workdir / "state"
        ) as server,
        server.sdk_client() as client,
    ):
        staged = ObjectsApi(client).list_objects("demo", "ingest").results
        assert "incoming/batch-2.csv" in [o.path for o in staged]


def test_json_output(
    recorded: Recorded, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo_cli, "_run", lambda *_a, **_k: recorded.run)
    assert main(["demo", "--output", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["problems"] == []
    assert doc["mark_id"] == recorded.run.mark.mark_id
    assert doc["sweep"] == {"deleted": 6, "missing": 0, "failed": 0}
    assert Path(doc["report_path"], "summary.json").is_file()
    fates = {o["name"]: (o["expected"], o["actual"], o["reason"]) for o in doc["objects"]}
    assert len(fates) == len(EXPECTED_TABLE)
    assert fates["incoming/batch-2.csv"] == ("kept", "kept", reasons.UNCOMMITTED)
    assert fates["incoming/batch-3.csv"] == ("kept", "kept", reasons.TOO_YOUNG)
    assert fates["raw/2023-archive.csv"] == ("deleted", "deleted", reasons.GARBAGE)


def test_a_failed_expectation_exits_1_with_the_reason(
    recorded: Recorded, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = recorded.run
    first = dataclasses.replace(
        run.check.outcomes[0], deleted=False, problems=("expected deleted, was kept",)
    )
    broken = dataclasses.replace(run.check, outcomes=(first, *run.check.outcomes[1:]))
    monkeypatch.setattr(demo_cli, "_run", lambda *_a, **_k: dataclasses.replace(run, check=broken))
    assert main(["demo"]) == demo_cli.EXIT_EXPECTATIONS_FAILED
    out, err = capsys.readouterr()
    assert "kept  <-- WRONG" in out
    assert "FAILED: 1 expectation(s) not met" in out
    assert (
        f"demo FAILED: 1 expectation(s) not met:\n  - {first.object.name}: expected deleted, was kept" in err
    )


def test_keep_refuses_a_non_empty_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "something").write_text("x")
    assert main(["demo", "--keep", str(tmp_path)]) == 3
    assert "not an empty directory" in capsys.readouterr().err


def test_help_explains_the_demo(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--help"]) == 0
    text = capsys.readouterr().out
    for words in ("--keep DIR", "--spark-master", "--output {text,json}", "exit status", "24h"):
        assert words in text
    assert main(["--help"]) == 0
    assert "start here" in capsys.readouterr().out


# -- the check itself, without Spark -----------------------------------------------------------
def _scenario(tmp_path: Path) -> Scenario:
    objects = (
        DemoObject("old", "expired", "data/s/1", True, "expired", reasons.GARBAGE),
        DemoObject("live", "in HEAD", "data/s/2", False, "in HEAD", reasons.COMMITTED),
    )
    return Scenario("demo", "local://demo", tmp_path, objects)


def test_check_accepts_the_expected_outcome(tmp_path: Path) -> None:
    check = check_results(
        _scenario(tmp_path),
        before={"data/s/1", "data/s/2", "_lakefs/x"},
        after={"data/s/2", "_lakefs/x", "_lakefs/report"},
        marked={"data/s/1"},
        swept={"data/s/1": "deleted"},
        reason_counts={reasons.GARBAGE: 1, reasons.COMMITTED: 1},
    )
    assert check.ok and check.failures == []


def test_check_catches_every_kind_of_disagreement(tmp_path: Path) -> None:
    check = check_results(
        _scenario(tmp_path),
        before={"data/s/1", "data/s/2", "_lakefs/x"},
        after={"data/s/1"},  # the live object and a metadata file vanished, the garbage stayed
        marked={"data/s/2", "data/s/9"},
        swept={"data/s/2": "deleted"},
        reason_counts={reasons.GARBAGE: 2},
    )
    assert not check.ok
    assert check.failures == [
        "old: expected deleted, was kept",
        "old: not marked for deletion",
        "old: sweep report says nothing instead of deleted",
        "live: expected kept, was deleted",
        "live: marked for deletion",
        "live: sweep report lists it (deleted)",
        "the mark classified the listed objects as "
        "{'committed': 0, 'uncommitted': 0, 'retention_cross_check': 0, 'identity_twin': 0, "
        "'too_young': 0, 'garbage': 2}, expected "
        "{'committed': 1, 'uncommitted': 0, 'retention_cross_check': 0, 'identity_twin': 0, "
        "'too_young': 0, 'garbage': 1}",
        "files outside the demo's objects were deleted: ['_lakefs/x']",
        "addresses outside the demo's objects were marked: ['data/s/9']",
    ]


def test_demo_object_rejects_a_contradictory_expectation() -> None:
    with pytest.raises(ValueError, match="contradicts"):
        DemoObject("x", "story", "data/s/1", False, "why", reasons.GARBAGE)
