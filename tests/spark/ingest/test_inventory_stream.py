"""The inventory streaming source into the candidate table: each delivery once, bad ones reported."""

from __future__ import annotations

import gzip
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from pyspark.sql import SparkSession

from lakefs_gc.inventory import azure, s3
from lakefs_gc.inventory.delivery import INVENTORY_SCHEMA
from lakefs_gc.inventory.mapping import NamespaceRoute
from lakefs_gc.spark.ingest.inventory.source import SourceConfig
from lakefs_gc.spark.ingest.inventory.stream import ingest_available
from lakefs_gc.spark.ingest.inventory.table import (
    CandidateTable,
    candidates_frame,
    ingest_records,
    ingested_deliveries,
)
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_location
from tests.inventory import test_s3_inventory as s3_cases

T0 = datetime(2026, 11, 1, 6, 0, tzinfo=timezone.utc)
ROUTES = (NamespaceRoute("alpha", "bkt", "repos/a/"), NamespaceRoute("beta", "bkt", "repos/b/"))


def objects(day: int, n: int = 5) -> pa.Table:
    """Day ``day``'s bucket: ``n`` objects per repository, plus metadata and a stranger."""
    keys = [f"repos/{r}/data/s{day}/obj-{i} +%#ü" for r in "ab" for i in range(n)]
    keys += ["repos/a/_lakefs/meta", "elsewhere/x"]
    count = len(keys)
    return pa.table(
        {
            "bucket": ["bkt"] * count,
            "key": keys,
            "size": list(range(count)),
            "last_modified": [T0 + timedelta(days=day, minutes=i) for i in range(count)],
            "etag": [f"e{i}" for i in range(count)],
            "encryption": [None] * count,
        },
        schema=INVENTORY_SCHEMA,
    )


def deliver(dest: Path, day: int, kind: str = "s3", fmt: str = "parquet") -> str:
    fs = pafs.LocalFileSystem()
    when = T0 + timedelta(days=day)
    if kind == "s3":
        return s3.write_delivery(
            fs, str(dest), "bkt", "daily", when, objects(day), format=fmt, rows_per_file=4
        )  # type: ignore[arg-type]
    return azure.write_delivery(fs, str(dest), "daily", when, objects(day), format=fmt, rows_per_file=4)  # type: ignore[arg-type]


class Ingest:
    def __init__(self, spark: SparkSession, tmp_path: Path) -> None:
        self.spark = spark
        self.dest = tmp_path / "inventory"
        self.dest.mkdir()
        self.table = CandidateTable(parse_location(str(tmp_path / "candidates")), StorageOptions())
        self.checkpoint = tmp_path / "checkpoint"
        self.lines: list[str] = []

    def run(
        self,
        routes: tuple[NamespaceRoute, ...] = ROUTES,
        per_batch: int = 1,
        *,
        etags: bool = False,
        tasks: int | None = None,
    ) -> list[str]:
        config = SourceConfig(
            destination=parse_location(str(self.dest)),
            storage=StorageOptions(),
            routes=routes,
            max_deliveries_per_batch=per_batch,
            etags=etags,
            tasks=tasks,
        )
        result = ingest_available(self.spark, config, self.table, self.checkpoint, say=self.lines.append)
        return [f"{d.status} {Path(d.id).parent.name}" for d in result.deliveries]


@pytest.fixture
def ingest(spark: SparkSession, tmp_path: Path) -> Ingest:
    return Ingest(spark, tmp_path)


def table_rows(ingest: Ingest) -> list[tuple[str, str, str]]:
    deliveries = ingested_deliveries(ingest.table)
    frame = candidates_frame(ingest.spark, ingest.table, deliveries, parallelism=2)
    return sorted((r.repository, r.address, r.delivery_id) for r in frame.collect())


def test_each_delivery_once_and_only_good_ones(ingest: Ingest) -> None:
    first = deliver(ingest.dest, 1)
    assert ingest.run() == ["ingested 2026-11-02T06-00Z"]
    assert ingest.run() == []  # nothing new: no batch, no record

    second = deliver(ingest.dest, 2, "azure", "csv")
    bad = deliver(ingest.dest, 3)
    newest = sorted((ingest.dest / "bkt" / "daily" / "data").iterdir(), key=lambda p: p.stat().st_mtime)[-1]
    newest.write_bytes(newest.read_bytes()[:-1] + b"X")  # same size, MD5 differs
    (Path(deliver(ingest.dest, 4)).parent / "manifest.checksum").unlink()  # pending: not yet
    report = ingest.run()
    assert report == ["ingested daily", "rejected 2026-11-04T06-00Z"]
    records = ingest_records(ingest.table)
    assert len(records) == 3  # one delivery per micro-batch
    [rejected] = [d for d in ingested_deliveries(ingest.table) if d.status == "rejected"]
    assert rejected.id == bad and "MD5" in " ".join(rejected.errors).upper()
    assert str(newest) in " ".join(rejected.errors)

    rows = table_rows(ingest)
    per_delivery = {d: sum(1 for r in rows if r[2] == d) for d in (first, second)}
    assert per_delivery == {first: 10, second: 10}  # 5 objects x 2 repositories, nothing else
    assert all(not a.startswith("_lakefs/") for _, a, _ in rows)
    assert ("alpha", "data/s1/obj-0 +%#ü", first) in rows and ("beta", "data/s2/obj-4 +%#ü", second) in rows
    assert not any(r[2] == bad for r in rows)


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_etags_are_kept_only_for_content_evidence(ingest: Ingest, fmt: str) -> None:
    """``etags`` (``gc.trust_checksums``): each candidate keeps its row's ETag and EncryptionStatus,
    which the candidate set turns into content evidence; without it neither is parsed or stored."""
    first = deliver(ingest.dest, 1, "s3", fmt)
    assert ingest.run() == ["ingested 2026-11-02T06-00Z"]
    second = deliver(ingest.dest, 2, "s3", fmt)
    assert ingest.run(etags=True) == ["ingested 2026-11-03T06-00Z"]
    frame = candidates_frame(ingest.spark, ingest.table, ingested_deliveries(ingest.table), parallelism=2)
    etags = {d: {r.etag for r in frame.collect() if r.delivery_id == d} for d in (first, second)}
    assert etags[first] == {None}
    assert etags[second] == {f"e{i}" for i in range(10)}  # the repositories' objects' own


def test_s3_csv_keys_reach_the_table_exactly(ingest: Ingest) -> None:
    """S3 CSV keys are form-encoded (``+`` is a space, ``%2B`` a plus): the table holds the real keys."""
    manifest = deliver(ingest.dest, 1, "s3", "csv")
    data = sorted((ingest.dest / "bkt" / "daily" / "data").iterdir())
    assert b"+%2B%25%23" in gzip.decompress(data[0].read_bytes())  # ' +%#' as S3 writes it
    assert ingest.run() == ["ingested 2026-11-02T06-00Z"]
    addresses = {a for _, a, d in table_rows(ingest) if d == manifest}
    assert addresses == {f"data/s1/obj-{i} +%#ü" for i in range(5)}


@pytest.mark.parametrize("tasks", [None, 1], ids=["a task per slot", "one task"])
def test_every_kind_of_bad_input_rejected_beside_a_good_delivery(
    ingest: Ingest, tmp_path: Path, tasks: int | None
) -> None:
    """The S3 reader's corruption cases, end to end: found at discovery or on the executors. With
    one task, every data file of every delivery is read by the same task, bad ones among good."""
    ingest.dest = Path(s3_cases.dest(tmp_path))
    good = s3_cases.write(tmp_path, keys=["a", "b", "c"])
    reasons = {}
    for minute, (corrupt, _, reason) in enumerate(s3_cases.CORRUPTIONS.values(), start=1):
        bad = s3_cases.write(
            tmp_path, keys=["a", "b"], snapshot_time=s3_cases.SNAPSHOT + timedelta(minutes=minute)
        )
        corrupt(tmp_path, bad)
        reasons[bad] = reason

    ingest.run(routes=(NamespaceRoute("r", "src", ""),), per_batch=len(reasons) + 1, tasks=tasks)

    deliveries = {d.id: d for d in ingested_deliveries(ingest.table)}
    assert len(ingest_records(ingest.table)) == 1  # all in one micro-batch
    assert deliveries[good].status == "ingested" and deliveries[good].repositories == {"r": 3}
    for manifest, reason in reasons.items():
        assert deliveries[manifest].status == "rejected", manifest
        assert reason in " ".join(deliveries[manifest].errors)
    assert sorted(deliveries) == sorted([good, *reasons])
    rows = table_rows(ingest)
    assert rows == [("r", key, good) for key in "abc"]  # nothing of a rejected delivery
