"""``local_frame``: the same frame ``createDataFrame`` builds from the rows, held as a LocalRelation;
``task_frame``: those rows over as many partitions as the parallelism allows."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from pyspark.sql import SparkSession

from lakefs_gc.events.model import EVENT_DDL
from lakefs_gc.spark.runtime.frames import local_frame, task_frame

CASES = [
    ([("a", ["x", "y"]), ("b", [])], "file string, ids array<string>"),
    ([(1,), (2,)], "bucket int"),
    ([("m", 3), ("n", None)], "metarange string, branches long"),
    ([("r", datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc))], "repository string, watermark timestamp"),
    ([], EVENT_DDL),
]


@pytest.mark.parametrize(("rows", "ddl"), CASES, ids=[ddl.split(",")[0] for _, ddl in CASES])
def test_the_rows_and_schema_of_create_data_frame(spark: SparkSession, rows: list[tuple], ddl: str) -> None:
    frame = local_frame(spark, rows, ddl)
    expected = spark.createDataFrame(rows, ddl)
    assert frame.schema == expected.schema
    assert frame.collect() == expected.collect()
    assert "LocalRelation" in frame._jdf.queryExecution().analyzed().toString()  # no Python RDD


def test_a_schema_that_is_no_table_is_refused(spark: SparkSession) -> None:
    with pytest.raises(ValueError, match="not a table schema"):
        local_frame(spark, [(1,)], "int")


@pytest.mark.parametrize(("n", "parallelism", "tasks"), [(0, 4, 1), (1, 4, 1), (3, 2, 2), (5, 8, 5)])
def test_a_task_list_runs_one_task_a_row_up_to_the_parallelism(
    spark: SparkSession, n: int, parallelism: int, tasks: int
) -> None:
    frame = task_frame(spark, [(f"f{i}",) for i in range(n)], "path string", parallelism)
    assert frame.rdd.getNumPartitions() == tasks
    assert sorted(r.path for r in frame.collect()) == [f"f{i}" for i in range(n)]
