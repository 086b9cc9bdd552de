"""The mark's tally: every reason counted in the one pass that keeps the garbage, the identity-twin
guard's moves counted again, and a count that does not add up failing the mark."""

from __future__ import annotations

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakefs_gc.errors import GcError
from lakefs_gc.gc import reasons
from lakefs_gc.spark.mark.tally import observed_garbage, tally

ROWS = [
    ("data/s2/a", 10, reasons.COMMITTED),
    ("data/s1/b", 20, reasons.UNCOMMITTED),
    ("data/s3/c", 30, reasons.GARBAGE),
    ("data/s3/d", 40, reasons.GARBAGE),
    ("other/e", 50, reasons.GARBAGE),
    ("data/s4/f", 60, reasons.TOO_YOUNG),
    ("data/s5/g", 70, reasons.RETENTION_CROSS_CHECK),
]


def classified(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame(ROWS, "address string, size long, reason string").repartition(3)


def test_every_reason_is_counted_while_the_garbage_is_kept(spark: SparkSession) -> None:
    garbage, observation = observed_garbage(classified(spark))
    kept = garbage.persist()
    assert kept.count() == 3  # the one pass over every row
    twin = F.when(F.col("address") == "data/s3/d", F.lit(reasons.IDENTITY_TWIN)).otherwise(F.col("reason"))
    result = tally(observation, kept.withColumn("reason", twin), "mark m1")
    expected = {r: {"objects": 0, "bytes": 0} for r in reasons.REASONS}
    for _, size, reason in ROWS:
        expected[reason]["objects"] += 1
        expected[reason]["bytes"] += size
    expected[reasons.GARBAGE] = {"objects": 2, "bytes": 80}  # d became an identity twin
    expected[reasons.IDENTITY_TWIN] = {"objects": 1, "bytes": 40}
    assert result.counts == expected and result.first_slice == "s1"
    kept.unpersist()


def test_a_garbage_count_that_does_not_add_up_fails_the_mark(spark: SparkSession) -> None:
    garbage, observation = observed_garbage(classified(spark))
    assert garbage.count() == 3
    with pytest.raises(GcError, match=r"mark m2: counted 3 garbage objects while classifying, but 2 after"):
        tally(observation, garbage.where(F.col("address") != "other/e"), "mark m2")
    with pytest.raises(GcError, match=r"left reason 'committed' among the garbage"):
        tally(observation, garbage.withColumn("reason", F.lit(reasons.COMMITTED)), "mark m3")
