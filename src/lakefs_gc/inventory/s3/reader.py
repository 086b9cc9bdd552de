"""Read S3 Inventory data files (gzipped CSV, Parquet, ORC) as :data:`INVENTORY_SCHEMA` rows.

Safety: every data file's MD5 is verified before any of its rows are yielded, so a corrupt file
never contributes a partial listing. Versioned inventories keep only the latest version of each
key that is not a delete marker: the rows are the objects that exist now.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote_plus

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.fs as pafs
import pyarrow.orc as pa_orc
import pyarrow.parquet as pq

from lakefs_gc.inventory.delivery import (
    CONTENT_COLUMNS,
    INVENTORY_SCHEMA,
    DataFile,
    Delivery,
    InventoryError,
    fetched,
)
from lakefs_gc.inventory.s3.columns import norm, selected

#: CSV bytes per parsed batch: about 60K rows of a typical inventory, as many as a Parquet batch
#: (pyarrow's 1 MiB default gives 7K-row batches, and every later step pays per batch)
_CSV_BLOCK = 8 * 1024 * 1024


def read_data_file(
    fs: pafs.FileSystem, delivery: Delivery, data_file: DataFile, *, etags: bool = True
) -> Iterator[pa.RecordBatch]:
    """Yield the file's current, non-delete-marker rows in :data:`INVENTORY_SCHEMA`.

    The MD5 is verified before any row is yielded, so a corrupt file never contributes a partial
    listing. The file is read from the store once (:func:`~lakefs_gc.storage.reads.read_once`):
    the bytes parsed are the bytes verified. ``etags``: parse the ETag and EncryptionStatus
    columns (:data:`~lakefs_gc.inventory.delivery.CONTENT_COLUMNS`), else leave them null.
    """
    with fetched(fs, data_file) as source:
        if data_file.format == "csv":
            batches = _csv_batches(source.fs, source.path, delivery, data_file, etags)
        elif data_file.format in ("parquet", "orc"):
            batches = _columnar_batches(source.fs, source.path, delivery, data_file, etags)
        else:
            raise InventoryError(f"{data_file.path}: unknown format {data_file.format!r}")
        for batch in batches:
            if batch.num_rows:
                yield batch


# --------------------------------------------------------------------------------------------
# CSV


def _csv_batches(
    fs: pafs.FileSystem, path: str, delivery: Delivery, data_file: DataFile, etags: bool
) -> Iterator[pa.RecordBatch]:
    sel = _wanted(selected(delivery.columns), etags)
    options = (
        pa_csv.ReadOptions(column_names=list(delivery.columns), block_size=_CSV_BLOCK),
        pa_csv.ParseOptions(),
        pa_csv.ConvertOptions(
            include_columns=list(sel.values()),
            column_types={c: pa.string() for c in delivery.columns},
        ),
    )
    row = 0
    try:
        with fs.open_input_stream(path, compression="gzip") as stream:
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
    keys = _decoded_keys(cols["key"], path, first_row)
    out: dict[str, pa.Array] = {"bucket": cols["bucket"], "key": keys}
    for name in ("etag", "encryption"):
        if name in cols:
            out[name] = pc.if_else(pc.equal(cols[name], ""), pa.scalar(None, pa.string()), cols[name])
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


def _decoded_keys(keys: pa.Array, path: str, first_row: int) -> pa.Array:
    """S3 form-encodes CSV keys: a space is ``+``, a literal ``+`` is ``%2B`` (``%20`` also decodes).

    This is the encoding of S3's event notifications too (see docs/formats/s3-inventory.md): read
    with ``unquote``, ``a+b`` would name a key that does not exist and ``a b`` would never be
    collected. Only keys with a ``%`` or a ``+`` are decoded (in Python, one by one); the others are
    their own decoding.
    """
    encoded = pc.match_substring_regex(keys, "[%+]")  # RE2 finds a literal faster than match_substring
    if not pc.any(encoded).as_py():
        return keys
    rows = pc.indices_nonzero(encoded).to_pylist()
    decoded: list[str] = []
    for i, k in zip(rows, keys.take(rows).to_pylist(), strict=True):
        try:
            decoded.append(unquote_plus(k, errors="strict"))
        except UnicodeDecodeError as e:
            raise InventoryError(f"{path}: row {first_row + i + 1}: bad key encoding {k!r}") from e
    return pc.replace_with_mask(keys, encoded, pa.array(decoded, pa.string()))


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
    mask: pa.Array | None = None  # None: every row (an unversioned inventory)
    if "is_latest" in cols:
        mask = pc.fill_null(cols["is_latest"], False)
    if "is_delete_marker" in cols:
        live = pc.invert(pc.fill_null(cols["is_delete_marker"], False))
        mask = live if mask is None else pc.and_(mask, live)
    arrays = [cols[f.name] if f.name in cols else pa.nulls(n, f.type) for f in INVENTORY_SCHEMA]
    try:
        batch = pa.RecordBatch.from_arrays(arrays, schema=INVENTORY_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise InventoryError(f"{path}: schema mismatch: {e}") from e
    return batch if mask is None else batch.filter(mask)


# --------------------------------------------------------------------------------------------
# Parquet and ORC


def _columnar_batches(
    fs: pafs.FileSystem, path: str, delivery: Delivery, data_file: DataFile, etags: bool
) -> Iterator[pa.RecordBatch]:
    try:
        with fs.open_input_file(path) as f:
            if data_file.format == "parquet":
                pf = pq.ParquetFile(f)
                names = pf.schema_arrow.names
                sel = _wanted(_check_columns(delivery, data_file, names), etags)
                raw: Iterator[pa.RecordBatch] = pf.iter_batches(columns=list(sel.values()))
            else:
                of = pa_orc.ORCFile(f)
                names = of.schema.names
                sel = _wanted(_check_columns(delivery, data_file, names), etags)
                raw = (of.read_stripe(i, columns=list(sel.values())) for i in range(of.nstripes))
            for batch in raw:
                yield _columnar_convert(batch, sel, data_file.path)
    except InventoryError:
        raise
    except (OSError, pa.ArrowException) as e:
        raise InventoryError(f"{data_file.path}: unreadable {data_file.format}: {e}") from e


def _check_columns(delivery: Delivery, data_file: DataFile, names: list[str]) -> dict[str, str]:
    if sorted(map(norm, names)) != sorted(map(norm, delivery.columns)):
        raise InventoryError(
            f"{data_file.path}: schema mismatch: file columns {names} differ from the manifest's "
            f"fileSchema {list(delivery.columns)}"
        )
    return selected(names)


def _wanted(sel: dict[str, str], etags: bool) -> dict[str, str]:
    """``sel`` without the content columns unless ``etags``: not parsing them saves a third of a
    Parquet file's decoding (32 hex digits per row), and they stay null."""
    return sel if etags else {t: c for t, c in sel.items() if t not in CONTENT_COLUMNS}


def _columnar_convert(batch: pa.RecordBatch, sel: dict[str, str], path: str) -> pa.RecordBatch:
    cols: dict[str, Any] = {t: batch.column(c) for t, c in sel.items()}
    try:
        for name in ("bucket", "key", "etag", "encryption"):
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
