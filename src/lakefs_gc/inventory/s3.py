"""Amazon S3 Inventory: find, verify and read deliveries; write deliveries for tests and ``generate``.

Everything works on a :class:`pyarrow.fs.FileSystem` and paths inside it, so the same code runs
on local disk, S3 (``bucket/key`` paths) or Azure (``container/blob`` paths).

Layout (reference/cloud-formats.md §1.2)::

    <dest>/<source-bucket>/<config-id>/YYYY-MM-DDTHH-MMZ/manifest.json
    <dest>/<source-bucket>/<config-id>/YYYY-MM-DDTHH-MMZ/manifest.checksum   (completion marker)
    <dest>/<source-bucket>/<config-id>/data/<uuid>.csv.gz | .parquet | .orc

Mapping data-file keys to filesystem paths: the manifest lists data files by their key in the
destination *bucket* (e.g. ``inv/src/cfg/data/x.csv.gz`` when the destination prefix is ``inv``),
while callers only give us a path inside the filesystem. The directory holding the
``<source-bucket>`` directory of a manifest (``<dest>`` above) is known from the layout; the key's
segments before its ``<source-bucket>`` segment are the destination prefix, which must be the
trailing segments of ``<dest>``. The data file's path is therefore ``<dest>/<key after the
prefix>``. A caller can instead pass ``bucket_root`` (the filesystem path of the destination
bucket), and then the path is simply ``<bucket_root>/<key>``.

Safety: a delivery is complete only when ``manifest.checksum`` exists and matches the MD5 of
``manifest.json``; without it the delivery is *pending* (not an error, not an empty inventory).
Every data file's MD5 is verified before any of its rows are yielded.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import re
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.fs as pafs
import pyarrow.orc as pa_orc
import pyarrow.parquet as pq

from lakefs_gc.inventory.delivery import (
    INVENTORY_SCHEMA,
    DataFile,
    Delivery,
    DiscoveryResult,
    FileFormat,
    InventoryError,
    check_data_files,
)

MANIFEST = "manifest.json"
CHECKSUM = "manifest.checksum"
_DELIVERY_DIR = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}-\d{2}Z$")
_FORMATS: dict[str, FileFormat] = {"csv": "csv", "parquet": "parquet", "orc": "orc"}
_READ_CHUNK = 8 * 1024 * 1024

# Normalised column name (lower case, no underscores) -> INVENTORY_SCHEMA / filter column.
# CSV uses CamelCase (``LastModifiedDate``), ORC/Parquet snake_case (``last_modified_date``).
_WANTED = {
    "bucket": "bucket",
    "key": "key",
    "size": "size",
    "lastmodifieddate": "last_modified",
    "etag": "etag",
    "islatest": "is_latest",
    "isdeletemarker": "is_delete_marker",
}
_REQUIRED = ("bucket", "key", "last_modified")
_VERSION_COLUMNS = {"versionid", "islatest", "isdeletemarker"}


def _norm(name: str) -> str:
    return name.replace("_", "").lower()


def _join(*parts: str) -> str:
    return "/".join(p.strip("/") if i else p.rstrip("/") for i, p in enumerate(parts) if p)


# --------------------------------------------------------------------------------------------
# discovery


def _list_dirs(fs: pafs.FileSystem, path: str) -> list[str]:
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return sorted(i.path for i in infos if i.type == pafs.FileType.Directory)


def _delivery_dirs(fs: pafs.FileSystem, destination_path: str) -> Iterator[str]:
    """``<dest>/<src>/<cfg>/<timestamp>`` directories; never descends into ``data/`` or ``hive/``."""
    for src in _list_dirs(fs, destination_path):
        for cfg in _list_dirs(fs, src):
            for d in _list_dirs(fs, cfg):
                if _DELIVERY_DIR.match(d.rsplit("/", 1)[-1]):
                    yield d


def discover(fs: pafs.FileSystem, destination_path: str, *, verify_data: bool = False) -> DiscoveryResult:
    """Find every delivery under ``destination_path`` and classify it.

    A delivery is complete when its checksum matches, its manifest parses and every data file
    exists with the listed size. ``verify_data=True`` also reads every data file (MD5 and rows),
    which costs a full read of the inventory; otherwise those checks happen in
    :func:`read_data_file`.
    """
    result = DiscoveryResult()
    for d in _delivery_dirs(fs, destination_path):
        names = {
            i.path.rsplit("/", 1)[-1]: i
            for i in fs.get_file_info(pafs.FileSelector(d))
            if i.type == pafs.FileType.File
        }
        manifest_path = _join(d, MANIFEST)
        if MANIFEST not in names:
            if CHECKSUM in names:
                error = InventoryError(f"{_join(d, CHECKSUM)}: checksum present but {MANIFEST} missing")
                result.rejected.append(error.rejecting(manifest_path))
            continue
        if CHECKSUM not in names:
            result.pending.append(manifest_path)
            continue
        try:
            delivery = load_manifest(fs, manifest_path, verify_checksum=True)
            check_data_files(fs, delivery)
            if verify_data:
                for data_file in delivery.files:
                    for _ in read_data_file(fs, delivery, data_file):
                        pass
        except InventoryError as e:
            result.rejected.append(e.rejecting(manifest_path))
            continue
        result.complete.append(delivery)
    result.complete.sort(key=lambda x: (x.snapshot_time, x.id))
    return result


# --------------------------------------------------------------------------------------------
# manifest


def _read_bytes(fs: pafs.FileSystem, path: str) -> bytes:
    try:
        with fs.open_input_stream(path, compression=None) as f:
            data: bytes = f.read()
            return data
    except (OSError, pa.ArrowException) as e:
        raise InventoryError(f"{path}: cannot read: {e}") from e


def load_manifest(
    fs: pafs.FileSystem,
    manifest_path: str,
    *,
    verify_checksum: bool = True,
    bucket_root: str | None = None,
) -> Delivery:
    """Parse and (by default) verify ``manifest.json`` against ``manifest.checksum`` beside it."""
    raw = _read_bytes(fs, manifest_path)
    if verify_checksum:
        checksum_path = _join(manifest_path.rsplit("/", 1)[0], CHECKSUM)
        expected = _read_bytes(fs, checksum_path).decode("ascii", "replace").strip().lower()
        actual = hashlib.md5(raw).hexdigest()
        if expected != actual:
            raise InventoryError(
                f"{manifest_path}: MD5 {actual} does not match {checksum_path} ({expected!r})"
            )
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        return _parse_manifest(doc, manifest_path, bucket_root)
    except InventoryError:
        raise
    except (ValueError, KeyError, TypeError) as e:
        raise InventoryError(f"{manifest_path}: malformed manifest: {e!r}") from e


def _parse_manifest(doc: dict[str, Any], manifest_path: str, bucket_root: str | None) -> Delivery:
    fmt = _FORMATS.get(str(doc["fileFormat"]).lower())
    if fmt is None:
        raise InventoryError(f"{manifest_path}: unknown fileFormat {doc['fileFormat']!r}")
    columns = _schema_columns(fmt, str(doc["fileSchema"]))
    present = {_WANTED[_norm(c)] for c in columns if _norm(c) in _WANTED}
    missing = [c for c in _REQUIRED if c not in present]
    if missing:
        raise InventoryError(f"{manifest_path}: fileSchema lacks required columns {missing}")
    source = str(doc["sourceBucket"])
    snapshot = datetime.fromtimestamp(int(doc["creationTimestamp"]) / 1000, tz=timezone.utc)
    files = tuple(
        DataFile(
            path=_data_path(manifest_path, source, str(f["key"]), bucket_root),
            format=fmt,
            size=int(f["size"]) if f.get("size") is not None else None,
            md5=str(f["MD5checksum"]).lower() if f.get("MD5checksum") else None,
        )
        for f in doc["files"]
    )
    return Delivery(
        id=manifest_path,
        flavour="s3",
        manifest_path=manifest_path,
        snapshot_time=snapshot,
        source=source,
        columns=columns,
        files=files,
        versioned=any(_norm(c) in _VERSION_COLUMNS for c in columns),
    )


def _schema_columns(fmt: FileFormat, schema: str) -> tuple[str, ...]:
    """Column names in file order from ``fileSchema`` (CSV list, ORC struct, Parquet message)."""
    if fmt == "csv":
        names = [c.strip() for c in schema.split(",")]
    elif fmt == "orc":
        m = re.fullmatch(r"\s*struct<(.*)>\s*", schema, re.DOTALL)
        if m is None:
            raise ValueError(f"ORC fileSchema is not struct<...>: {schema!r}")
        names = [part.split(":", 1)[0].strip() for part in m.group(1).split(",")]
    else:
        m = re.fullmatch(r"\s*message\s+[^{]*\{(.*)\}\s*", schema, re.DOTALL)
        if m is None:
            raise ValueError(f"Parquet fileSchema is not message {{...}}: {schema!r}")
        names = [re.sub(r"\(.*\)", "", part).split()[-1] for part in m.group(1).split(";") if part.strip()]
    if not names or any(not n for n in names):
        raise ValueError(f"empty column name in fileSchema {schema!r}")
    return tuple(names)


def _data_path(manifest_path: str, source: str, key: str, bucket_root: str | None) -> str:
    if bucket_root is not None:
        return _join(bucket_root, key)
    dest_parts = manifest_path.split("/")[:-4]  # strip <src>/<cfg>/<ts>/manifest.json
    key_parts = key.split("/")
    for j, part in enumerate(key_parts[:-1]):
        prefix = key_parts[:j]
        if part == source and (not prefix or dest_parts[-len(prefix) :] == prefix):
            return "/".join([*dest_parts, *key_parts[j:]])
    raise InventoryError(
        f"{manifest_path}: data file key {key!r} is not under the destination prefix of this "
        f"manifest (pass bucket_root to map it)"
    )


# --------------------------------------------------------------------------------------------
# data files


def _verify_md5(fs: pafs.FileSystem, data_file: DataFile) -> None:
    if data_file.md5 is None:
        return
    digest = hashlib.md5()
    try:
        with fs.open_input_stream(data_file.path, compression=None) as f:
            while chunk := f.read(_READ_CHUNK):
                digest.update(chunk)
    except (OSError, pa.ArrowException) as e:
        raise InventoryError(f"{data_file.path}: cannot read: {e}") from e
    if digest.hexdigest() != data_file.md5:
        raise InventoryError(
            f"{data_file.path}: MD5 {digest.hexdigest()} does not match manifest {data_file.md5}"
        )


def read_data_file(fs: pafs.FileSystem, delivery: Delivery, data_file: DataFile) -> Iterator[pa.RecordBatch]:
    """Yield the file's current, non-delete-marker rows in :data:`INVENTORY_SCHEMA`.

    The MD5 is verified in a first streaming pass, before any row is yielded, so a corrupt file
    never contributes a partial listing.
    """
    _verify_md5(fs, data_file)
    if data_file.format == "csv":
        batches = _csv_batches(fs, delivery, data_file)
    elif data_file.format in ("parquet", "orc"):
        batches = _columnar_batches(fs, delivery, data_file)
    else:
        raise InventoryError(f"{data_file.path}: unknown format {data_file.format!r}")
    for batch in batches:
        if batch.num_rows:
            yield batch


def _selected(columns: tuple[str, ...] | list[str]) -> dict[str, str]:
    """Wanted target name -> column name in the file."""
    return {_WANTED[_norm(c)]: c for c in columns if _norm(c) in _WANTED}


def _csv_batches(fs: pafs.FileSystem, delivery: Delivery, data_file: DataFile) -> Iterator[pa.RecordBatch]:
    sel = _selected(delivery.columns)
    options = (
        pa_csv.ReadOptions(column_names=list(delivery.columns)),
        pa_csv.ParseOptions(),
        pa_csv.ConvertOptions(
            include_columns=list(sel.values()),
            column_types={c: pa.string() for c in delivery.columns},
        ),
    )
    row = 0
    try:
        with fs.open_input_stream(data_file.path, compression="gzip") as stream:
            try:
                reader = pa_csv.open_csv(stream, *options)
            except pa.ArrowInvalid as e:
                if "Empty CSV file" in str(e):  # MD5 already verified: an empty listing, not a truncation
                    return
                raise
            for batch in reader:
                cols = {t: batch.column(c) for t, c in sel.items()}
                yield _csv_convert(cols, data_file.path, row)
                row += batch.num_rows
    except InventoryError:
        raise
    except (OSError, pa.ArrowException, EOFError, gzip.BadGzipFile) as e:
        raise InventoryError(f"{data_file.path}: unparsable CSV after row {row}: {e}") from e


def _csv_convert(cols: dict[str, pa.Array], path: str, first_row: int) -> pa.RecordBatch:
    keys: list[str] = []
    for i, k in enumerate(cols["key"].to_pylist()):
        try:
            keys.append(unquote(k, errors="strict"))  # %20 is a space; a literal '+' stays '+'
        except UnicodeDecodeError as e:
            raise InventoryError(f"{path}: row {first_row + i + 1}: bad key encoding {k!r}") from e
    out: dict[str, pa.Array] = {"bucket": cols["bucket"], "key": pa.array(keys, pa.string())}
    if "etag" in cols:
        out["etag"] = pc.if_else(pc.equal(cols["etag"], ""), pa.scalar(None, pa.string()), cols["etag"])
    for name, typ in (("size", pa.int64()), ("last_modified", INVENTORY_SCHEMA.field(3).type)):
        if name not in cols:
            continue
        values = pc.if_else(pc.equal(cols[name], ""), pa.scalar(None, pa.string()), cols[name])
        try:
            out[name] = pc.cast(values, typ)
        except pa.ArrowInvalid:
            bad = _first_bad(values, typ)
            raise InventoryError(
                f"{path}: row {first_row + bad + 1}: unparsable {name} {values[bad].as_py()!r}"
            ) from None
    for flag in ("is_latest", "is_delete_marker"):
        if flag in cols:
            out[flag] = _csv_bool(cols[flag], flag, path, first_row)
    return _finish(out, path)


def _csv_bool(values: pa.Array, name: str, path: str, first_row: int) -> pa.Array:
    lower = pc.utf8_lower(values)
    valid = pc.is_in(lower, pa.array(["true", "false", ""]))
    if not pc.all(valid).as_py():
        bad = valid.to_pylist().index(False)
        raise InventoryError(f"{path}: row {first_row + bad + 1}: unparsable {name} {values[bad].as_py()!r}")
    return pc.equal(lower, "true")


def _first_bad(values: pa.Array, typ: pa.DataType) -> int:
    for i in range(len(values)):
        try:
            pc.cast(values.slice(i, 1), typ)
        except pa.ArrowInvalid:
            return i
    return 0


def _finish(cols: dict[str, Any], path: str) -> pa.RecordBatch:
    """Filter versioned rows (latest, not a delete marker) and shape to INVENTORY_SCHEMA."""
    n = len(cols["key"])
    mask = pa.array([True] * n)
    if "is_latest" in cols:
        mask = pc.and_(mask, pc.fill_null(cols["is_latest"], False))
    if "is_delete_marker" in cols:
        mask = pc.and_(mask, pc.invert(pc.fill_null(cols["is_delete_marker"], False)))
    arrays = [cols[f.name] if f.name in cols else pa.nulls(n, f.type) for f in INVENTORY_SCHEMA]
    try:
        batch = pa.RecordBatch.from_arrays(arrays, schema=INVENTORY_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise InventoryError(f"{path}: schema mismatch: {e}") from e
    return batch.filter(mask)


def _columnar_batches(
    fs: pafs.FileSystem, delivery: Delivery, data_file: DataFile
) -> Iterator[pa.RecordBatch]:
    try:
        with fs.open_input_file(data_file.path) as f:
            if data_file.format == "parquet":
                pf = pq.ParquetFile(f)
                names = pf.schema_arrow.names
                sel = _check_columns(delivery, data_file, names)
                raw: Iterator[pa.RecordBatch] = pf.iter_batches(columns=list(sel.values()))
            else:
                of = pa_orc.ORCFile(f)
                names = of.schema.names
                sel = _check_columns(delivery, data_file, names)
                raw = (of.read_stripe(i, columns=list(sel.values())) for i in range(of.nstripes))
            for batch in raw:
                yield _columnar_convert(batch, sel, data_file.path)
    except InventoryError:
        raise
    except (OSError, pa.ArrowException) as e:
        raise InventoryError(f"{data_file.path}: unreadable {data_file.format}: {e}") from e


def _check_columns(delivery: Delivery, data_file: DataFile, names: list[str]) -> dict[str, str]:
    if sorted(map(_norm, names)) != sorted(map(_norm, delivery.columns)):
        raise InventoryError(
            f"{data_file.path}: schema mismatch: file columns {names} differ from the manifest's "
            f"fileSchema {list(delivery.columns)}"
        )
    return _selected(names)


def _columnar_convert(batch: pa.RecordBatch, sel: dict[str, str], path: str) -> pa.RecordBatch:
    cols: dict[str, Any] = {t: batch.column(c) for t, c in sel.items()}
    try:
        for name in ("bucket", "key", "etag"):
            if name in cols:
                cols[name] = pc.cast(cols[name], pa.string())
        if "size" in cols:
            cols["size"] = pc.cast(cols["size"], pa.int64())
        cols["last_modified"] = _to_timestamp(cols["last_modified"])
        for flag in ("is_latest", "is_delete_marker"):
            if flag in cols:
                cols[flag] = pc.cast(cols[flag], pa.bool_())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise InventoryError(f"{path}: schema mismatch: {e}") from e
    return _finish(cols, path)


def _to_timestamp(values: pa.Array) -> pa.Array:
    """timestamp (any unit; naive means UTC), int64 epoch millis, or ISO-8601 string -> us UTC."""
    target = INVENTORY_SCHEMA.field("last_modified").type
    t = values.type
    if pa.types.is_timestamp(t):
        if t.tz is None:
            values = pc.assume_timezone(values, "UTC")
        return pc.cast(values, target)
    if pa.types.is_integer(t):
        return pc.cast(pc.cast(values, pa.int64()).cast(pa.timestamp("ms", tz="UTC")), target)
    return pc.cast(values, target)


# --------------------------------------------------------------------------------------------
# writer


_CSV_NAMES = {
    "bucket": "Bucket",
    "key": "Key",
    "version_id": "VersionId",
    "is_latest": "IsLatest",
    "is_delete_marker": "IsDeleteMarker",
    "size": "Size",
    "last_modified": "LastModifiedDate",
    "etag": "ETag",
}
_SNAKE_NAMES = {**{k: k for k in _CSV_NAMES}, "last_modified": "last_modified_date", "etag": "e_tag"}
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
    order = [c for c in _CSV_NAMES if c in rows.column_names]
    table = _writable(rows.select(order))
    base = _join(destination_path, source_bucket, config_id)
    files = []
    for start in range(0, max(table.num_rows, 1), rows_per_file):
        payload = _encode(table.slice(start, rows_per_file), format)
        path = _join(base, "data", f"{uuid.uuid4()}{_EXT[format]}")
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
    delivery_dir = _join(base, snapshot_time.astimezone(timezone.utc).strftime("%Y-%m-%dT%H-%MZ"))
    raw = json.dumps(manifest).encode()
    _write_bytes(fs, _join(delivery_dir, MANIFEST), raw)
    _write_bytes(fs, _join(delivery_dir, CHECKSUM), (_md5(raw) + "\n").encode())
    return _join(delivery_dir, MANIFEST)


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _write_bytes(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path, compression=None) as f:
        f.write(data)


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
        return quote(str(value), safe="/")  # S3 percent-encodes keys: ' ' -> %20, '+' -> %2B
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return (
            value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.")
            + f"{value.microsecond // 1000:03d}Z"
        )
    return str(value)


def _file_schema(table: pa.Table, order: list[str], fmt: FileFormat) -> str:
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
