"""The batch jobs as tests call them: from settings, with a lakeFS client of their own (the CLI and
the service open one per command or cycle, through :mod:`lakefs_gc.jobs` as here)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lakefs_gc import jobs
from lakefs_gc.settings import GcSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakefs_gc.spark.mark.result import MarkResult
    from lakefs_gc.spark.sweep.job import SweepResult


def mark(spark: SparkSession, settings: GcSettings, repository: str, **options: Any) -> MarkResult:
    with jobs.lakefs_client(settings, "tests") as client:
        return jobs.mark(spark, settings, repository, client=client, **options)


def sweep(
    spark: SparkSession, settings: GcSettings, repository: str, mark_id: str, **options: Any
) -> SweepResult:
    with jobs.lakefs_client(settings, "tests") as client:
        return jobs.sweep(spark, settings, repository, mark_id, client=client, **options)
