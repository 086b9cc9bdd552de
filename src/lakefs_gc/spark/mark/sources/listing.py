"""Listing a storage namespace in parallel: one Spark task per top-level child of ``data/``.

lakeFS writes objects to ``data/<slice>/<xid>`` (sharded layouts nest deeper), so the direct
children of ``data/`` are a natural unit of parallelism (lakeFS's ``ParallelDataLister``); each is
listed recursively by one task. The files at the namespace root (legacy objects) are one more
task. Never listed: ``_lakefs/``, other root-level directories, files directly under ``data/``
and the root ``dummy`` marker (docs/invariants.md, invariant 3;
:func:`~lakefs_gc.gc.addresses.deletable_key`).

:class:`ListingSource` is the mark's default candidate source; the inventory source produces the
same DataFrame (``LISTED_SCHEMA``) from inventory snapshots.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakefs_gc.gc.addresses import DATA_PREFIX, deletable_key
from lakefs_gc.spark.mark.sources.base import LISTED_SCHEMA, Candidates, Progress
from lakefs_gc.spark.runtime.failures import on_executor
from lakefs_gc.spark.runtime.frames import task_frame
from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
from lakefs_gc.storage.listing import iter_listing, iter_root_files, list_children
from lakefs_gc.storage.locations import StorageLocation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: the task that lists the files at the namespace root
ROOT_TASK = ""


@dataclass(frozen=True)
class ListingPlan:
    """What the driver found at the top of the namespace: the tasks to run."""

    prefixes: tuple[str, ...]  # "data/<child>/" per directory child of data/, plus ROOT_TASK
    first_slice: str  # lakeFS's informational summary field (here: the newest slice)
    files_directly_under_data: int  # never candidates; counted for the report


def plan_listing(namespace: StorageLocation, options: StorageOptions) -> ListingPlan:
    """List ``data/``'s direct children on the driver (one request or a few pages)."""
    fs, base = filesystem_for(namespace, options)
    children = list_children(fs, f"{base.rstrip('/')}/{DATA_PREFIX.rstrip('/')}")
    slices = sorted(c.name for c in children if c.is_dir)
    loose = sum(1 for c in children if not c.is_dir)
    prefixes = (*(f"{DATA_PREFIX}{s}/" for s in slices), ROOT_TASK)
    return ListingPlan(prefixes, slices[0] if slices else "", loose)


def listed_objects(
    spark: SparkSession,
    namespace: StorageLocation,
    options: StorageOptions,
    plan: ListingPlan,
    *,
    parallelism: int,
) -> DataFrame:
    """Every deletable-looking object of the namespace (``LISTED_SCHEMA``), listed on the executors."""
    tasks = task_frame(spark, [(p,) for p in plan.prefixes], "prefix string", parallelism)
    return tasks.mapInArrow(on_executor(_ListPrefixes(namespace, options)), LISTED_SCHEMA)


class _ListPrefixes:
    """The per-partition body of :func:`listed_objects` (pickled to the executors)."""

    def __init__(self, namespace: StorageLocation, options: StorageOptions) -> None:
        self.namespace = namespace
        self.options = options

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, base = filesystem_for(self.namespace, self.options)
        for batch in batches:
            for prefix in batch.column("prefix").to_pylist():
                listing = iter_root_files(fs, base) if prefix == ROOT_TASK else iter_listing(fs, base, prefix)
                for listed in listing:
                    keep = pa.array([deletable_key(a) for a in listed.column("address").to_pylist()])
                    kept = listed.filter(keep)
                    if kept.num_rows:
                        yield kept


@dataclass(frozen=True)
class ListingSource:
    """List the namespace on the executors (one task per ``data/`` slice)."""

    namespace: StorageLocation
    options: StorageOptions

    @property
    def summary(self) -> dict[str, Any]:
        return {"source": "listing"}

    def candidates(self, spark: SparkSession, *, parallelism: int, say: Progress) -> Candidates:
        plan = plan_listing(self.namespace, self.options)
        say(f"listing {len(plan.prefixes)} prefixes of {self.namespace}")
        objects = listed_objects(spark, self.namespace, self.options, plan, parallelism=parallelism)
        stats = {"files_directly_under_data": plan.files_directly_under_data}
        return Candidates(objects, plan.first_slice, stats)
