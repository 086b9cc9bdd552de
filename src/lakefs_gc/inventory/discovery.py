"""Deliveries under an inventory destination, whatever the cloud wrote them.

Callers (``mark --inventory``, ``inventory show|ingest``, the streaming source) name a
destination, not a flavour: an S3 Inventory destination prefix or an Azure inventory container.
:func:`discover` finds both layouts under it and :func:`read_rows` reads a data file with the
reader of the delivery's flavour, so nothing above this module branches on the cloud.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
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


def newest_snapshot(
    found: DiscoveryResult,
    *,
    now: datetime,
    max_age: timedelta,
    where: str,
    covers: Callable[[Delivery], bool] | None = None,
    of: str = "",
) -> Delivery:
    """The newest complete delivery ``covers`` accepts, refusing none and one older than ``max_age``.

    Fail closed: an older snapshot is never silently used in place of a missing newer one beyond
    ``max_age`` (the operator configured how stale a candidate set may be), and a destination
    holding only other buckets' deliveries is "no inventory", never "an empty bucket". ``of``
    names what ``covers`` looks for, for the messages (e.g. ``"of bucket b"``).
    """
    usable = [d for d in found.complete if covers is None or covers(d)]
    if not usable:
        raise InventoryError(f"{where}: no complete inventory delivery{' ' + of if of else ''}{_why(found)}")
    newest = usable[-1]
    age = now - newest.snapshot_time
    if age > max_age:
        raise InventoryError(
            f"{newest.manifest_path}: the newest complete inventory snapshot is from "
            f"{newest.snapshot_time:%Y-%m-%d %H:%M:%SZ}, {_days(age)} old, older than the allowed "
            f"{_days(max_age)} (--max-inventory-age)"
        )
    return newest


def _why(found: DiscoveryResult) -> str:
    detail = []
    if found.complete:
        sources = sorted({f"{d.flavour} {d.source or '(unknown)'}" for d in found.complete})
        detail.append(f"{len(found.complete)} complete for other sources: {', '.join(sources)}")
    if found.pending:
        detail.append(f"{len(found.pending)} pending, the newest {found.pending[-1]}")
    if found.rejected:
        detail.append(f"{len(found.rejected)} rejected: {found.rejected[-1]}")
    return f" ({'; '.join(detail)})" if detail else ""


def newer_unusable(found: DiscoveryResult, chosen: Delivery) -> list[str]:
    """Pending and rejected deliveries of ``chosen``'s feed that started after it, as messages.

    Using an older snapshot is safe (it only finds less garbage), but a rejected newest delivery
    means the inventory feed is broken and would silently go stale: the operator must hear of it.
    A delivery whose time or feed cannot be told from its path is reported too.
    """
    chosen_start, chosen_feed = _place(chosen.manifest_path)
    out: list[str] = []
    candidates: list[tuple[str | None, str]] = [
        (p, f"pending (not complete yet): {p}") for p in found.pending
    ]
    candidates += [(e.manifest_path, f"rejected: {e}") for e in found.rejected]
    for path, message in candidates:
        start, feed = _place(path) if path else (None, None)
        if feed is not None and chosen_feed is not None and feed != chosen_feed:
            continue
        if start is None or chosen_start is None or start > chosen_start:
            out.append(message)
    return out


def _place(manifest_path: str) -> tuple[datetime | None, str | None]:
    """When a delivery started and whose it is, from its manifest path: (time, S3 source bucket).

    S3: ``<dest>/<source>/<config>/YYYY-MM-DDTHH-MMZ/manifest.json``; Azure (the destination
    container is in the source account, so one feed): ``YYYY/MM/DD/HH-MM-SS/<rule>/<rule>-manifest.json``.
    """
    s3 = _S3_PLACE.search(manifest_path)
    if s3:
        return datetime.strptime(s3.group(2), "%Y-%m-%dT%H-%MZ").replace(tzinfo=timezone.utc), s3.group(1)
    azure = _AZURE_PLACE.search(manifest_path)
    if azure:
        stamp = datetime.strptime(azure.group(1), "%Y/%m/%d/%H-%M-%S").replace(tzinfo=timezone.utc)
        return stamp, None
    return None, None


_S3_PLACE = re.compile(r"(?:^|/)([^/]+)/[^/]+/(\d{4}-\d{2}-\d{2}T\d{2}-\d{2}Z)/manifest\.json$")
_AZURE_PLACE = re.compile(r"(?:^|/)(\d{4}/\d{2}/\d{2}/\d{2}-\d{2}-\d{2})/([^/]+)/\2-manifest\.json$")


def read_rows(
    fs: pafs.FileSystem, delivery: Delivery, data_file: DataFile, *, etags: bool = True
) -> Iterator[pa.RecordBatch]:
    """One data file of ``delivery`` as INVENTORY_SCHEMA batches, verified by its flavour's reader
    (``etags``: with the content columns parsed, else null: ``delivery.CONTENT_COLUMNS``)."""
    reader = flavour_module(delivery.flavour)
    batches: Iterator[pa.RecordBatch] = reader.read_data_file(fs, delivery, data_file, etags=etags)
    return batches


def _days(delta: timedelta) -> str:
    days = delta.total_seconds() / 86400
    return f"{days:.1f} days"
