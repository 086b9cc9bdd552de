"""``lakefs-gc inventory ingest`` killed with SIGKILL and restarted: each delivery exactly once.

Three deliveries arrive over time. The ingest process (Python driver and its JVM) is killed at
two points of a micro-batch: after Spark logged the batch's offsets, while the source tasks write
the candidate parts; and after the sink's record, around Spark's commit. Every restart with the
same checkpoint must finish the job, and the candidate table must hold each delivery once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakefs_gc.spark.ingest.inventory.table import (
    CandidateTable,
    candidates_frame,
    ingest_records,
    ingested_deliveries,
)
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_location
from tests.spark.ingest.test_inventory_stream import ROUTES, deliver

#: a minute or more of work (``-m 'not slow'`` leaves it out of a quick run)
pytestmark = pytest.mark.slow


class Ingester:
    def __init__(self, tmp_path: Path) -> None:
        self.dest = tmp_path / "inventory"
        self.dest.mkdir()
        self.table = tmp_path / "candidates"
        self.checkpoint = tmp_path / "checkpoint"
        self.argv = [
            sys.executable, "-m", "lakefs_gc", "inventory", "ingest",
            "--inventory", str(self.dest), "--table", str(self.table), "--checkpoint", str(self.checkpoint),
            "--output", "json",
        ]  # fmt: skip
        for route in ROUTES:  # namespaces s3://bkt/repos/a/ ... as the rows' bucket says
            self.argv.append(f"--namespace={route.repository}=s3://{route.container}/{route.prefix}")

    def start(self) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )

    def complete(self) -> list[dict[str, object]]:
        proc = self.start()
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        [line] = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
        return line["deliveries"]  # type: ignore[return-value]

    def kill_when(self, condition: Callable[[], bool]) -> None:
        proc = self.start()
        deadline = time.monotonic() + 300
        while not condition():
            if proc.poll() is not None:
                _, err = proc.communicate()
                pytest.fail(f"ingest ended (exit {proc.returncode}) before the kill point:\n{err[-3000:]}")
            assert time.monotonic() < deadline, "kill point never reached"
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGKILL)  # the driver: Python and its JVM
        proc.communicate()

    def exists(self, pattern: str) -> Callable[[], bool]:
        return lambda: any(self.table.parent.glob(pattern))


def test_three_deliveries_survive_kills(tmp_path: Path, spark: SparkSession) -> None:
    ingester = Ingester(tmp_path)
    first = deliver(ingester.dest, 1)
    assert [d["id"] for d in ingester.complete()] == [first]

    second = deliver(ingester.dest, 2, "azure", "parquet")
    ingester.kill_when(ingester.exists("candidates/parts/*/00000001/part-*"))  # parts being written
    assert [d["id"] for d in ingester.complete()] == [second]

    third = deliver(ingester.dest, 3, "s3", "csv")
    ingester.kill_when(ingester.exists("candidates/_ingest/*-00000002.json"))  # recorded, maybe not committed
    rest = ingester.complete()
    assert [d["id"] for d in rest] in ([third], [])  # [] if the kill came after Spark's commit

    table = CandidateTable(parse_location(str(ingester.table)), StorageOptions())
    deliveries = ingested_deliveries(table)
    assert [(d.id, d.status) for d in deliveries] == [
        (first, "ingested"),
        (second, "ingested"),
        (third, "ingested"),
    ]
    assert len(ingest_records(table)) == 3  # one record per batch, none repeated
    rows = [
        (r.repository, r.address, r.delivery_id)
        for r in candidates_frame(spark, table, deliveries, parallelism=2).collect()
    ]
    assert len(rows) == len(set(rows)) == 30
    listed = {part for d in deliveries for part in d.parts}
    on_disk = {str(p.relative_to(ingester.table)) for p in ingester.table.glob("parts/*/*/*.parquet")}
    assert on_disk == listed  # a killed attempt's parts were cleaned up, none is read twice
    assert {d: sum(1 for r in rows if r[2] == d) for d in (first, second, third)} == {
        first: 10,
        second: 10,
        third: 10,
    }
    assert all(d.candidates == 10 and d.repositories == {"alpha": 5, "beta": 5} for d in deliveries)
