"""Write an inventory delivery ourselves, by listing a storage namespace: for buckets without inventory.

S3 Inventory and Azure Blob Inventory have to be configured by the bucket's owner and take up to
48 hours to deliver, moto and Azurite produce none, and local namespaces have no such thing. So
that ``mark --inventory``, the streaming source, the tests and the demo can still run on an
inventory, :func:`generate_delivery` lists the whole namespace through ``pyarrow.fs`` and writes
ONE complete delivery in the real layout of the chosen flavour and format, with the flavour's own
writer (:mod:`lakefs_gc.inventory.s3`, :mod:`lakefs_gc.inventory.azure`), so it is discovered,
verified and read exactly like a delivery the cloud wrote.

Like a real inventory it lists everything, ``_lakefs/`` included: what must never be collected is
dropped by :mod:`lakefs_gc.inventory.mapping`, not by the producer of the inventory. Rows carry
the namespace's bucket/container and each object's full key inside it (a local namespace's
"key" is its absolute path without the leading ``/`` and its bucket is ``""``), which is what
:class:`~lakefs_gc.inventory.mapping.NamespaceRoute` routes on. ``pyarrow.fs`` gives no ETags, so
``etag`` is null (Azure CSV reads it back as ``""``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from lakefs_gc.inventory.azure import write_delivery as write_azure_delivery
from lakefs_gc.inventory.delivery import INVENTORY_SCHEMA, FileFormat, Flavour, InventoryError
from lakefs_gc.inventory.discovery import FLAVOURS
from lakefs_gc.inventory.s3 import write_delivery as write_s3_delivery
from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
from lakefs_gc.storage.listing import iter_listing, iter_root_files, list_children
from lakefs_gc.storage.locations import StorageLocation

#: the S3 Inventory configuration id / Azure inventory rule name a generated delivery is filed under
CONFIG_ID = "lakefs-gc"
RULE_NAME = "lakefs-gc"
#: the source-bucket directory of an S3-flavoured delivery of a local namespace, which has no bucket
LOCAL_SOURCE = "local"
#: formats each cloud's inventory can be configured with: Azure has no ORC
FORMATS: dict[Flavour, tuple[FileFormat, ...]] = {
    "s3": ("csv", "parquet", "orc"),
    "azure": ("csv", "parquet"),
}
PROGRESS_EVERY = 100_000
_AZURE_FORMATS: dict[FileFormat, Literal["csv", "parquet"]] = {"csv": "csv", "parquet": "parquet"}

Progress = Callable[[str], None]


def generate_delivery(
    namespace: StorageLocation,
    options: StorageOptions,
    destination: StorageLocation,
    *,
    flavour: Flavour = "s3",
    format: FileFormat = "parquet",
    snapshot_time: datetime | None = None,
    now: datetime | None = None,
    rows_per_file: int = 1_000_000,
    progress: Progress | None = None,
) -> str:
    """List every object under ``namespace`` and write one complete delivery under ``destination``.

    Returns the manifest's path in the destination's filesystem. The snapshot time (S3: when the
    scan started) defaults to ``now``, taken before the listing: an object written while the
    listing runs may be missing, which a GC reads as "not a candidate", never as "gone".
    """
    check_generation(namespace, destination, flavour=flavour, format=format, rows_per_file=rows_per_file)
    snapshot = snapshot_or_now(snapshot_time, now)
    rows = list_namespace(namespace, options, progress=progress)
    manifest = write_inventory(
        rows, namespace, options, destination,
        flavour=flavour, format=format, snapshot_time=snapshot, rows_per_file=rows_per_file,
    )  # fmt: skip
    if progress:
        progress(f"wrote {rows.num_rows:,} objects as an {flavour} {format} inventory: {manifest}")
    return manifest


def check_generation(
    namespace: StorageLocation,
    destination: StorageLocation,
    *,
    flavour: Flavour,
    format: FileFormat,
    rows_per_file: int,
) -> None:
    """Refuse, before listing anything, a delivery that no cloud would write or that could not be used."""
    if flavour not in FLAVOURS:
        raise InventoryError(f"unknown inventory flavour {flavour!r} (expected one of {', '.join(FLAVOURS)})")
    if format not in FORMATS[flavour]:
        raise InventoryError(
            f"{flavour} inventories are written as {' or '.join(FORMATS[flavour])}, not {format!r}"
            + (" (ORC is an S3 Inventory format only)" if format == "orc" else "")
        )
    if flavour == "azure" and namespace.kind == "local":
        raise InventoryError(
            f"{namespace} is a local namespace: Azure inventories name blobs <container>/<blob>, and a "
            "local namespace has no container, so its rows could never be routed back to it; use --flavour s3"
        )
    if rows_per_file < 1:
        raise InventoryError(f"rows per data file must be positive, got {rows_per_file}")
    _refuse_collectable(namespace, destination)


def _refuse_collectable(namespace: StorageLocation, destination: StorageLocation) -> None:
    """A delivery written at the namespace's root or under its ``data/`` would hold keys the GC may
    delete (``data/<slice>/...``): the inventory would collect itself. ``_lakefs/`` or elsewhere is fine."""
    same_store = (namespace.kind, namespace.container, namespace.account) == (
        destination.kind,
        destination.container,
        destination.account,
    )
    ns, dest = namespace.key.strip("/"), destination.key.strip("/")
    if not same_store or not (dest == ns or dest.startswith(ns + "/") or not ns):
        return
    relative = dest[len(ns) :].strip("/")
    if relative == "" or relative.split("/")[0] == "data":
        raise InventoryError(
            f"{destination} is inside the storage namespace {namespace}, where the garbage collector "
            "could delete the delivery's own files: write it outside the namespace (or under its _lakefs/)"
        )


def snapshot_or_now(snapshot_time: datetime | None, now: datetime | None) -> datetime:
    """The delivery's snapshot time in UTC (a naive time is taken as UTC, as inventories write them)."""
    when = snapshot_time or now or datetime.now(timezone.utc)
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)


def list_namespace(
    namespace: StorageLocation, options: StorageOptions, *, progress: Progress | None = None
) -> pa.Table:
    """Every object under ``namespace`` as :data:`INVENTORY_SCHEMA` rows (``etag`` null: not listed)."""
    fs, root = filesystem_for(namespace, options)
    key_prefix = namespace.key.strip("/") + "/" if namespace.key.strip("/") else ""
    batches: list[pa.RecordBatch] = []
    listed = 0
    for batch in _listing(fs, root):
        batches.append(inventory_rows(batch, namespace.container, key_prefix))
        before, listed = listed, listed + batch.num_rows
        if progress and listed // PROGRESS_EVERY > before // PROGRESS_EVERY:
            progress(f"listed {listed:,} objects under {namespace}")
    if progress and listed == 0:
        progress(f"warning: no objects under {namespace}; the delivery will be empty")
    return pa.Table.from_batches(batches, schema=INVENTORY_SCHEMA)


def _listing(fs: pafs.FileSystem, root: str) -> Iterator[pa.RecordBatch]:
    """Every file under ``root`` (namespace-relative ``address``), one top-level directory and one
    slice of ``data/`` at a time: a store answers a prefix with one listing held in memory, so
    memory is bounded by the largest slice, as in the mark's listing (:mod:`lakefs_gc.storage.listing`)."""
    yield from _files_directly_in(fs, root, "")
    for child in list_children(fs, root):
        if not child.is_dir:
            continue
        if child.name != "data":
            yield from iter_listing(fs, root, child.name + "/")
            continue
        yield from _files_directly_in(fs, root, "data/")
        for data_slice in list_children(fs, root + "/data"):
            if data_slice.is_dir:
                yield from iter_listing(fs, root, f"data/{data_slice.name}/")


def _files_directly_in(fs: pafs.FileSystem, root: str, relative: str) -> Iterator[pa.RecordBatch]:
    for batch in iter_root_files(fs, root + "/" + relative if relative else root):
        if relative:
            addresses = pc.binary_join_element_wise(relative, batch.column("address"), "")
            batch = pa.RecordBatch.from_arrays([addresses, *batch.columns[1:]], schema=batch.schema)
        yield batch


def inventory_rows(listed: pa.RecordBatch, bucket: str, key_prefix: str) -> pa.RecordBatch:
    """:data:`INVENTORY_SCHEMA` rows of ``listed`` namespace files (no ETag: a listing has none)."""
    n = listed.num_rows
    return pa.RecordBatch.from_arrays(
        [
            pa.array([bucket] * n, pa.string()),
            pc.binary_join_element_wise(key_prefix, listed.column("address"), ""),
            listed.column("size"),
            listed.column("last_modified"),
            pa.nulls(n, pa.string()),
            pa.nulls(n, pa.string()),
        ],
        schema=INVENTORY_SCHEMA,
    )


def write_inventory(
    rows: pa.Table,
    namespace: StorageLocation,
    options: StorageOptions,
    destination: StorageLocation,
    *,
    flavour: Flavour,
    format: FileFormat,
    snapshot_time: datetime,
    rows_per_file: int,
) -> str:
    """Write ``rows`` of ``namespace`` as one delivery under ``destination``; return its manifest path."""
    fs, path = filesystem_for(destination, options)
    if flavour == "s3":
        return write_s3_delivery(
            fs, path, namespace.container or LOCAL_SOURCE, CONFIG_ID, snapshot_time, rows,
            format=format, rows_per_file=rows_per_file,
            # on an object store, manifest keys are relative to the bucket, as S3 writes them
            bucket_root=None if destination.kind == "local" else destination.container,
        )  # fmt: skip
    return write_azure_delivery(
        fs, path, RULE_NAME, snapshot_time, rows,
        format=_AZURE_FORMATS[format], rows_per_file=rows_per_file,
        account=namespace.account or namespace.container,
    )  # fmt: skip
