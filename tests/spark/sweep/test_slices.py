"""The deleting tasks' slices of ``deleted/``: every marked address read by exactly one slice.

When a sweep deletes the whole mark, its tasks read slices of the ``deleted/`` parts themselves
(:mod:`lakefs_gc.spark.sweep.slices`) instead of being handed the addresses by a shuffle. A slice
left out would leave garbage; a slice read twice would ask the store twice and record the address
twice in ``swept/``. Checked on parts of many row groups cut every way, on the split of parts of
uneven sizes, and by a sweep of such parts on local Spark.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from lakefs_gc.errors import StorageError
from lakefs_gc.gc.reports import MarkReportError
from lakefs_gc.spark.report.layout import MARKED, ReportDir, part_sizes
from lakefs_gc.spark.report.read import read_address_column
from lakefs_gc.spark.sweep.slices import ReadThenSweep, sliced_tasks, split_parts
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_storage_namespace


def _part(path: Path, addresses: list[str], row_group: int) -> str:
    pq.write_table(
        pa.table({"address": addresses, "size": [1] * len(addresses)}), path, row_group_size=row_group
    )
    return str(path)


def _read(path: str, k: int, n: int) -> list[str]:
    batches = read_address_column(pafs.LocalFileSystem(), path, slice_of=(k, n))
    return [a for b in batches for a in b.column("address").to_pylist()]


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(0, 300), row_group=st.integers(1, 80), slices=st.integers(1, 9))
def test_the_slices_of_a_part_read_each_row_once_in_order(
    tmp_path_factory: pytest.TempPathFactory, rows: int, row_group: int, slices: int
) -> None:
    addresses = [f"data/s/{i:05d}" for i in range(rows)]
    path = _part(tmp_path_factory.mktemp("p") / "part-0.parquet", addresses, row_group)
    read = [a for k in range(slices) for a in _read(path, k, slices)]
    assert read == addresses
    sizes = [len(_read(path, k, slices)) for k in range(slices)]
    assert max(sizes) - min(sizes) <= 1  # even, whatever the row groups


def test_a_slice_of_a_part_that_is_not_a_marked_file_fails_naming_it(tmp_path: Path) -> None:
    wrong = tmp_path / "part-1.parquet"
    pq.write_table(pa.table({"key": ["a"], "address": ["b"]}), wrong)
    with pytest.raises(MarkReportError, match=r"part-1\.parquet: first column is not 'address'"):
        _read(str(wrong), 1, 3)
    broken = tmp_path / "part-2.parquet"
    broken.write_bytes(b"PAR1 not parquet")
    with pytest.raises(StorageError, match=r"cannot read marked file .*part-2\.parquet"):
        _read(str(broken), 0, 2)


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 10_000_000), min_size=1, max_size=30), tasks=st.integers(1, 64))
def test_the_split_gives_every_slice_of_every_part_to_one_task_and_evens_them(
    sizes: list[int], tasks: int
) -> None:
    parts = [(f"p{i}", size) for i, size in enumerate(sizes)]
    groups = split_parts(parts, tasks)
    assert 1 <= len(groups) <= tasks and all(groups)
    slices = [piece for group in groups for piece in group]
    assert len(set(slices)) == len(slices)
    for path, size in parts:
        (n,) = {n for p, _, n in slices if p == path}
        assert sorted(k for p, k, _ in slices if p == path) == list(range(n))
        share = sum(sizes) / tasks
        assert size / n <= share * 4 / 3 + 1 or (n == 1 and size <= share * 1.25 + 1)
    loads = [sum(dict(parts)[p] / n for p, _, n in group) for group in groups]
    biggest = max(dict(parts)[p] / n for p, _, n in slices)
    assert max(loads) - min(loads) <= biggest + 1  # greedy: no task more than a slice over another


def test_the_split_of_even_parts() -> None:
    assert split_parts([("a", 100)], 4) == [[("a", 0, 4)], [("a", 1, 4)], [("a", 2, 4)], [("a", 3, 4)]]
    eight = split_parts([(f"p{i}", 100) for i in range(8)], 4)
    assert eight == [[("p0", 0, 1), ("p4", 0, 1)], [("p1", 0, 1), ("p5", 0, 1)],
                     [("p2", 0, 1), ("p6", 0, 1)], [("p3", 0, 1), ("p7", 0, 1)]]  # fmt: skip
    assert split_parts([("a", 0), ("b", 0)], 4) == [[("a", 0, 1), ("b", 0, 1)]]  # nothing to even out
    assert split_parts([], 4) == []


def test_tasks_over_uneven_parts_read_every_address_once(tmp_path: Path, spark: SparkSession) -> None:
    """Parts of 1, 700, 0, 3,000 and 10,000 rows for 5 tasks, through Spark: the addresses the
    tasks hand to the sweep are the marked ones, each once, and every task has some."""
    namespace = parse_storage_namespace("local://ns", local_root=str(tmp_path))
    report = ReportDir(namespace, "m1", StorageOptions(local_root=str(tmp_path)))
    fs, base = report.filesystem()
    fs.create_dir(f"{base}/{MARKED}")
    expected: list[str] = []
    for i, n in enumerate([1, 700, 0, 3_000, 10_000]):
        addresses = [f"data/p{i}/{j:05d}" for j in range(n)]
        expected += addresses
        table = pa.table({"address": addresses, "size": [1] * n})
        with fs.open_output_stream(f"{base}/{MARKED}/part-{i:05d}.parquet") as out:
            pq.write_table(table, out, row_group_size=333)
    parts = part_sizes(report, MARKED)
    assert len(parts) == 5 and all(size > 0 for _, size in parts)
    groups = split_parts(parts, 5)
    assert len(groups) == 5
    body = ReadThenSweep(report, groups, _tagged)
    rows = sliced_tasks(spark, groups).mapInArrow(body, "address string, task int").collect()
    assert Counter(r["address"] for r in rows) == Counter(expected)
    assert len({r["task"] for r in rows}) == 5


def _tagged(batches):  # type: ignore[no-untyped-def]
    """A stand-in sweep that passes its addresses on, with the task that got them."""
    from pyspark import TaskContext

    context = TaskContext.get()
    task = context.partitionId() if context is not None else -1
    for batch in batches:
        yield pa.RecordBatch.from_pydict(
            {"address": batch.column(0), "task": pa.array([task] * batch.num_rows, pa.int32())}
        )
