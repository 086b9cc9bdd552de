"""Errors raised in Spark tasks reach the driver whole: class, message and fields (the wire encoding
of ``lakefs_gc.spark.runtime.failures``), so the CLI prints them and exits as if raised there."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from lakefs_gc.errors import ExitCode, GcError, LakeFSError, SSTableFormatError, StorageError
from lakefs_gc.lakefs.uncommitted import UncommittedDumpError
from lakefs_gc.spark.runtime.failures import SparkJobError, from_wire, job_failure, on_executor, to_wire


@pytest.mark.parametrize(
    "error",
    [
        SSTableFormatError("s3://b/ns/_lakefs/abc", 4096, "block checksum mismatch"),
        SSTableFormatError("range.sst", None, "not an SSTable"),
        LakeFSError("range not found", status=404),
        UncommittedDumpError("page 3 failed", run_id="g4uk6erfnfus73frbnqg", status=500),
        StorageError("cannot read s3://b/k: access denied"),
        GcError('line one\nline two, "quoted"'),
    ],
    ids=lambda e: type(e).__name__,
)
def test_the_wire_encoding_round_trips(error: GcError) -> None:
    line = to_wire(error)
    assert "\n" not in line
    back = from_wire(f"lakefs_gc.spark.runtime.failures.TaskError: {line}")
    assert type(back) is type(error) and str(back) == str(error)
    assert back is not None and back.wire_fields() == error.wire_fields()
    assert back.exit_code == error.exit_code


def test_an_unknown_class_is_a_spark_job_error() -> None:
    line = '{"class": "lakefs_gc.nowhere.GoneError", "message": "m", "fields": {}}'
    back = from_wire("lakefs-gc-error:" + line)
    assert isinstance(back, SparkJobError) and str(back) == "m"


def test_an_sstable_error_in_a_task_arrives_with_its_fields(spark: SparkSession) -> None:
    def corrupt(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:
            raise SSTableFormatError(
                "s3://b/ns/_lakefs/9860408d", 4096, "block checksum mismatch (corrupt data)"
            )
        yield from ()

    with pytest.raises(Exception) as raised:
        spark.range(1).mapInArrow(on_executor(corrupt), "id long").collect()
    error = job_failure(raised.value, "mark m1 of repo")
    assert isinstance(error, SSTableFormatError)
    assert (error.name, error.offset, error.reason) == (
        "s3://b/ns/_lakefs/9860408d",
        4096,
        "block checksum mismatch (corrupt data)",
    )
    assert str(error) == (
        "mark m1 of repo: s3://b/ns/_lakefs/9860408d at byte offset 4096: "
        "block checksum mismatch (corrupt data)"
    )
    assert error.exit_code == ExitCode.CORRUPT_RANGE


def test_a_lakefs_error_in_a_task_keeps_its_status(spark: SparkSession) -> None:
    def refused(batches: Any) -> Iterator[pa.RecordBatch]:
        for _ in batches:
            raise LakeFSError("getRange: range not found", status=404)
        yield from ()

    with pytest.raises(Exception) as raised:
        spark.range(1).mapInArrow(on_executor(refused), "id long").collect()
    error = job_failure(raised.value, "reading ranges")
    assert isinstance(error, LakeFSError) and error.status == 404
    assert str(error) == "reading ranges: getRange: range not found"
    assert error.exit_code == ExitCode.LAKEFS
