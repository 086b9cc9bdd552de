"""The ground-truth manifest and, without physical objects, the inventory that stands for them.

Both are streamed from the ledger's groups: a batch of rows is built, written and dropped, so
their memory does not depend on the number of objects. The manifest is a directory of parquet
parts (``part-NNNNN.parquet``, row groups of :data:`BATCH_ROWS`); the inventory is one S3
Inventory delivery in S3's layout (``<dest>/<source bucket>/<config id>/data/…`` then the
manifest and its checksum, last), Parquet or gzip CSV with form-encoded keys, listing every
object of the namespace as S3 Inventory would: the data objects, and ``_lakefs/``'s files.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote_plus

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakefs_gc.inventory.delivery import Delivery
from lakefs_gc.inventory.generate import CONFIG_ID, LOCAL_SOURCE, inventory_rows
from lakefs_gc.inventory.s3 import writer as s3_writer
from lakefs_gc.inventory.s3.manifest import CHECKSUM, MANIFEST, join
from lakefs_gc.inventory.s3.reader import read_data_file
from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
from lakefs_gc.storage.listing import iter_listing
from lakefs_gc.storage.locations import StorageLocation
from lakefs_gc.testing.synth.ledger import Group
from lakefs_gc.testing.synth.objects import Objects
from lakefs_gc.testing.synth.spec import InventoryFormat

MANIFEST_SCHEMA = pa.schema(
    [("address", pa.string()), ("size", pa.int64()), ("last_modified", pa.timestamp("s", tz="UTC")),
     ("kind", pa.string()), ("garbage", pa.bool_())]
)  # fmt: skip
BATCH_ROWS = 50_000
PART_ROWS = 1_000_000
_INVENTORY_COLUMNS = ["bucket", "key", "size", "last_modified", "etag", "encryption"]
_INVENTORY_SCHEMA = pa.schema(
    [("bucket", pa.string()), ("key", pa.string()), ("size", pa.int64()),
     ("last_modified", pa.timestamp("ms", tz="UTC")), ("etag", pa.string()), ("encryption", pa.string())]
)  # fmt: skip
#: S3's default encryption since 2023: every object's single-part ETag is the MD5 of its bytes
ENCRYPTION = "SSE-S3"


@dataclass(frozen=True)
class InventoryTarget:
    destination: StorageLocation
    format: InventoryFormat = "parquet"
    rows_per_file: int = 100_000  # S3 writes bigger files; smaller ones keep memory flat


@dataclass
class Counts:
    physical: int = 0
    garbage: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


def write_outputs(
    groups: list[Group], live: Callable[[Group], bool], objects: Objects, manifest: Path | None,
    inventory: tuple[InventoryTarget, StorageLocation, StorageOptions] | None,
    snapshot: datetime,
) -> tuple[Counts, str]:  # fmt: skip
    """Write the manifest (and the inventory); return the counts and the inventory manifest path."""
    counts = Counts()
    parts = _ManifestParts(manifest) if manifest is not None else None
    delivery = _Delivery(*inventory, snapshot) if inventory is not None else None
    for group in groups:
        if group.count <= 0:
            continue
        garbage = not live(group)
        key = f"{group.kind}:{'garbage' if garbage else 'live'}"
        counts.by_kind[key] = counts.by_kind.get(key, 0) + group.count
        counts.physical += group.count
        counts.garbage += group.count if garbage else 0
        end = group.first_seq + group.count
        for start in range(group.first_seq, end, BATCH_ROWS):
            seqs = range(start, min(end, start + BATCH_ROWS))
            chunk = [objects.address(s, group.created) for s in seqs]
            sizes = pa.array([objects.size(s) for s in seqs], pa.int64())
            if parts is not None:
                parts.add(chunk, sizes, group.created, group.kind, garbage)
            if delivery is not None:
                delivery.add(chunk, sizes, objects, group.created)
    if parts is not None:
        parts.close()
    location = delivery.finish() if delivery is not None else ""
    return counts, location


def next_delivery(
    previous: Delivery,
    target: InventoryTarget,
    namespace: StorageLocation,
    options: StorageOptions,
    snapshot: datetime,
    *,
    deleted: pa.Array,
) -> str:
    """The delivery S3 would write next, at ``snapshot``, after the objects ``deleted``
    (namespace-relative addresses: a sweep's) were deleted from ``namespace``: the rows of the
    ``previous`` delivery (on ``target``'s store, read and verified by the product's reader)
    without them, the ``data/`` objects modified since its snapshot (written through lakeFS
    since), and ``_lakefs/`` as listed now. Streamed a data file at a time, as the synthesizer
    writes; the deleted addresses are held in memory (a Python set). Returns the new manifest's path."""
    delivery = _Delivery(target, namespace, options, snapshot)
    since = pa.scalar(previous.snapshot_time, pa.timestamp("ms", tz="UTC"))
    # a Python set, built once: pc.is_in hashes its value set again on every call, which at 1M
    # deleted addresses cost 0.26 s per 100K-row batch, against 0.03 s for these lookups
    gone = set(pc.binary_join_element_wise(delivery.key_prefix, deleted.cast(pa.string()), "").to_pylist())
    metadata = delivery.key_prefix + "_lakefs/"
    for data_file in previous.files:
        for batch in read_data_file(delivery.fs, previous, data_file):
            rows = (
                pa.Table.from_batches([batch]).select(_INVENTORY_COLUMNS).cast(_INVENTORY_SCHEMA, safe=False)
            )
            keys = rows.column("key")
            kept = pa.array([k not in gone for k in keys.to_pylist()], pa.bool_())
            delivery.add_rows(rows.filter(pc.and_(kept, pc.invert(pc.starts_with(keys, metadata)))))
    ns_fs, root = filesystem_for(namespace, options)
    for listed in iter_listing(ns_fs, root, "data/"):
        rows = inventory_rows(listed, delivery.bucket, delivery.key_prefix)
        written = pa.Table.from_batches([rows]).cast(_INVENTORY_SCHEMA, safe=False)
        delivery.add_rows(written.filter(pc.greater(written.column("last_modified"), since)))
    return delivery.finish()


class _ManifestParts:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.glob("part-*.parquet"):
            old.unlink()
        self.directory = directory
        self.part = 0
        self.rows = 0
        self.buffer: list[pa.RecordBatch] = []
        self.buffered = 0
        self.writer: pq.ParquetWriter | None = None

    def add(self, addresses: list[str], sizes: pa.Array, created: int, kind: str, garbage: bool) -> None:
        n = len(addresses)
        stamp = pa.scalar(created, pa.timestamp("s", tz="UTC"))
        self.buffer.append(pa.record_batch(
            [pa.array(addresses, pa.string()), sizes,
             pa.repeat(stamp, n), pa.repeat(pa.scalar(kind, pa.string()), n),
             pa.repeat(pa.scalar(garbage, pa.bool_()), n)],
            schema=MANIFEST_SCHEMA,
        ))  # fmt: skip
        self.buffered += n
        if self.buffered >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self.buffer:
            return
        if self.writer is None:
            path = self.directory / f"part-{self.part:05d}.parquet"
            self.writer = pq.ParquetWriter(path, MANIFEST_SCHEMA, compression="zstd")
        self.writer.write_table(pa.Table.from_batches(self.buffer, schema=MANIFEST_SCHEMA))
        self.rows += self.buffered
        self.buffer, self.buffered = [], 0
        if self.rows >= PART_ROWS:
            self.writer.close()
            self.writer, self.rows, self.part = None, 0, self.part + 1

    def close(self) -> None:
        self._flush()
        if self.writer is not None:
            self.writer.close()
        elif self.part == 0:  # no objects at all: one empty part keeps the schema readable
            pq.write_table(MANIFEST_SCHEMA.empty_table(), self.directory / "part-00000.parquet")


class _Delivery:
    """One S3 Inventory delivery, written a data file at a time (``write_delivery``'s layout and
    encodings, from :mod:`lakefs_gc.inventory.s3.writer`, for rows that do not fit in memory)."""

    def __init__(
        self, target: InventoryTarget, namespace: StorageLocation, options: StorageOptions, snapshot: datetime
    ) -> None:
        self.target, self.namespace, self.options, self.snapshot = target, namespace, options, snapshot
        self.fs, self.root = filesystem_for(target.destination, options)
        ns_key = namespace.key.strip("/")
        self.key_prefix = ns_key + "/" if ns_key else ""
        self.quoted_prefix = quote_plus(self.key_prefix, safe="/")
        self.bucket = namespace.container
        source = namespace.container or LOCAL_SOURCE
        self.base = join(self.root, source, CONFIG_ID)
        self.bucket_root = self.root if target.destination.kind == "local" else target.destination.container
        self.files: list[dict[str, object]] = []
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0

    def add(self, addresses: list[str], sizes: pa.Array, objects: Objects, created: int) -> None:
        n = len(addresses)
        etags = [objects.etag(a) for a in addresses]
        keys = [self.key_prefix + a for a in addresses]
        self.add_rows(pa.record_batch(
            [pa.repeat(pa.scalar(self.bucket, pa.string()), n), pa.array(keys, pa.string()),
             sizes,
             pa.repeat(pa.scalar(created * 1000, pa.timestamp("ms", tz="UTC")), n),
             pa.array(etags, pa.string()), pa.repeat(pa.scalar(ENCRYPTION, pa.string()), n)],
            schema=_INVENTORY_SCHEMA,
        ))  # fmt: skip

    def add_rows(self, rows: pa.RecordBatch | pa.Table) -> None:
        """Inventory rows as they are (:data:`_INVENTORY_SCHEMA`)."""
        if not rows.num_rows:
            return
        self.pending.extend(rows.to_batches() if isinstance(rows, pa.Table) else [rows])
        self.pending_rows += rows.num_rows
        if self.pending_rows >= self.target.rows_per_file:
            self._write_file()

    def finish(self) -> str:
        for batch in self._metadata_rows():
            self.pending.append(batch)
            self.pending_rows += batch.num_rows
        self._write_file()
        sample = pa.Table.from_batches([], schema=_INVENTORY_SCHEMA)
        manifest = {
            "sourceBucket": self.namespace.container or LOCAL_SOURCE,
            "destinationBucket": "arn:aws:s3:::" + self.bucket_root.rstrip("/").rsplit("/", 1)[-1],
            "version": "2016-11-30",
            "creationTimestamp": str(int(self.snapshot.timestamp() * 1000)),
            "fileFormat": {"csv": "CSV", "parquet": "Parquet"}[self.target.format],
            "fileSchema": s3_writer._file_schema(sample, _INVENTORY_COLUMNS, self.target.format),
            "files": self.files,
        }
        delivery_dir = join(self.base, self.snapshot.astimezone(timezone.utc).strftime("%Y-%m-%dT%H-%MZ"))
        raw = json.dumps(manifest).encode()
        self._write(join(delivery_dir, MANIFEST), raw)
        self._write(join(delivery_dir, CHECKSUM), (hashlib.md5(raw).hexdigest() + "\n").encode())
        return join(delivery_dir, MANIFEST)

    def _metadata_rows(self) -> Iterator[pa.RecordBatch]:
        """``_lakefs/`` as listed now (ranges, metaranges, the repository marker)."""
        fs, root = filesystem_for(self.namespace, self.options)
        for batch in iter_listing(fs, root, "_lakefs/"):
            n = batch.num_rows
            keys = [self.key_prefix + str(a) for a in batch.column("address").to_pylist()]
            stamps = batch.column("last_modified").cast(pa.timestamp("ms", tz="UTC"), safe=False)
            yield pa.record_batch(
                [pa.repeat(pa.scalar(self.bucket, pa.string()), n), pa.array(keys, pa.string()),
                 batch.column("size"), stamps, pa.nulls(n, pa.string()),
                 pa.repeat(pa.scalar(ENCRYPTION, pa.string()), n)],
                schema=_INVENTORY_SCHEMA,
            )  # fmt: skip

    def _write_file(self) -> None:
        """Flush the pending rows as data files of at most ``rows_per_file`` rows."""
        table = pa.Table.from_batches(self.pending, schema=_INVENTORY_SCHEMA)
        self.pending, self.pending_rows = [], 0
        if table.num_rows == 0 and self.files:
            return
        payload = self._encode(table)
        name = f"{uuid.uuid4()}{'.csv.gz' if self.target.format == 'csv' else '.parquet'}"
        path = join(self.base, "data", name)
        self._write(path, payload)
        key = (
            path[len(self.bucket_root.rstrip("/")) + 1 :]
            if self.target.destination.kind == "local"
            else (path.split("/", 1)[1])
        )
        self.files.append({"key": key, "size": len(payload), "MD5checksum": hashlib.md5(payload).hexdigest()})

    def _encode(self, table: pa.Table) -> bytes:
        if self.target.format == "parquet":
            snake = table.rename_columns([s3_writer._SNAKE_NAMES[c] for c in table.column_names])
            sink = pa.BufferOutputStream()
            pq.write_table(snake, sink, compression="snappy")
            return bytes(sink.getvalue().to_pybytes())
        text = io.StringIO()
        out = csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="\n")
        columns = [table.column(c).to_pylist() for c in _INVENTORY_COLUMNS]
        for bucket, key, size, modified, etag, encryption in zip(*columns, strict=True):
            out.writerow([
                bucket or "", self._quoted(key), str(size), s3_writer._csv_value("last_modified", modified),
                etag or "", encryption or "",
            ])  # fmt: skip
        return gzip.compress(text.getvalue().encode(), mtime=0)

    def _quoted(self, key: str) -> str:
        """S3 form-encodes CSV keys; data keys are plain after the namespace prefix."""
        if key.startswith(self.key_prefix) and key[len(self.key_prefix) :].startswith("data/"):
            return self.quoted_prefix + key[len(self.key_prefix) :]
        return quote_plus(key, safe="/")

    def _write(self, path: str, data: bytes) -> None:
        self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with self.fs.open_output_stream(path, compression=None) as f:
            f.write(data)
