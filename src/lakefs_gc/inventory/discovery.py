"""Deliveries under an inventory destination, whatever the cloud wrote them.

Callers (``mark --inventory``, ``inventory show|ingest``, the streaming source) name a
destination, not a flavour: an S3 Inventory destination prefix or an Azure inventory container.
:func:`discover` finds both layouts under it and :func:`read_rows` reads a data file with the
reader of the delivery's flavour, so nothing above this module branches on the cloud.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from lakefs_gc.inventory.delivery import DataFile, Delivery, DiscoveryResult, Flavour, InventoryError
from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
from lakefs_gc.storage.locations import StorageLocation, parse_location

FLAVOURS: tuple[Flavour, ...] = ("s3", "azure")


def flavour_module(flavour: Flavour) -> Any:
    """``lakefs_gc.inventory.s3`` or ``.azure``: the module with that cloud's readers and writer."""
    if flavour not in FLAVOURS:
        raise InventoryError(f"unknown inventory flavour {flavour!r} (expected one of {', '.join(FLAVOURS)})")
    return importlib.import_module(f"lakefs_gc.inventory.{flavour}")


def open_destination(uri: str, options: StorageOptions) -> tuple[pafs.FileSystem, str, StorageLocation]:
    """The filesystem and path of an inventory destination URI (s3://, Azure https://, file:// or a path)."""
    location = parse_location(uri)
    fs, path = filesystem_for(location, options)
    return fs, path, location


def discover(fs: pafs.FileSystem, destination_path: str, flavour: Flavour | None = None) -> DiscoveryResult:
    """Every delivery under ``destination_path`` of ``flavour`` (both when ``None``), oldest first."""
    merged = DiscoveryResult()
    for name in (flavour,) if flavour else FLAVOURS:
        found: DiscoveryResult = flavour_module(name).discover(fs, destination_path)
        merged.complete.extend(found.complete)
        merged.pending.extend(found.pending)
        merged.rejected.extend(found.rejected)
    merged.complete.sort(key=lambda d: (d.snapshot_time, d.id))
    return merged


def newest_snapshot(found: DiscoveryResult, *, now: datetime, max_age: timedelta, where: str) -> Delivery:
    """The newest complete delivery, refusing none and one older than ``max_age`` (fail closed).

    An older snapshot is never silently used in place of a missing newer one beyond ``max_age``:
    the operator configured how stale a candidate set may be.
    """
    if not found.complete:
        detail = []
        if found.pending:
            detail.append(f"{len(found.pending)} pending")
        if found.rejected:
            detail.append(f"{len(found.rejected)} rejected: {found.rejected[-1]}")
        extra = f" ({'; '.join(detail)})" if detail else ""
        raise InventoryError(f"{where}: no complete inventory delivery{extra}")
    newest = found.complete[-1]
    age = now - newest.snapshot_time
    if age > max_age:
        raise InventoryError(
            f"{newest.manifest_path}: the newest complete inventory snapshot is from "
            f"{newest.snapshot_time:%Y-%m-%d %H:%M:%SZ}, {_days(age)} old, older than the allowed "
            f"{_days(max_age)} (--max-inventory-age)"
        )
    return newest


def read_rows(fs: pafs.FileSystem, delivery: Delivery, data_file: DataFile) -> Iterator[pa.RecordBatch]:
    """One data file of ``delivery`` as INVENTORY_SCHEMA batches, verified by its flavour's reader."""
    reader = flavour_module(delivery.flavour)
    batches: Iterator[pa.RecordBatch] = reader.read_data_file(fs, delivery, data_file)
    return batches


def _days(delta: timedelta) -> str:
    days = delta.total_seconds() / 86400
    return f"{days:.1f} days"
