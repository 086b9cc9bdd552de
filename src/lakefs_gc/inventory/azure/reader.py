"""Check and read Azure Blob inventory data files (CSV, Parquet) as :data:`INVENTORY_SCHEMA` rows.

Azure publishes no per-file checksums, so sizes (and the columns each file holds) are all that is
verified before reading. Rows that are not live objects (old versions, soft-deleted blobs, snapshots,
HNS directories) are dropped, and duplicate rows, which Azure documents, are removed within a file.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lakefs_gc.inventory.azure.fields import (
    CONTENT_LENGTH,
    ETAG,
    FRACTION_RE,
    LAST_MODIFIED,
    NAME,
    TS,
    field,
    parse_time,
)
from lakefs_gc.inventory.delivery import (
    INVENTORY_SCHEMA,
    DataFile,
    Delivery,
    InventoryError,
    check_data_files,
    fetched,
)


def verify_delivery(fs: pafs.FileSystem, delivery: Delivery) -> None:
    """Every data file exists with the manifest's size, and CSV headers / Parquet schemas hold its columns."""
    check_data_files(fs, delivery)
    for data_file in delivery.files:
        if data_file.format == "csv":
            _check_columns(delivery, data_file, _csv_header(fs, data_file.path))
        else:
            with fs.open_input_file(data_file.path) as f:
                _check_columns(delivery, data_file, pq.read_schema(f).names)


def read_data_file(
    fs: pafs.FileSystem, delivery: Delivery, data_file: DataFile, *, etags: bool = True
) -> Iterator[pa.RecordBatch]:
    """The current, non-deleted base blobs of one data file as :data:`INVENTORY_SCHEMA` batches.

    Duplicate rows (which Azure documents) are removed within the file; a whole file is read into
    memory for that. Deduplicate across files of a delivery downstream. ``etags``: the ETag column
    is converted, else left null (as the S3 reader's; an Azure ETag never proves the bytes' MD5).
    """
    try:
        with fetched(fs, data_file) as source:  # one download in large reads (no MD5 to check)
            table = _read_raw(source.fs, source.path, data_file)
    except (pa.ArrowInvalid, OSError) as e:
        raise InventoryError(f"{data_file.path}: cannot read {data_file.format}: {e}") from e
    _check_columns(delivery, data_file, table.column_names)
    table = _only_current(table)
    out = _to_inventory(table, data_file.path, etags=etags)
    yield from _dedupe(out).to_batches()


def _read_raw(fs: pafs.FileSystem, path: str, data_file: DataFile) -> pa.Table:
    """``data_file``'s table, read from ``path`` on ``fs`` (its local copy, or itself)."""
    if data_file.format == "parquet":
        with fs.open_input_file(path) as f:
            return pq.read_table(f)
    header = _csv_header(fs, path, name=data_file.path)
    with fs.open_input_stream(path) as f:
        return pacsv.read_csv(
            f,
            read_options=pacsv.ReadOptions(use_threads=True),
            convert_options=pacsv.ConvertOptions(
                column_types={name: pa.string() for name in header}, strings_can_be_null=False
            ),
        )


def _csv_header(fs: pafs.FileSystem, path: str, *, name: str | None = None) -> list[str]:
    """The CSV's column names; errors name the file as ``name`` (default: ``path``)."""
    try:
        with fs.open_input_stream(path) as f:
            reader = pacsv.open_csv(f, read_options=pacsv.ReadOptions(block_size=1 << 20))
            return list(reader.schema.names)
    except (pa.ArrowInvalid, OSError) as e:
        raise InventoryError(f"{name or path}: cannot read the CSV header: {e}") from e


def _check_columns(delivery: Delivery, data_file: DataFile, names: Sequence[str]) -> None:
    if sorted(names) != sorted(delivery.columns):
        raise InventoryError(
            f"{data_file.path}: columns {list(names)} do not match the schemaFields "
            f"{list(delivery.columns)} of {delivery.manifest_path}"
        )


def _truthy(column: pa.ChunkedArray) -> pa.ChunkedArray:
    if pa.types.is_boolean(column.type):
        return column
    text = pc.utf8_lower(pc.utf8_trim_whitespace(column.cast(pa.string())))
    return pc.equal(text, "true")


def _only_current(table: pa.Table) -> pa.Table:
    """Drop non-current versions, soft-deleted blobs, snapshots and HNS directories: not live objects."""
    names = table.column_names
    conditions = []
    if "IsCurrentVersion" in names:  # empty on blobs without versions: those are current
        col = table["IsCurrentVersion"]
        empty = pc.equal(pc.utf8_length(col.cast(pa.string())), 0)
        conditions.append(pc.or_kleene(pc.fill_null(_truthy(col), False), pc.fill_null(empty, True)))
    for flag in ("Deleted", "hdi_isfolder"):
        if flag in names:
            conditions.append(pc.invert(pc.fill_null(_truthy(table[flag]), False)))
    if "Snapshot" in names:
        snap = pc.fill_null(pc.utf8_length(table["Snapshot"].cast(pa.string())), 0)
        conditions.append(pc.equal(snap, 0))
    if not conditions:
        return table
    keep = conditions[0]
    for condition in conditions[1:]:
        keep = pc.and_(keep, condition)
    return table.filter(keep)


def _to_inventory(table: pa.Table, path: str, *, etags: bool = True) -> pa.Table:
    cols = table.column_names
    name = table[field(cols, NAME) or "Name"].cast(pa.string())
    _check_rows(path, "Name", pc.invert(pc.fill_null(pc.match_substring_regex(name, r"^[^/]+/."), False)))
    parts = pc.split_pattern(name, "/", max_splits=1)
    bucket = pc.list_element(parts, 0)
    key = pc.list_element(parts, 1)
    size = _sizes(table[field(cols, CONTENT_LENGTH) or ""], path)
    modified = _times(table[field(cols, LAST_MODIFIED) or ""], path)
    etag_name = field(cols, ETAG) if etags else None
    if etag_name is None:
        etag = pa.nulls(table.num_rows, pa.string())
    else:
        etag = pc.utf8_trim(table[etag_name].cast(pa.string()), '"')
    encryption = pa.nulls(table.num_rows, pa.string())  # S3's field; Azure encrypts every blob alike
    return pa.Table.from_arrays([bucket, key, size, modified, etag, encryption], schema=INVENTORY_SCHEMA)


def _check_rows(path: str, column: str, bad: pa.ChunkedArray | pa.Array) -> None:
    """Raise naming the first bad data row (1-based, header not counted) of ``column``."""
    index = pc.index(bad, True).as_py()
    if index >= 0:
        raise InventoryError(f"{path}: row {index + 1}: unparsable {column}")


def _sizes(column: pa.ChunkedArray, path: str) -> pa.ChunkedArray:
    if pa.types.is_integer(column.type):
        _check_rows(path, "Content-Length", pc.is_null(column))
        return column.cast(pa.int64())
    text = pc.utf8_trim_whitespace(column.cast(pa.string()))
    valid = pc.fill_null(pc.match_substring_regex(text, r"^\d{1,18}$"), False)
    _check_rows(path, "Content-Length", pc.invert(valid))
    return text.cast(pa.int64())


def _times(column: pa.ChunkedArray, path: str) -> pa.ChunkedArray:
    if pa.types.is_timestamp(column.type):
        _check_rows(path, "Last-Modified", pc.is_null(column))
        if column.type.tz is None:
            column = pc.assume_timezone(column, "UTC")
        return column.cast(TS)
    text = pc.replace_substring_regex(pc.utf8_trim_whitespace(column.cast(pa.string())), FRACTION_RE, r"\1")
    try:
        parsed: pa.ChunkedArray = text.cast(TS)
        _check_rows(path, "Last-Modified", pc.is_null(parsed))
        return parsed
    except pa.ArrowInvalid:
        pass
    values = []  # slow path: find the bad row, or accept what only Python parses
    for i, value in enumerate(text.to_pylist()):
        parsed_one = parse_time(value) if value else None
        if parsed_one is None:
            raise InventoryError(f"{path}: row {i + 1}: unparsable Last-Modified {value!r}")
        values.append(parsed_one)
    return pa.chunked_array([pa.array(values, TS)])


def _dedupe(table: pa.Table) -> pa.Table:
    if table.num_rows == 0:
        return table
    ones = pa.repeat(pa.scalar(1, pa.int64()), table.num_rows)
    rows = pc.subtract(pc.cumulative_sum(ones), 1)  # 0 .. n-1, without a Python range
    indexed = table.append_column("_row", rows)
    first = indexed.group_by(["bucket", "key"], use_threads=False).aggregate([("_row", "min")])
    kept = first["_row_min"]
    return table.take(kept.take(pc.sort_indices(kept)))
