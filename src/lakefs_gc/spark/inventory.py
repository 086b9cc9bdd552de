"""An inventory delivery as the mark's listing: its data files read in parallel on the executors.

Produces the same DataFrame as :func:`lakefs_gc.spark.listing.listed_objects` (``address, size,
last_modified``) for one repository, so a mark can use the newest complete inventory snapshot
instead of listing the bucket. Each data file is one task; a file that fails verification (MD5,
schema, an unparsable row) fails the job and therefore the mark (invariant 4).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from lakefs_gc.inventory.delivery import DataFile, Delivery
from lakefs_gc.inventory.mapping import NamespaceRoute, route_rows
from lakefs_gc.spark.listing import LISTED_SCHEMA
from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
from lakefs_gc.storage.locations import StorageLocation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def inventory_objects(
    spark: SparkSession,
    delivery: Delivery,
    *,
    inventory: StorageLocation,
    route: NamespaceRoute,
    options: StorageOptions,
    parallelism: int,
) -> DataFrame:
    """The objects of ``route``'s namespace according to ``delivery`` (``LISTED_SCHEMA``)."""
    indexes = [(i,) for i in range(len(delivery.files))]
    tasks = spark.createDataFrame(indexes, "file int")
    tasks = tasks.repartition(max(1, min(parallelism, len(indexes))))
    return tasks.mapInArrow(_ReadDataFiles(delivery, inventory, route, options), LISTED_SCHEMA)


class _ReadDataFiles:
    """Per-partition body: read the assigned data files, keep the route's rows (on an executor)."""

    def __init__(
        self, delivery: Delivery, inventory: StorageLocation, route: NamespaceRoute, options: StorageOptions
    ) -> None:
        self.delivery, self.inventory, self.route, self.options = delivery, inventory, route, options

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, _ = filesystem_for(self.inventory, self.options)
        reader = importlib.import_module(f"lakefs_gc.inventory.{self.delivery.flavour}")
        for batch in batches:
            for index in batch.column("file").to_pylist():
                data_file: DataFile = self.delivery.files[index]
                for rows in reader.read_data_file(fs, self.delivery, data_file):
                    candidates = route_rows(
                        rows,
                        [self.route],
                        delivery_id=self.delivery.id,
                        snapshot_time=self.delivery.snapshot_time,
                    )
                    if candidates.num_rows:
                        yield from candidates.select(["address", "size", "last_modified"]).to_batches()
