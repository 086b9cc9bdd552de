"""Invariants 4 and 5 (docs/invariants.md): when lakeFS misbehaves or a reference cannot be read,
the mark fails closed.

Each case injects a fault into the real test server (or corrupts a real file) while the GC runs
``lakefs-gc run --yes`` over lakeFS's TestUnifiedGC history, which has six garbage objects. A
fail-open GC would delete objects here. Every case must: exit non-zero, delete nothing, leave
``summary.json`` with ``success=false`` whenever lakeFS had started a run (the mark id), and that
mark must be refused by ``lakefs-gc sweep``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from lakefs_gc.sstable import SSTableReader
from lakefs_gc.sstable.graveler import table_type
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.testing.context import ServerSettings
from lakefs_gc.testing.faults import Fault
from tests.support.gc_env import GcEnv, gc_env, run_cli
from tests.testing.unified_gc import UnifiedGcScenario, build_unified_gc

pytestmark = pytest.mark.usefixtures("spark")

REPO = "unified"
UNCOMMITTED = r"/gc/prepare_uncommited$"
COMMITS_ASYNC = r"/gc/prepare_commits/async$"
COMMITS_BLOCKING = r"/gc/prepare_commits$"
RANGE = r"/metadata/range/[^/]+$"
META_RANGE = r"/metadata/meta_range/[^/]+$"
BRANCHES = r"/repositories/[^/]+/branches$"


@dataclass
class Case:
    env: GcEnv
    scenario: UnifiedGcScenario

    @property
    def namespace_dir(self) -> Path:
        return self.env.storage_root / REPO

    @property
    def reports(self) -> Path:
        return self.namespace_dir / "_lakefs/retention/gc/unified"


@pytest.fixture
def case(tmp_path: Path) -> Iterator[Case]:
    config = tmp_path / "gc.yaml"  # fail fast: two attempts per call, short timeouts
    lakefs = {"max_attempts": 2, "retry_base_delay": 0.01, "retry_max_delay": 0.05, "read_timeout": 1.0}
    config.write_text(yaml.safe_dump({"lakefs": lakefs, "gc": {"prepare_commits_timeout": "20s"}}))
    paged = ServerSettings(uncommitted_page_entries=1)  # one staged entry per dump page
    for env in gc_env(tmp_path, StorageOptions(), ("local",), ["--config", str(config)], paged):
        scenario = build_unified_gc(env.lakefs, REPO, f"local://{REPO}")
        for name in ("staged_a", "staged_b"):  # a dump of three pages
            env.lakefs.upload(REPO, "main", name, name.encode())
        yield Case(env, scenario)


def objects(case: Case) -> set[str]:
    return {
        str(p.relative_to(case.namespace_dir))
        for p in case.namespace_dir.rglob("*")
        if p.is_file() and not str(p.relative_to(case.namespace_dir)).startswith("_lakefs")
    }


def run_and_check(
    case: Case, capsys: pytest.CaptureFixture[str], *, expect_code: int, expect_mark: bool, message: str
) -> str:
    before = objects(case)
    code, _lines, err = run_cli(
        capsys, "run", "--repo", REPO, "--yes", "--unsafe-min-age", "0s", *case.env.args()
    )
    assert code == expect_code, err
    assert message in err
    assert objects(case) == before, "a failed mark deleted something"
    marks = sorted(p.name for p in case.reports.iterdir()) if case.reports.exists() else []
    if not expect_mark:
        assert marks == []
        return ""
    assert len(marks) == 1
    summary = json.loads((case.reports / marks[0] / "summary.json").read_text())
    assert summary["run_id"] == marks[0] and summary["success"] is False
    assert summary["num_deleted_objects"] == 0 and summary["error"]
    assert not (case.reports / marks[0] / "deleted").exists()
    code, _, err = run_cli(capsys, "sweep", "--repo", REPO, "--mark-id", marks[0], *case.env.args())
    assert code != 0 and f"Provided mark ({marks[0]}) is of a failed run" in err
    assert objects(case) == before
    return marks[0]


Inject = Callable[[Case], None]


def fault(**kwargs: object) -> Inject:
    return lambda case: case.env.server.faults.inject(Fault(**kwargs))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("inject", "expect_code", "expect_mark", "message"),
    [
        pytest.param(fault(path=UNCOMMITTED, status=500), 4, False, "HTTP 500", id="uncommitted-500"),
        pytest.param(
            fault(path=UNCOMMITTED, delay=3.0), 4, False, "cannot reach lakeFS", id="uncommitted-timeout"
        ),
        pytest.param(
            fault(path=UNCOMMITTED, truncate=True, after=1),
            4,
            True,
            "failed after 1 page",
            id="uncommitted-truncated",
        ),
        pytest.param(
            fault(path=UNCOMMITTED, status=404, after=2), 4, True, "HTTP 404", id="uncommitted-404-page-3"
        ),
        pytest.param(
            fault(path=COMMITS_ASYNC, status=404), 4, True, "no garbage collection rules", id="commits-404"
        ),
        pytest.param(
            lambda c: (fault(path=COMMITS_ASYNC, status=500)(c), fault(path=COMMITS_BLOCKING, status=500)(c)),
            4,
            True,
            "HTTP 500",
            id="commits-500-and-fallback-500",
        ),
        # the retention cross-check reads the commit graph (docs/invariants.md, invariant 6); its other
        # calls failing are covered without Spark by tests/lakefs/test_commit_graph.py
        pytest.param(fault(path=BRANCHES, status=500), 4, True, "HTTP 500", id="list-branches-500"),
        pytest.param(fault(path=META_RANGE, status=404), 4, True, "HTTP 404", id="metarange-404"),
        pytest.param(fault(path=RANGE, status=500), 4, True, "HTTP 500", id="range-500"),
        pytest.param(
            fault(path=RANGE, delay=3.0, after=1), 4, True, "cannot reach lakeFS", id="range-timeout"
        ),
    ],
)
def test_lakefs_fault_fails_the_mark(
    case: Case,
    capsys: pytest.CaptureFixture[str],
    inject: Inject,
    expect_code: int,
    expect_mark: bool,
    message: str,
) -> None:
    inject(case)
    run_and_check(case, capsys, expect_code=expect_code, expect_mark=expect_mark, message=message)


def test_missing_uncommitted_dump_fails_the_mark(case: Case, capsys: pytest.CaptureFixture[str]) -> None:
    """lakeFS says a page has data but the directory holds nothing: never "nothing is staged"."""

    def elsewhere(body: dict[str, object]) -> dict[str, object]:
        location = str(body.get("gc_uncommitted_location") or "")
        return {**body, "gc_uncommitted_location": location.replace("/uncommitted/", "/vanished/")}

    case.env.server.faults.inject(Fault(path=UNCOMMITTED, rewrite=elsewhere))
    run_and_check(case, capsys, expect_code=5, expect_mark=True, message="has no data files")


def range_files(case: Case) -> list[Path]:
    """The range (not metarange) SSTables of the namespace."""
    found = []
    for path in (case.namespace_dir / "_lakefs").iterdir():
        if path.is_file() and len(path.name) == 64:
            with SSTableReader(path) as reader:
                if table_type(reader) == "ranges":
                    found.append(path)
    assert found
    return found


def after_the_dump(case: Case, damage: Callable[[Path], None]) -> None:
    """Damage every range once lakeFS has dumped the staging areas (which reads HEAD ranges)."""
    tables = range_files(case)

    def damage_all(body: dict[str, object]) -> dict[str, object]:
        for table in tables:
            damage(table)
        return body

    case.env.server.faults.inject(Fault(path=COMMITS_ASYNC, rewrite=damage_all, times=1))


def flip_byte(table: Path) -> None:
    data = bytearray(table.read_bytes())
    data[10] ^= 0xFF
    table.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "expect_code", "message"),
    [
        pytest.param(flip_byte, 8, "checksum mismatch", id="corrupt"),  # ExitCode.CORRUPT_RANGE
        pytest.param(lambda t: t.write_bytes(t.read_bytes()[:-20]), 8, "_lakefs/", id="truncated"),
        pytest.param(Path.unlink, 4, "range not found", id="missing"),
    ],
)
def test_unreadable_range_fails_the_mark(
    case: Case,
    capsys: pytest.CaptureFixture[str],
    damage: Callable[[Path], None],
    expect_code: int,
    message: str,
) -> None:
    """A range that cannot be read aborts the mark, naming the file (never "references nothing")."""
    after_the_dump(case, damage)
    run_and_check(case, capsys, expect_code=expect_code, expect_mark=True, message=message)
