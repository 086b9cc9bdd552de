"""Deleting tasks that read their share of ``deleted/`` themselves: no shuffle of the marked set.

When the sweep subtracts nothing from the marked set (the revalidation saved nothing, no earlier
run confirmed anything), it deletes ``deleted/`` as it is. Spreading it over the deleting tasks by
a repartition costs a stage that reads every part and shuffles every address: 0.8-1.4 s of a
sweep of 1M objects on 2 cores, before the first delete (bench/README.md, "Sweep at 100 ms:
deleting tasks that read `deleted/` themselves (2026-12-01)"). Instead, each task is given
slices of the parts (:func:`split_parts`) and reads them while it deletes
(:func:`~lakefs_gc.spark.report.read.read_address_column`): slice ``k`` of ``n`` of a part is
its rows ``[k*R//n, (k+1)*R//n)``, where ``R`` is the part's row count from its footer. Every
address is read by exactly one task, and a task run again reads the same rows.

The split goes by the parts' sizes from their listing, so that tasks are about even where a
part's bytes follow its rows (parts of one mark do); an odd part makes a task longer, never wrong.
The slices travel with the tasks' body, not as data: one short list per task.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from lakefs_gc.spark.report.layout import ReportDir
from lakefs_gc.spark.report.read import read_address_column

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: a slice: (part path, k, n), the k-th of the part's n slices
Slice = tuple[str, int, int]


def split_parts(parts: Sequence[tuple[str, int]], tasks: int) -> list[list[Slice]]:
    """The slices of ``parts`` (path, size in bytes) that each of at most ``tasks`` tasks reads.

    A part larger than a task's share is cut into that many slices; smaller parts stay whole.
    Every part gives one slice at least, so that each is read, empty ones included (their footer
    is checked like any other's). The slices go to the tasks largest first, each to the task with
    the fewest bytes so far; tasks that would get nothing are left out."""
    total = sum(size for _, size in parts)
    share = total / max(tasks, 1)
    slices: list[tuple[float, Slice]] = []
    for path, size in parts:
        n = max(1, math.ceil(size / share - 0.25)) if share > 0 else 1  # a quarter over: not one more
        slices.extend((size / n, (path, k, n)) for k in range(n))
    loads = [(0.0, task) for task in range(max(1, min(tasks, len(slices))))]
    groups: list[list[Slice]] = [[] for _ in loads]
    for weight, piece in sorted(slices, key=lambda s: -s[0]):  # stable: equal sizes keep their order
        load, task = heapq.heappop(loads)
        groups[task].append(piece)
        heapq.heappush(loads, (load + weight, task))
    return [sorted(group) for group in groups if group]


def sliced_tasks(spark: SparkSession, groups: Sequence[Sequence[Slice]]) -> DataFrame:
    """One task per group (column ``task``, the group's index): ``spark.range`` puts exactly one
    id in each of its partitions, with no shuffle and no Python task to build it."""
    return spark.range(0, len(groups), 1, max(1, len(groups))).withColumnRenamed("id", "task")


class ReadThenSweep:
    """A deleting task's body: reads the addresses of its group's slices and hands them to
    ``sweep`` (column ``address``) as it goes, so that the reading overlaps the deletes."""

    def __init__(
        self,
        report: ReportDir,
        groups: Sequence[Sequence[Slice]],
        sweep: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    ) -> None:
        self.report, self.groups, self.sweep = report, [list(g) for g in groups], sweep

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return self.sweep(self._addresses(batches))

    def _addresses(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, _ = self.report.filesystem()
        for batch in batches:
            for task in batch.column("task").to_pylist():
                for path, k, n in self.groups[task]:
                    yield from read_address_column(fs, path, slice_of=(k, n))
