"""``lakefs-gc explain`` on lakeFS's TestUnifiedGC scenario: the verdict of each of its 10 files
equals the mark's, names the reason, and after the sweep says what the sweep did."""

from __future__ import annotations

from typing import Any

import pytest

from lakefs_gc.cli.main import main
from lakefs_gc.gc import reasons
from tests.support.gc_env import GcEnv, run_cli
from tests.testing.unified_gc import EXPECTED_SURVIVORS, UnifiedGcScenario, build_unified_gc

pytestmark = pytest.mark.usefixtures("spark")

#: the mark's reason for each survivor (esti's table; the rest are garbage)
KEPT_BECAUSE = {
    "file_1": reasons.COMMITTED,  # main's 12-day commit, within main's 10-day rule until main_8
    "file_3": reasons.UNCOMMITTED,  # staged on main
    "file_6": reasons.COMMITTED,  # dev's 8-day commit, dev's HEAD until dev_4
    "file_8": reasons.COMMITTED,  # the deleted dev2's commits, dangling within the default rule
}


def explain_all(
    env: GcEnv, capsys: pytest.CaptureFixture[str], scenario: UnifiedGcScenario
) -> dict[str, Any]:
    names = list(scenario.address)
    code, lines, err = run_cli(
        capsys, "explain", "--repo", "unified", *(scenario.address[n] for n in names),
        "--unsafe-min-age", "0s", "--output", "json", *env.args(),
    )  # fmt: skip
    assert code == 0, err
    assert [line["address"] for line in lines] == [scenario.relative(n) for n in names]
    return dict(zip(names, lines, strict=True))


def test_explain_unified_gc(local_env: GcEnv, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = build_unified_gc(local_env.lakefs, "unified", "local://unified")
    code, (mark,), err = run_cli(
        capsys, "mark", "--repo", "unified", "--unsafe-min-age", "0s", "--output", "json", *local_env.args()
    )
    assert code == 0, err
    before = explain_all(local_env, capsys, scenario)
    for name, survives in EXPECTED_SURVIVORS.items():
        line = before[name]
        expected = KEPT_BECAUSE[name] if survives else reasons.GARBAGE
        assert line["verdict"] == expected, (name, line)
        assert line["exists"] is True and line["last_mark"]["mark_id"] == mark["mark_id"]
        assert line["last_mark"]["listed"] is not survives  # the mark's verdict, read from its report
        assert line["last_mark"]["swept"] is None
    assert before["file_3"]["staged_on"] == ["main at 'file_3'"]
    file_1 = before["file_1"]["committed"]
    assert {c["path"] for c in file_1} == {"file_1"} and all(c["kept_by"] == "lakefs" for c in file_1)
    assert any("HEAD of branch 'main'" in c["why"] for c in file_1)
    assert "no active commit and no branch's staging area references it" in before["file_2"]["why"]

    code, _, err = run_cli(
        capsys, "sweep", "--repo", "unified", "--mark-id", mark["mark_id"], "--unsafe-min-age", "0s",
        "--max-delete-fraction", "1", *local_env.args(),
    )  # fmt: skip
    assert code == 0, err
    after = explain_all(local_env, capsys, scenario)
    for name, survives in EXPECTED_SURVIVORS.items():
        line = after[name]
        assert line["verdict"] == (KEPT_BECAUSE[name] if survives else reasons.GARBAGE)
        assert line["exists"] is survives
        assert line["last_mark"]["swept"] == (None if survives else "deleted")
        assert line["last_mark"]["sweep_finished"] is True

    # text, by path and ref
    capsys.readouterr()
    code = main([
        "explain", "--repo", "unified", "--path", "file_3", "--ref", "main", "--unsafe-min-age", "0s",
        *local_env.args(),
    ])  # fmt: skip
    out = capsys.readouterr().out
    print(out)
    assert code == 0
    assert out.startswith(f"{scenario.relative('file_3')}: uncommitted ('file_3' at 'main')")
    assert "staged (uncommitted) on main at 'file_3'" in out
