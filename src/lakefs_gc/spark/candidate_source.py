"""Where a mark's candidates come from: a listing of the namespace, or an inventory snapshot.

Both give the same DataFrame (``LISTED_SCHEMA``, one row per address), so the rest of the mark
(classification against the references, the cutoff, the report) does not know which it got.

The inventory is chosen on the driver before lakeFS is asked for anything (a refused inventory
costs no uncommitted dump and leaves no failed mark behind); its data files are read later, on
the executors, where a verification failure fails the mark like any other (invariant 4).
Objects created after the snapshot are not candidates: they are not in it, so they are kept this
time, never deleted on a guess.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from lakefs_gc.inventory.delivery import Delivery, Flavour, InventoryError
from lakefs_gc.inventory.discovery import discover, newer_unusable, newest_snapshot, open_destination
from lakefs_gc.inventory.generate import LOCAL_SOURCE
from lakefs_gc.inventory.mapping import NamespaceRoute
from lakefs_gc.spark.inventory import inventory_objects
from lakefs_gc.spark.listing import listed_objects, plan_listing
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import StorageLocation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Candidates:
    """The candidate objects of one mark and what their source adds to the report."""

    objects: DataFrame  # LISTED_SCHEMA, one row per address
    first_slice: str | None  # lakeFS's informational field; None: take it from the objects
    stats: dict[str, Any] = field(default_factory=dict)  # source-specific summary keys


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


@dataclass(frozen=True)
class InventorySource:
    """Read one verified inventory delivery's data files on the executors."""

    destination: str
    location: StorageLocation
    delivery: Delivery
    route: NamespaceRoute
    options: StorageOptions
    newer_unusable: tuple[str, ...] = ()

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
        )
        # Azure documents rows repeated across a delivery's files: one candidate per address,
        # so deleted/ holds each address once and the counts mean objects.
        return Candidates(objects.dropDuplicates(["address"]), None)


CandidateSource = ListingSource | InventorySource


class CandidateProvider(Protocol):
    """What a mark needs of its candidate source: its report entry and the objects."""

    @property
    def summary(self) -> dict[str, Any]: ...

    def candidates(self, spark: SparkSession, *, parallelism: int, say: Progress) -> Candidates: ...


def candidate_source(
    repository: str,
    namespace: StorageLocation,
    options: StorageOptions,
    *,
    inventory: str | None,
    max_inventory_age: timedelta,
    now: datetime,
    say: Progress,
) -> CandidateSource:
    """The listing, or the newest usable snapshot under ``inventory`` (refused: InventoryError)."""
    if inventory is None:
        return ListingSource(namespace, options)
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
    return InventorySource(inventory, location, delivery, route, options, newer)


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
