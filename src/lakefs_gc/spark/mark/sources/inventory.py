"""An inventory delivery as the mark's listing: its data files read in parallel on the executors.

Produces the same DataFrame as :func:`lakefs_gc.spark.mark.sources.listing.listed_objects`
(``address, size, last_modified``) for one repository, so a mark can use the newest complete
inventory snapshot instead of listing the bucket.

The inventory is chosen on the driver before lakeFS is asked for anything (a refused inventory
costs no uncommitted dump and leaves no failed mark behind; :func:`inventory_source`); its data
files are read later, on the executors, one task each, where a file that fails verification
(MD5, schema, an unparsable row) fails the job and therefore the mark (docs/invariants.md,
invariant 4). Objects created after the snapshot are not candidates: they are not in it, so they
are kept this time, never deleted on a guess.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakefs_gc.inventory.delivery import DataFile, Delivery, Flavour, InventoryError
from lakefs_gc.inventory.discovery import discover, newer_unusable, newest_snapshot, open_destination
from lakefs_gc.inventory.generate import LOCAL_SOURCE
from lakefs_gc.inventory.mapping import NamespaceRoute, content_md5s, route_rows
from lakefs_gc.spark.mark.sources.base import CONTENT_MD5, LISTED_SCHEMA, Candidates, Progress
from lakefs_gc.spark.runtime.failures import on_executor
from lakefs_gc.spark.runtime.frames import task_frame
from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
from lakefs_gc.storage.locations import StorageLocation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

LISTED_COLUMNS = ["address", "size", "last_modified"]


def inventory_objects(
    spark: SparkSession,
    delivery: Delivery,
    *,
    inventory: StorageLocation,
    route: NamespaceRoute,
    options: StorageOptions,
    parallelism: int,
    proven: bool = True,
) -> DataFrame:
    """The objects of ``route``'s namespace according to ``delivery`` (``LISTED_SCHEMA``), and with
    ``proven`` their :data:`CONTENT_MD5` (an S3 delivery with the ETag and EncryptionStatus fields
    proves it): the identity-twin guard's content evidence, which only ``gc.trust_checksums`` lets
    it use. Without it, the ETags are neither parsed nor checked (a third of a data file's
    decoding, and a regular expression per row) and the column is left out, as a listing's."""
    indexes = [(i,) for i in range(len(delivery.files))]
    tasks = task_frame(spark, indexes, "file int", parallelism)
    schema = f"{LISTED_SCHEMA}, {CONTENT_MD5} string" if proven else LISTED_SCHEMA
    return tasks.mapInArrow(on_executor(_ReadDataFiles(delivery, inventory, route, options, proven)), schema)


class _ReadDataFiles:
    """Per-partition body: read the assigned data files, keep the route's rows (on an executor)."""

    def __init__(
        self,
        delivery: Delivery,
        inventory: StorageLocation,
        route: NamespaceRoute,
        options: StorageOptions,
        proven: bool,
    ) -> None:
        self.delivery, self.inventory, self.route, self.options = delivery, inventory, route, options
        self.proven = proven

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, _ = filesystem_for(self.inventory, self.options)
        reader = importlib.import_module(f"lakefs_gc.inventory.{self.delivery.flavour}")
        # routing carries the proven MD5s through in the ``etag`` column (_proven)
        taken, names = (
            ([*LISTED_COLUMNS, "etag"], [*LISTED_COLUMNS, CONTENT_MD5])
            if self.proven
            else (LISTED_COLUMNS, LISTED_COLUMNS)
        )
        for batch in batches:
            for index in batch.column("file").to_pylist():
                data_file: DataFile = self.delivery.files[index]
                for rows in reader.read_data_file(fs, self.delivery, data_file, etags=self.proven):
                    if self.proven:
                        rows = self._proven(rows)
                    candidates = route_rows(
                        rows,
                        [self.route],
                        delivery_id=self.delivery.id,
                        snapshot_time=self.delivery.snapshot_time,
                    )
                    if candidates.num_rows:
                        columns = candidates.select(taken)
                        yield from columns.rename_columns(names).to_batches()

    def _proven(self, rows: pa.RecordBatch) -> pa.RecordBatch:
        """``rows`` with each ETag replaced by the MD5 of the bytes it proves (else null): routing
        carries the ``etag`` column through to the candidates, which need nothing else of it."""
        i = rows.schema.get_field_index("etag")
        if self.delivery.flavour != "s3":
            proven = pa.nulls(rows.num_rows, pa.string())
        else:
            proven = content_md5s(rows.column("etag"), rows.column("encryption")).combine_chunks()
        return rows.set_column(i, "etag", proven)


@dataclass(frozen=True)
class InventorySource:
    """Read one verified inventory delivery's data files on the executors."""

    destination: str
    location: StorageLocation
    delivery: Delivery
    route: NamespaceRoute
    options: StorageOptions
    newer_unusable: tuple[str, ...] = ()
    proven: bool = True  # with each object's CONTENT_MD5 where the delivery proves it (gc.trust_checksums)

    @property
    def summary(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "source": "inventory",
            "destination": self.destination,
            "delivery": self.delivery.id,
            "snapshot_time": self.delivery.snapshot_time.isoformat().replace("+00:00", "Z"),
            "flavour": self.delivery.flavour,
            "data_files": len(self.delivery.files),
        }
        if self.newer_unusable:
            body["newer_unusable"] = list(self.newer_unusable)
        return body

    def candidates(self, spark: SparkSession, *, parallelism: int, say: Progress) -> Candidates:
        say(f"reading {len(self.delivery.files)} data files of inventory snapshot {self.delivery.id}")
        objects = inventory_objects(
            spark,
            self.delivery,
            inventory=self.location,
            route=self.route,
            options=self.options,
            parallelism=parallelism,
            proven=self.proven,
        )
        # Azure documents rows repeated across a delivery's files: one candidate per address,
        # so deleted/ holds each address once and the counts mean objects.
        return Candidates(objects.dropDuplicates(["address"]), None)


def _flavour(namespace: StorageLocation) -> Flavour:
    """The inventory a namespace's cloud writes (a local namespace, in tests and the demo: S3's)."""
    return "azure" if namespace.kind == "azure" else "s3"


@dataclass(frozen=True)
class Coverage:
    """Whether a delivery lists the namespace's objects: its bucket (S3) or storage account (Azure).

    A delivery of another bucket holds none of them, and using it would read as "the namespace is
    empty" (harmless, but a silently useless mark), so it is not a snapshot of this namespace.
    """

    namespace: StorageLocation

    def __call__(self, delivery: Delivery) -> bool:
        ns = self.namespace
        if ns.kind == "azure":
            known = bool(ns.account and delivery.source)
            return delivery.flavour == "azure" and (not known or delivery.source == ns.account)
        if ns.kind == "s3":
            return delivery.flavour == "s3" and delivery.source == ns.container
        # a local namespace (tests, demo) has no bucket: generated S3-flavoured deliveries name it so
        return delivery.flavour == "s3" and delivery.source == LOCAL_SOURCE

    def __str__(self) -> str:
        ns = self.namespace
        if ns.kind == "azure":
            return f"of storage account {ns.account}"
        return f"of bucket {ns.container if ns.kind == 's3' else LOCAL_SOURCE}"


def inventory_source(
    repository: str,
    namespace: StorageLocation,
    options: StorageOptions,
    *,
    inventory: str,
    max_inventory_age: timedelta,
    now: datetime,
    say: Progress,
    proven: bool = True,
) -> InventorySource:
    """The newest usable snapshot under ``inventory`` (refused: InventoryError); ``proven``: read
    with each object's content evidence (:func:`inventory_objects`)."""
    try:
        fs, path, location = open_destination(inventory, options)
        found = discover(fs, path, _flavour(namespace))
    except (OSError, ValueError) as e:  # pyarrow's errors are OSError/ArrowException (a ValueError)
        raise InventoryError(f"{inventory}: cannot read the inventory destination: {e}") from e
    covers = Coverage(namespace)
    delivery = newest_snapshot(
        found, now=now, max_age=max_inventory_age, where=inventory, covers=covers, of=str(covers)
    )
    newer = tuple(newer_unusable(found, delivery))
    for message in newer:
        say(f"WARNING: {repository}: a newer inventory delivery than {delivery.id} is unusable: {message}")
    age = now - delivery.snapshot_time
    say(
        f"{repository}: candidates from inventory snapshot {delivery.id} "
        f"({delivery.snapshot_time:%Y-%m-%d %H:%M:%SZ}, {age.total_seconds() / 3600:.1f} h old); "
        "objects created since are not candidates this time"
    )
    route = NamespaceRoute.of(repository, namespace)
    return InventorySource(inventory, location, delivery, route, options, newer, proven)
