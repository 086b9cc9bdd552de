"""Revalidation at sweep time, against the real test server and real Spark.

lakeFS's TestUnifiedGC history has six garbage objects; ``file_2`` is referenced only by main's
first commit, which retention expires. After ``lakefs-gc mark``, a branch created from that commit
references ``file_2`` again: a revalidation must drop exactly that address from the marked set,
read only the ranges the mark did not read, and fail closed when lakeFS fails.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import pytest

from lakefs_gc import jobs
from lakefs_gc.errors import GcError, LakeFSError
from lakefs_gc.settings import GcSettings, load_settings
from lakefs_gc.spark.report.layout import METARANGES, RANGES, ReportDir
from lakefs_gc.spark.report.read import marked_frame, read_report_table, recorded_metaranges
from lakefs_gc.spark.report.write import METARANGE_BATCH_ROWS, write_metaranges
from lakefs_gc.spark.sweep.revalidate import Revalidation, revalidate
from lakefs_gc.sstable import AddressType, Entry
from lakefs_gc.sstable.catalog import encode_entry
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_storage_namespace
from lakefs_gc.testing.faults import Fault
from tests.support.gc_env import GcEnv, run_cli
from tests.testing.unified_gc import EXPECTED_SURVIVORS, UnifiedGcScenario, build_unified_gc

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO = "unified"
NAMESPACE = f"local://{REPO}"
GARBAGE = sorted(name for name, survives in EXPECTED_SURVIVORS.items() if not survives)
RANGE = r"/metadata/range/[^/]+$"
META_RANGE = r"/metadata/meta_range/[^/]+$"
UNCOMMITTED = r"/gc/prepare_uncommited$"


@dataclass
class Marked:
    env: GcEnv
    scenario: UnifiedGcScenario
    mark_id: str
    summary: dict[str, Any]
    settings: GcSettings

    @property
    def report(self) -> ReportDir:
        namespace = parse_storage_namespace(NAMESPACE, local_root=str(self.env.storage_root))
        return ReportDir(namespace, self.mark_id, self.settings.storage)

    def addresses(self, *names: str) -> set[str]:
        return {self.scenario.relative(n) for n in names}

    def revive(self) -> None:
        """A branch from the expired commit: ``file_2`` (and ``file_1``) are referenced again."""
        self.env.lakefs.branch(REPO, "revived", self.scenario.dropped_commit)

    def revalidate(self, spark: SparkSession) -> Revalidation:
        marked = marked_frame(spark, self.report, parallelism=2)
        params = self.settings.sweep_params(REPO)
        with jobs.lakefs_client(self.settings, "tests") as client:
            refs = jobs.lakefs_refs(client, self.settings)
            return revalidate(spark, params, refs, self.report, marked, progress=lambda _m: None)

    def count(self, path: str) -> Fault:
        return self.env.server.faults.inject(Fault(method="GET", path=path, rewrite=lambda body: body))


@pytest.fixture
def marked(local_env: GcEnv, capsys: pytest.CaptureFixture[str], spark: SparkSession) -> Marked:
    scenario = build_unified_gc(local_env.lakefs, REPO, NAMESPACE)
    code, lines, err = run_cli(
        capsys, "mark", "--repo", REPO, "--unsafe-min-age", "0s", "--output", "json", *local_env.args()
    )
    assert code == 0, err
    (mark,) = lines
    assert mark["summary"]["num_deleted_objects"] == len(GARBAGE)
    info = local_env.server.connection_info()
    fast = {"max_attempts": 2, "retry_base_delay": 0.01, "retry_max_delay": 0.05}
    settings = load_settings(
        environ={},
        overrides={"lakefs": {**info, **fast}, "storage": {"local_root": str(local_env.storage_root)}},
        use_lakectl_defaults=False,
    )
    return Marked(local_env, scenario, mark["mark_id"], mark["summary"], settings)


@pytest.fixture
def revalidations() -> Iterator[list[Revalidation]]:
    done: list[Revalidation] = []
    yield done
    for r in done:
        r.unpersist()


def addresses_of(df: Any) -> set[str]:
    return {row["address"] for row in df.collect()}


def test_the_mark_records_what_it_read(marked: Marked) -> None:
    fs_root = marked.env.storage_root / REPO / "_lakefs/retention/gc/unified" / marked.mark_id
    assert (fs_root / RANGES / "_SUCCESS").is_file() and (fs_root / METARANGES / "_SUCCESS").is_file()
    ranges = read_report_table(marked.report, RANGES)
    metaranges = read_report_table(marked.report, METARANGES)
    assert ranges.column_names == ["range_id"] and ranges.num_rows == marked.summary["num_ranges"] > 0
    assert len(set(ranges.column("range_id").to_pylist())) == ranges.num_rows
    assert metaranges.column_names == ["metarange_id"]
    assert metaranges.num_rows == marked.summary["num_metaranges"] == 4


def test_many_metaranges_are_recorded_in_batches(tmp_path: Path) -> None:
    """A bottom-line history's 10,745 metaranges in one batch left the driver 13 MiB larger: they
    are written in row groups of METARANGE_BATCH_ROWS, and read back whole and in order."""
    options = StorageOptions(local_root=str(tmp_path))
    report, empty = (ReportDir.of("local://repo", m, options) for m in ("m1", "m2"))
    ids = [f"{i:064x}" for i in range(2 * METARANGE_BATCH_ROWS + 5)]
    write_metaranges(ids, report)
    write_metaranges([], empty)
    assert read_report_table(report, METARANGES).column("metarange_id").to_pylist() == ids
    [part] = (tmp_path / "repo/_lakefs/retention/gc/unified/m1" / METARANGES).glob("*.parquet")
    assert pq.ParquetFile(part).num_row_groups == 3
    assert recorded_metaranges(report) == frozenset(ids)
    assert recorded_metaranges(empty) == frozenset()


def test_a_branch_from_an_expired_commit_saves_its_objects(
    marked: Marked, spark: SparkSession, revalidations: list[Revalidation]
) -> None:
    ranges, metaranges = marked.count(RANGE), marked.count(META_RANGE)

    unchanged = marked.revalidate(spark)  # nothing changed since the mark: nothing read, nothing saved
    revalidations.append(unchanged)
    assert unchanged.num_saved == 0 and addresses_of(unchanged.saved) == set()
    assert addresses_of(unchanged.still_marked) == marked.addresses(*GARBAGE)
    assert (marked.env.server.faults.hits(ranges), marked.env.server.faults.hits(metaranges)) == (0, 0)
    assert unchanged.stats["num_metaranges_skipped"] == unchanged.stats["num_metaranges"] == 4
    assert unchanged.stats["num_ranges_read"] == 0

    marked.revive()
    revalidation = marked.revalidate(spark)
    revalidations.append(revalidation)
    assert revalidation.num_saved == 1
    assert addresses_of(revalidation.saved) == marked.addresses("file_2")
    assert addresses_of(revalidation.still_marked) == marked.addresses(*(n for n in GARBAGE if n != "file_2"))
    stats = revalidation.stats
    metarange_counts = ("num_metaranges", "num_metaranges_read", "num_metaranges_skipped")
    assert tuple(stats[k] for k in metarange_counts) == (5, 1, 4)
    assert marked.env.server.faults.hits(metaranges) == 1  # only the revived commit's metarange
    # only the range the mark did not read: the revived commit's one range (file_1, file_2)
    assert marked.env.server.faults.hits(ranges) == stats["num_ranges_read"] == 1
    assert stats["ranges_recorded_by_mark"] is True and revalidation.summary()["saved"] == 1


def test_an_address_staged_since_the_mark_is_saved_by_the_dump_alone(
    marked: Marked, spark: SparkSession, revalidations: list[Revalidation]
) -> None:
    """Nothing committed since the mark, so no metarange or range is read: the fresh uncommitted
    dump alone must save a marked address that a branch stages again (as lakeFS's StageObject
    can), and only that one."""
    name, *others = GARBAGE
    entry = Entry(
        address=marked.scenario.relative(name), address_type=AddressType.RELATIVE, size=len(name),
        etag="", last_modified_ns=time.time_ns(), content_type="application/octet-stream", metadata={},
    )  # fmt: skip
    marked.env.server.ctx.store.stage(REPO, "dev", "staged-again", encode_entry(entry))
    ranges, metaranges = marked.count(RANGE), marked.count(META_RANGE)
    revalidation = marked.revalidate(spark)
    revalidations.append(revalidation)
    assert revalidation.num_saved == 1 and addresses_of(revalidation.saved) == marked.addresses(name)
    assert addresses_of(revalidation.still_marked) == marked.addresses(*others)
    assert (marked.env.server.faults.hits(ranges), marked.env.server.faults.hits(metaranges)) == (0, 0)
    assert revalidation.stats["num_metaranges_read"] == revalidation.stats["num_ranges_read"] == 0
    assert revalidation.stats["uncommitted_files"] > 0


def test_a_mark_without_records_reads_every_range(
    marked: Marked, spark: SparkSession, revalidations: list[Revalidation]
) -> None:
    """A mark of lakeFS's Scala job (or of an older lakefs-gc) has no ``ranges/``: read them all."""
    report = marked.env.storage_root / REPO / "_lakefs/retention/gc/unified" / marked.mark_id
    shutil.rmtree(report / RANGES)
    shutil.rmtree(report / METARANGES)
    marked.revive()
    ranges, metaranges = marked.count(RANGE), marked.count(META_RANGE)

    revalidation = marked.revalidate(spark)
    revalidations.append(revalidation)
    assert addresses_of(revalidation.saved) == marked.addresses("file_2") and revalidation.num_saved == 1
    assert addresses_of(revalidation.still_marked) == marked.addresses(*(n for n in GARBAGE if n != "file_2"))
    stats = revalidation.stats
    assert stats["ranges_recorded_by_mark"] is False and stats["num_ranges_skipped"] == 0
    assert marked.env.server.faults.hits(metaranges) == stats["num_metaranges_read"] == 5
    every_range = marked.summary["num_ranges"] + 1  # the mark's, and the revived commit's
    assert marked.env.server.faults.hits(ranges) == stats["num_ranges_read"] == every_range


def test_ranges_read_by_the_mark_are_not_read_again(
    marked: Marked, spark: SparkSession, revalidations: list[Revalidation]
) -> None:
    """With ``ranges/`` alone every metarange is read, but of their ranges only the new one."""
    report = marked.env.storage_root / REPO / "_lakefs/retention/gc/unified" / marked.mark_id
    shutil.rmtree(report / METARANGES)
    marked.revive()
    ranges, metaranges = marked.count(RANGE), marked.count(META_RANGE)

    revalidation = marked.revalidate(spark)
    revalidations.append(revalidation)
    assert addresses_of(revalidation.saved) == marked.addresses("file_2") and revalidation.num_saved == 1
    stats = revalidation.stats
    assert marked.env.server.faults.hits(metaranges) == stats["num_metaranges_read"] == 5
    assert (stats["num_ranges_read"], stats["num_ranges_skipped"]) == (1, marked.summary["num_ranges"])
    assert marked.env.server.faults.hits(ranges) == 1


def test_a_partial_range_record_is_not_trusted(
    marked: Marked, spark: SparkSession, revalidations: list[Revalidation]
) -> None:
    """Without ``ranges/_SUCCESS`` the record may be incomplete: every range is read."""
    report = marked.env.storage_root / REPO / "_lakefs/retention/gc/unified" / marked.mark_id
    (report / RANGES / "_SUCCESS").unlink()
    revalidation = marked.revalidate(spark)
    revalidations.append(revalidation)
    assert revalidation.stats["ranges_recorded_by_mark"] is False
    assert revalidation.stats["num_ranges_read"] == marked.summary["num_ranges"]
    assert revalidation.num_saved == 0


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", UNCOMMITTED), ("GET", RANGE), ("GET", META_RANGE)],
    ids=["dump", "range", "metarange"],
)
def test_lakefs_failing_fails_closed(marked: Marked, spark: SparkSession, method: str, path: str) -> None:
    marked.revive()  # so that a metarange and a range need reading
    fault = marked.env.server.faults.inject(Fault(method=method, path=path, status=500))
    with pytest.raises(GcError) as raised:
        marked.revalidate(spark)
    assert marked.env.server.faults.hits(fault) >= 1
    assert isinstance(raised.value, LakeFSError), raised.value
    assert "500" in str(raised.value) or "injected" in str(raised.value)
