"""``lakefs-gc sweep --dry-run``: the sweep with deleters that delete nothing (a port swap).

Everything a sweep does before deleting still happens (the guards, the revalidation against lakeFS,
the resumption read), then the tasks hand their addresses to a dry-run deleter: what a real sweep
would delete is listed in the mark's ``dry-run/``, nothing is deleted, and ``swept/`` and
``summary.json`` are left exactly as they were, so a real sweep afterwards deletes the same set.
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from lakefs_gc.storage.deleters import LocalBulkDeleter
from lakefs_gc.storage.deleting import DryRunDeleter, DryRunDeleters, StoreDeleters
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_storage_namespace
from tests.spark.sweep import test_sweep_revalidation as revalidation
from tests.spark.sweep.test_sweep_revalidation import ALLOW, GARBAGE, REFUSED, Marked, survivors_but

# the marked TestUnifiedGC repository of test_sweep_revalidation.py, as fixtures of this module
env = revalidation.env
marked = revalidation.marked


def test_a_dry_run_deletes_nothing_and_lists_what_a_sweep_would(
    marked: Marked, capsys: pytest.CaptureFixture[str]
) -> None:
    marked.revive()  # file_2 referenced again: the revalidation keeps it, in a dry run too
    summary_before = (marked.report / "summary.json").read_bytes()
    code, result, err = marked.sweep(capsys, *ALLOW, "--dry-run")

    assert code == 0, err
    rest = [n for n in GARBAGE if n != "file_2"]
    assert result["dry_run"] is True and result["revalidated"] is True and result["saved"] == 1
    assert (result["would_delete"], result["refused"]) == (len(rest), 0)
    assert marked.existing() == survivors_but()  # nothing deleted
    assert not (marked.report / "swept").exists()
    assert (marked.report / "summary.json").read_bytes() == summary_before
    listed = pq.read_table(marked.report / "dry-run").to_pylist()
    assert {r["address"]: r["outcome"] for r in listed} == dict.fromkeys(
        marked.relative(*rest), "would_delete"
    )
    assert "nothing was deleted" in err

    code, result, err = marked.sweep(capsys, *ALLOW)  # the real sweep deletes what the dry run listed
    assert code == 0, err
    assert result["deleted"] == len(rest) and marked.existing() == survivors_but(*rest)


def test_a_dry_run_is_refused_like_a_sweep(marked: Marked, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = marked.sweep(capsys, "--dry-run")  # 6 of 10: over the default --max-delete-fraction
    assert code == REFUSED and "--max-delete-fraction" in err
    assert not (marked.report / "dry-run").exists() and marked.existing() == survivors_but()


def test_the_dry_run_deleter_refuses_what_a_deleter_refuses() -> None:
    deleter = DryRunDeleter()
    outcomes = deleter.delete(["data/s/a", "_lakefs/x", "data/s/a", "legacy-root", "data/x"])
    assert [(o.address, o.outcome) for o in outcomes] == [
        ("data/s/a", "deleted"),
        ("_lakefs/x", "failed"),
        ("data/s/a", "deleted"),
        ("legacy-root", "deleted"),
        ("data/x", "failed"),
    ]
    assert outcomes[1].error == "refused: '_lakefs/x' is not a deletable key"


def test_deleter_factories(tmp_path: str) -> None:
    namespace = parse_storage_namespace("local://repo", local_root=str(tmp_path))
    real = StoreDeleters(namespace, StorageOptions(local_root=str(tmp_path)))
    assert not real.dry_run and isinstance(real(throttle=None, not_modified_since=None), LocalBulkDeleter)
    dry = DryRunDeleters(namespace)
    assert dry.dry_run and isinstance(dry(throttle=None, not_modified_since=None), DryRunDeleter)
