"""Write S3 Inventory deliveries the way S3 does, for tests and ``generate``.

Data files first, then ``manifest.json``, then ``manifest.checksum`` (the completion marker), so a
reader never sees a complete-looking delivery whose files are still being written. CSV keys are
form-encoded (a space is ``+``, a ``+`` is ``%2B``) and columns CamelCase as S3 writes them; Parquet
and ORC keys are plain and their columns snake_case.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import uuid
from datetime import datetime, timezone
from urllib.parse import quote_plus

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.orc as pa_orc
import pyarrow.parquet as pq

from lakefs_gc.inventory.delivery import FileFormat
from lakefs_gc.inventory.s3.manifest import CHECKSUM, MANIFEST, join

_CSV_NAMES = {
    "bucket": "Bucket",
    "key": "Key",
    "version_id": "VersionId",
    "is_latest": "IsLatest",
    "is_delete_marker": "IsDeleteMarker",
    "size": "Size",
    "last_modified": "LastModifiedDate",
    "etag": "ETag",
    "encryption": "EncryptionStatus",
}
_SNAKE_NAMES = {
    **{k: k for k in _CSV_NAMES},
    "last_modified": "last_modified_date",
    "etag": "e_tag",
    "encryption": "encryption_status",
}
_ORC_TYPES = {pa.string(): "string", pa.bool_(): "boolean", pa.int64(): "bigint"}
_PARQUET_TYPES = {
    pa.string(): "binary {name} (UTF8)",
    pa.bool_(): "boolean {name}",
    pa.int64(): "int64 {name}",
}
_EXT = {"csv": ".csv.gz", "parquet": ".parquet", "orc": ".orc"}


def write_delivery(
    fs: pafs.FileSystem,
    destination_path: str,
    source_bucket: str,
    config_id: str,
    snapshot_time: datetime,
    rows: pa.Table,
    *,
    format: FileFormat = "csv",
    rows_per_file: int = 100_000,
    bucket_root: str | None = None,
) -> str:
    """Write a complete delivery the way S3 does and return its manifest path.

    ``rows`` has the INVENTORY_SCHEMA columns, optionally plus ``version_id``, ``is_latest`` and
    ``is_delete_marker`` (then the delivery is a versioned one). ``bucket_root`` is the
    filesystem path of the destination bucket (default: ``destination_path``, i.e. no prefix);
    manifest keys are written relative to it.
    """
    root = bucket_root if bucket_root is not None else destination_path
    if not (destination_path + "/").startswith(root.rstrip("/") + "/"):
        raise ValueError(f"{destination_path} is not under bucket_root {root}")
    order = [c for c in _CSV_NAMES if c in rows.column_names and not _all_null(rows, c, "encryption")]
    table = _writable(rows.select(order))
    base = join(destination_path, source_bucket, config_id)
    files = []
    for start in range(0, max(table.num_rows, 1), rows_per_file):
        payload = _encode(table.slice(start, rows_per_file), format)
        path = join(base, "data", f"{uuid.uuid4()}{_EXT[format]}")
        _write_bytes(fs, path, payload)
        key = path[len(root.rstrip("/")) + 1 :]
        files.append({"key": key, "size": len(payload), "MD5checksum": _md5(payload)})
    manifest = {
        "sourceBucket": source_bucket,
        "destinationBucket": "arn:aws:s3:::" + root.rstrip("/").rsplit("/", 1)[-1],
        "version": "2016-11-30",
        "creationTimestamp": str(int(snapshot_time.timestamp() * 1000)),
        "fileFormat": {"csv": "CSV", "parquet": "Parquet", "orc": "ORC"}[format],
        "fileSchema": _file_schema(table, order, format),
        "files": files,
    }
    delivery_dir = join(base, snapshot_time.astimezone(timezone.utc).strftime("%Y-%m-%dT%H-%MZ"))
    raw = json.dumps(manifest).encode()
    _write_bytes(fs, join(delivery_dir, MANIFEST), raw)
    _write_bytes(fs, join(delivery_dir, CHECKSUM), (_md5(raw) + "\n").encode())
    return join(delivery_dir, MANIFEST)


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _write_bytes(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path, compression=None) as f:
        f.write(data)


def _all_null(rows: pa.Table, column: str, optional: str) -> bool:
    """An ``optional`` field without a value in any row is left out of the delivery, as S3 leaves
    out the fields an inventory is not configured with."""
    return column == optional and rows.column(column).null_count == rows.num_rows


def _writable(table: pa.Table) -> pa.Table:
    """Millisecond UTC timestamps, as S3 reports them."""
    i = table.schema.get_field_index("last_modified")
    if i >= 0:
        ts = pc.cast(table.column(i), pa.timestamp("ms", tz="UTC"), safe=False)
        table = table.set_column(i, "last_modified", ts)
    return table


def _encode(table: pa.Table, fmt: FileFormat) -> bytes:
    snake = table.rename_columns([_SNAKE_NAMES[c] for c in table.column_names])
    if fmt == "parquet":
        sink = pa.BufferOutputStream()
        pq.write_table(snake, sink, compression="snappy")
        return bytes(sink.getvalue().to_pybytes())
    if fmt == "orc":
        sink = pa.BufferOutputStream()
        pa_orc.write_table(snake, sink, compression="zlib")
        return bytes(sink.getvalue().to_pybytes())
    text = io.StringIO()
    writer = csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="\n")
    for rec in table.to_pylist():
        writer.writerow([_csv_value(c, rec[c]) for c in table.column_names])
    return gzip.compress(text.getvalue().encode(), mtime=0)


def _csv_value(column: str, value: object) -> str:
    if value is None:
        return ""
    if column == "key":
        return quote_plus(str(value), safe="/")  # S3 form-encodes keys: ' ' -> +, '+' -> %2B
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return (
            value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.")
            + f"{value.microsecond // 1000:03d}Z"
        )
    return str(value)


def _file_schema(table: pa.Table, order: list[str], fmt: FileFormat) -> str:
    """``fileSchema`` as S3 spells it: a CSV column list, an ORC struct or a Parquet message."""
    if fmt == "csv":
        return ", ".join(_CSV_NAMES[c] for c in order)
    types = {c: table.schema.field(c).type for c in order}
    if fmt == "orc":
        parts = [
            f"{_SNAKE_NAMES[c]}:{'timestamp' if pa.types.is_timestamp(t) else _ORC_TYPES[t]}"
            for c, t in types.items()
        ]
        return "struct<" + ",".join(parts) + ">"
    fields = []
    for c, t in types.items():
        req = "required" if c in ("bucket", "key") else "optional"
        if pa.types.is_timestamp(t):
            fields.append(f"{req} int64 {_SNAKE_NAMES[c]} (TIMESTAMP_MILLIS);")
        else:
            fields.append(f"{req} " + _PARQUET_TYPES[t].format(name=_SNAKE_NAMES[c]) + ";")
    return "message s3.inventory { " + " ".join(fields) + "}"
