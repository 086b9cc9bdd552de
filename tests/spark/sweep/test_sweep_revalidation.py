"""The sweep's safety rails, through ``lakefs-gc sweep`` against the real test server and real Spark:
revalidation (on by default), the mark-age guard and the delete-fraction guard.

lakeFS's TestUnifiedGC history has six garbage objects among the ten the mark lists; ``file_2`` is
referenced only by main's first commit, which retention expires. After the mark, a branch created
from that commit references ``file_2`` again: the sweep must keep it (and delete the other five)
unless told not to revalidate.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from lakefs_gc.gc.reports import format_java_instant, lakefs_exports
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.testing.faults import Fault
from tests.support.gc_env import GcEnv, gc_env, run_cli
from tests.testing.unified_gc import EXPECTED_SURVIVORS, UnifiedGcScenario, build_unified_gc

REPO = "unified"
NAMESPACE = f"local://{REPO}"
GARBAGE = sorted(name for name, survives in EXPECTED_SURVIVORS.items() if not survives)
UNCOMMITTED = r"/gc/prepare_uncommited$"
#: 6 of the 10 listed objects are garbage: above the default --max-delete-fraction (0.5)
ALLOW = ("--max-delete-fraction", "0.9")
REFUSED = 10  # a safety guard refused: nothing deleted


@dataclass
class Marked:
    env: GcEnv
    scenario: UnifiedGcScenario
    mark_id: str

    @property
    def report(self) -> Path:
        return self.env.storage_root / REPO / "_lakefs/retention/gc/unified" / self.mark_id

    def relative(self, *names: str) -> set[str]:
        return {self.scenario.relative(n) for n in names}

    def existing(self) -> set[str]:
        """The scenario's files whose objects are still in the namespace."""
        store = self.env.store(NAMESPACE)
        return {n for n in self.scenario.address if store.exists(self.scenario.relative(n))}

    def summary(self) -> dict[str, Any]:
        return dict(json.loads((self.report / "summary.json").read_text()))

    def rewrite_summary(self, **changes: Any) -> None:
        """Change (``None``: drop) keys of ``summary.json``, keeping their order."""
        body = self.summary()
        for key, value in changes.items():
            if value is None:
                body.pop(key, None)
            else:
                body[key] = value
        (self.report / "summary.json").write_text(json.dumps(body, separators=(",", ":")))

    def swept(self) -> dict[str, str]:
        rows = pq.read_table(self.report / "swept").to_pylist()
        assert len(rows) == len({r["address"] for r in rows}), "an address swept twice"
        return {r["address"]: r["outcome"] for r in rows}

    def revive(self) -> None:
        """A branch from the expired commit: ``file_2`` (and ``file_1``) are referenced again."""
        self.env.lakefs.branch(REPO, "revived", self.scenario.dropped_commit)

    def sweep(self, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, dict[str, Any], str]:
        code, lines, err = run_cli(
            capsys, "sweep", "--repo", REPO, "--mark-id", self.mark_id, "--output", "json", *flags,
            *self.env.args(),
        )  # fmt: skip
        return code, (lines[0] if lines else {}), err


@pytest.fixture
def env(tmp_path: Path) -> Iterator[GcEnv]:
    config = tmp_path / "gc.yaml"  # fail fast when lakeFS fails: two attempts per call
    lakefs = {"max_attempts": 2, "retry_base_delay": 0.01, "retry_max_delay": 0.05, "read_timeout": 5.0}
    config.write_text(yaml.safe_dump({"lakefs": lakefs}))
    yield from gc_env(tmp_path, StorageOptions(), ("local",), ["--config", str(config)])


@pytest.fixture
def marked(env: GcEnv, capsys: pytest.CaptureFixture[str], spark: Any) -> Marked:
    scenario = build_unified_gc(env.lakefs, REPO, NAMESPACE)
    code, lines, err = run_cli(
        capsys, "mark", "--repo", REPO, "--unsafe-min-age", "0s", "--output", "json", *env.args()
    )
    assert code == 0, err
    (mark,) = lines
    assert mark["summary"]["num_deleted_objects"] == len(GARBAGE)
    assert mark["summary"]["num_listed_objects"] == len(EXPECTED_SURVIVORS)
    return Marked(env, scenario, mark["mark_id"])


def survivors_but(*deleted: str) -> set[str]:
    return {n for n, survives in EXPECTED_SURVIVORS.items() if survives} | (set(GARBAGE) - set(deleted))


# ---- revalidation ---------------------------------------------------------------------------


def test_a_branch_from_an_expired_commit_survives_the_sweep(
    marked: Marked, capsys: pytest.CaptureFixture[str]
) -> None:
    marked.revive()
    code, result, err = marked.sweep(capsys, *ALLOW)

    assert code == 0, err
    rest = [n for n in GARBAGE if n != "file_2"]
    assert result["revalidated"] is True and result["saved"] == 1
    assert (result["deleted"], result["missing"], result["failed"]) == (len(rest), 0, 0)
    assert marked.existing() == survivors_but(*rest)  # file_2 kept, every other marked object gone
    # what the revived branch shows is readable
    assert marked.env.lakefs.objects.get_object(REPO, "revived", "file_2") == b"file_2"
    assert marked.env.lakefs.objects.get_object(REPO, "revived", "file_1") == b"file_1"
    assert marked.swept() == dict.fromkeys(marked.relative(*rest), "deleted")  # exactly the still-marked

    summary = marked.summary()
    lakefs_keys = ["run_id", "success", "first_slice", "start_time", "cutoff_time", "num_deleted_objects"]
    assert list(summary)[:6] == lakefs_keys
    assert list(summary)[-2:] == ["revalidation", "sweep"]
    assert summary["revalidation"]["saved"] == 1 and summary["revalidation"]["num_ranges_read"] == 1
    assert summary["num_deleted_objects"] == len(GARBAGE)  # the mark's count stays the mark's
    assert summary["sweep"]["deleted"] == len(rest)
    assert "1 marked objects are referenced now and will not be deleted" in err
    # the summary names lakeFS's exports of the mark and of the revalidation (the service's
    # retention removes exactly those with the report)
    exports = lakefs_exports(marked.mark_id, summary)
    assert len(exports) == 4 and all((marked.env.storage_root / REPO / e).is_dir() for e in exports)


def test_text_output_says_what_revalidation_saved(marked: Marked, capsys: pytest.CaptureFixture[str]) -> None:
    marked.revive()
    capsys.readouterr()
    from lakefs_gc.cli.main import main

    code = main(["sweep", "--repo", REPO, "--mark-id", marked.mark_id, *ALLOW, *marked.env.args()])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "revalidated: 1 marked objects are referenced again and were kept" in out
    assert "deleted 5, already missing 0, failed 0" in out


def test_no_revalidate_deletes_what_is_referenced_again(
    marked: Marked, capsys: pytest.CaptureFixture[str]
) -> None:
    """The documented cost of --no-revalidate: the revived branch loses ``file_2``'s data."""
    marked.revive()
    code, result, err = marked.sweep(capsys, "--no-revalidate", *ALLOW)

    assert code == 0, err
    assert result["revalidated"] is False and result["saved"] == 0
    assert result["deleted"] == len(GARBAGE)
    assert marked.existing() == survivors_but(*GARBAGE)
    assert marked.swept() == dict.fromkeys(marked.relative(*GARBAGE), "deleted")
    assert marked.summary()["revalidation"] == {"skipped": True}
    assert "not revalidating" in err


def test_a_lakefs_failure_during_revalidation_deletes_nothing(
    marked: Marked, capsys: pytest.CaptureFixture[str]
) -> None:
    marked.revive()
    before = marked.existing()
    fault = marked.env.server.faults.inject(Fault(method="POST", path=UNCOMMITTED, status=500))

    code, result, err = marked.sweep(capsys, *ALLOW)

    assert marked.env.server.faults.hits(fault) >= 1
    assert code == 4, err  # a lakeFS error
    assert result == {} and "500" in err
    assert marked.existing() == before == set(EXPECTED_SURVIVORS)
    assert not (marked.report / "swept").exists()
    assert "sweep" not in marked.summary() and "revalidation" not in marked.summary()


# ---- the mark's age ---------------------------------------------------------------------------


def age_summary(marked: Marked, days: float) -> None:
    """Make the mark ``days`` old, its objects older than its cutoff (as they were when marked)."""
    started = datetime.now(timezone.utc) - timedelta(days=days)
    cutoff = started - timedelta(days=1)
    marked.rewrite_summary(
        start_time=format_java_instant(int(started.timestamp() * 1e9)),
        cutoff_time=format_java_instant(int(cutoff.timestamp() * 1e3) * 1_000_000),
    )
    older = (cutoff - timedelta(days=1)).timestamp()
    for name in marked.scenario.address:
        path = marked.env.storage_root / REPO / marked.scenario.relative(name)
        if path.exists():
            os.utime(path, (older, older))


def test_a_stale_mark_is_swept_only_when_revalidated(
    marked: Marked, capsys: pytest.CaptureFixture[str]
) -> None:
    age_summary(marked, 10)
    marked.revive()
    before = marked.existing()

    code, result, err = marked.sweep(capsys, "--no-revalidate", *ALLOW)
    assert code == REFUSED and result == {}
    assert f"refusing to sweep mark {marked.mark_id} of {REPO} without revalidation: it is 10d" in err
    assert "--max-mark-age 7d" in err and "Drop --no-revalidate" in err
    assert marked.existing() == before and not (marked.report / "swept").exists()

    code, result, err = marked.sweep(capsys, "--no-revalidate", "--max-mark-age", "11d", *ALLOW)
    assert code == 0, err  # young enough for a longer --max-mark-age (file_2 is lost: no revalidation)
    assert result["deleted"] == len(GARBAGE)


def test_a_stale_mark_revalidated_is_swept(marked: Marked, capsys: pytest.CaptureFixture[str]) -> None:
    age_summary(marked, 10)
    marked.revive()
    code, result, err = marked.sweep(capsys, *ALLOW)
    assert code == 0, err
    assert "older than --max-mark-age 7d: swept because it is revalidated" in err
    assert (result["saved"], result["deleted"]) == (1, len(GARBAGE) - 1)
    assert "file_2" in marked.existing()


def test_a_tiny_max_mark_age(marked: Marked, capsys: pytest.CaptureFixture[str]) -> None:
    """The real clock: a mark a few seconds old is stale for --max-mark-age 1s."""
    age_summary(marked, 2 / 86400)
    code, _, err = marked.sweep(capsys, "--no-revalidate", "--max-mark-age", "1s", *ALLOW)
    assert code == REFUSED and "without revalidation" in err
    assert marked.existing() == set(EXPECTED_SURVIVORS)


# ---- the delete fraction ----------------------------------------------------------------------


def test_max_delete_fraction_refuses_and_force_overrides(
    marked: Marked, capsys: pytest.CaptureFixture[str]
) -> None:
    code, result, err = marked.sweep(capsys)  # default 0.5; 6 of 10 after revalidation (nothing saved)
    assert code == REFUSED and result == {}
    assert "it would delete 6 of the 10 objects the mark listed in the namespace (60.0%)" in err
    assert "more than --max-delete-fraction 0.5 (50%)" in err and "pass --force" in err
    assert marked.existing() == set(EXPECTED_SURVIVORS) and not (marked.report / "swept").exists()

    code, _, err = marked.sweep(capsys, "--no-revalidate", "--max-delete-fraction", "0.55")
    assert code == REFUSED and "--max-delete-fraction 0.55 (55%)" in err

    # a mark that does not say how many objects it listed (lakeFS's Scala job) cannot be checked
    marked.rewrite_summary(num_listed_objects=None)
    code, _, err = marked.sweep(capsys, *ALLOW)
    assert code == REFUSED and "no num_listed_objects" in err and "--force" in err
    assert marked.existing() == set(EXPECTED_SURVIVORS)

    code, result, err = marked.sweep(capsys, "--force")
    assert code == 0, err
    assert result["deleted"] == len(GARBAGE) and marked.existing() == survivors_but(*GARBAGE)


def test_revalidation_counts_toward_the_fraction(marked: Marked, capsys: pytest.CaptureFixture[str]) -> None:
    """After the revalidation keeps file_2, 5 of 10 is not more than 0.5: the default allows it."""
    marked.revive()
    code, result, err = marked.sweep(capsys)
    assert code == 0, err
    assert (result["saved"], result["deleted"]) == (1, 5)


@pytest.mark.parametrize("value", ["0", "1.5", "-1"])
def test_bad_fraction_is_a_settings_error(value: str) -> None:
    from lakefs_gc.errors import ConfigError
    from lakefs_gc.settings import load_settings

    with pytest.raises(ConfigError, match="max_delete_fraction"):
        load_settings(
            environ={},
            overrides={"lakefs": {"endpoint": "http://x", "access_key_id": "a", "secret_access_key": "b"},
                       "gc": {"max_delete_fraction": value}},
            use_lakectl_defaults=False,
        )  # fmt: skip


# ---- the cutoff, again at delete time ---------------------------------------------------------


def test_an_object_rewritten_after_the_cutoff_is_refused(
    marked: Marked, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whatever the mark said, an object whose store says "modified after the cutoff" stays."""
    rewritten = GARBAGE[0]
    path = marked.env.storage_root / REPO / marked.scenario.relative(rewritten)
    later = (datetime.now(timezone.utc) + timedelta(minutes=1)).timestamp()
    os.utime(path, (later, later))

    code, result, err = marked.sweep(capsys, *ALLOW)

    assert code == 9, err  # a failed key is reported, and the exit status says so
    assert (result["deleted"], result["missing"], result["failed"]) == (len(GARBAGE) - 1, 0, 1)
    assert rewritten in marked.existing()
    outcomes = marked.swept()
    assert outcomes[marked.scenario.relative(rewritten)] == "failed"
    rows = pq.read_table(marked.report / "swept").to_pylist()
    [refused] = [r for r in rows if r["outcome"] == "failed"]
    assert "refused: modified" in refused["error"] and "after the mark's cutoff" in refused["error"]
