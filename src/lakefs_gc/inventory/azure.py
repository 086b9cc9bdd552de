"""Azure Blob Storage inventory: find, verify and read deliveries; write them for tests.

Layout (reference/cloud-formats.md §2.2), relative to the destination container::

    YYYY/MM/DD/HH-MM-SS/<rule>/<rule>-manifest.json   written with "status": "Pending" when a run starts
    YYYY/MM/DD/HH-MM-SS/<rule>/<rule>-manifest.checksum   MD5 of the manifest; its creation marks completion
    <files[].blob>                                     data files, relative to the destination container

A delivery is complete only when the checksum exists and matches, the status is ``Succeeded`` and every
data file exists with the size the manifest lists (invariant 4: an incomplete inventory never reads as
"these objects do not exist"). Azure publishes no per-file checksums, so sizes are all that is verified.
All functions take a :class:`pyarrow.fs.FileSystem` and paths inside it, so they run on local disk and
on Azure alike.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import posixpath
import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Literal
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
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

_MANIFEST_RE = re.compile(r"^(\d{4})/(\d{2})/(\d{2})/(\d{2}-\d{2}-\d{2})/([^/]+)/([^/]+)-manifest\.json$")
_FORMATS: Mapping[str, FileFormat] = {"csv": "csv", "parquet": "parquet"}
# field names as schemaFields spell them (docs and ARM/SDK spellings); never hard-code one spelling
_NAME = ("Name",)
_LAST_MODIFIED = ("Last-Modified", "LastModified")
_CONTENT_LENGTH = ("Content-Length", "ContentLength")
_ETAG = ("ETag", "Etag")
_FRACTION_RE = r"(\.\d{6})\d+"  # Azure may write 7 fractional digits; pyarrow parses at most 6 (us)
_TS = pa.timestamp("us", tz="UTC")


def discover(fs: pafs.FileSystem, destination_path: str, *, rule_name: str | None = None) -> DiscoveryResult:
    """All deliveries under ``destination_path`` (the destination container's root), oldest first.

    A manifest without its checksum, or with ``"status": "Pending"``, is pending (the run may still be
    writing); anything else that fails verification is rejected with the file and the reason.
    """
    root = destination_path.rstrip("/")
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    present = {i.path: i for i in infos if i.type == pafs.FileType.File}
    complete: list[Delivery] = []
    pending: list[str] = []
    rejected: list[InventoryError] = []
    for path in sorted(present):
        match = _MANIFEST_RE.match(posixpath.relpath(path, root))
        if match is None or match.group(5) != match.group(6):
            continue
        if rule_name is not None and match.group(5) != rule_name:
            continue
        if path.removesuffix(".json") + ".checksum" not in present:
            pending.append(path)
            continue
        try:
            manifest = _read_verified_manifest(fs, path)
            if manifest.get("status") == "Pending":
                pending.append(path)
                continue
            delivery = _delivery_from(path, root, manifest)
            verify_delivery(fs, delivery)
        except InventoryError as e:
            rejected.append(e.rejecting(path))
            continue
        complete.append(delivery)
    return DiscoveryResult(complete, pending, rejected)


def load_manifest(fs: pafs.FileSystem, manifest_path: str) -> Delivery:
    """The delivery ``manifest_path`` describes, after checking its checksum and status.

    Raises :class:`InventoryError` if the run is not complete (no checksum, ``Pending``), failed, or the
    manifest is not understood. Does not look at the data files (see :func:`verify_delivery`).
    """
    manifest = _read_verified_manifest(fs, manifest_path)
    if manifest.get("status") == "Pending":
        raise InventoryError(f"{manifest_path}: inventory run is still pending")
    rel = "/".join(manifest_path.split("/")[-6:])
    if not _MANIFEST_RE.match(rel) or len(manifest_path) == len(rel):
        raise InventoryError(
            f"{manifest_path}: not at <container>/YYYY/MM/DD/HH-MM-SS/<rule>/<rule>-manifest.json"
        )
    return _delivery_from(manifest_path, manifest_path[: -len(rel) - 1], manifest)


def verify_delivery(fs: pafs.FileSystem, delivery: Delivery) -> None:
    """Every data file exists with the manifest's size, and CSV headers / Parquet schemas hold its columns."""
    check_data_files(fs, delivery)
    for data_file in delivery.files:
        if data_file.format == "csv":
            _check_columns(delivery, data_file, _csv_header(fs, data_file.path))
        else:
            with fs.open_input_file(data_file.path) as f:
                _check_columns(delivery, data_file, pq.read_schema(f).names)


def read_data_file(fs: pafs.FileSystem, delivery: Delivery, data_file: DataFile) -> Iterator[pa.RecordBatch]:
    """The current, non-deleted base blobs of one data file as :data:`INVENTORY_SCHEMA` batches.

    Duplicate rows (which Azure documents) are removed within the file; a whole file is read into
    memory for that. Deduplicate across files of a delivery downstream.
    """
    try:
        table = _read_raw(fs, data_file)
    except (pa.ArrowInvalid, OSError) as e:
        raise InventoryError(f"{data_file.path}: cannot read {data_file.format}: {e}") from e
    _check_columns(delivery, data_file, table.column_names)
    table = _only_current(table)
    out = _to_inventory(table, data_file.path)
    yield from _dedupe(out).to_batches()


def _read_raw(fs: pafs.FileSystem, data_file: DataFile) -> pa.Table:
    if data_file.format == "parquet":
        with fs.open_input_file(data_file.path) as f:
            return pq.read_table(f)
    header = _csv_header(fs, data_file.path)
    with fs.open_input_stream(data_file.path) as f:
        return pacsv.read_csv(
            f,
            read_options=pacsv.ReadOptions(use_threads=True),
            convert_options=pacsv.ConvertOptions(
                column_types={name: pa.string() for name in header}, strings_can_be_null=False
            ),
        )


def _csv_header(fs: pafs.FileSystem, path: str) -> list[str]:
    try:
        with fs.open_input_stream(path) as f:
            reader = pacsv.open_csv(f, read_options=pacsv.ReadOptions(block_size=1 << 20))
            return list(reader.schema.names)
    except (pa.ArrowInvalid, OSError) as e:
        raise InventoryError(f"{path}: cannot read the CSV header: {e}") from e


def _check_columns(delivery: Delivery, data_file: DataFile, names: Sequence[str]) -> None:
    if sorted(names) != sorted(delivery.columns):
        raise InventoryError(
            f"{data_file.path}: columns {list(names)} do not match the schemaFields "
            f"{list(delivery.columns)} of {delivery.manifest_path}"
        )


def _read_verified_manifest(fs: pafs.FileSystem, manifest_path: str) -> dict[str, Any]:
    checksum_path = manifest_path.removesuffix(".json") + ".checksum"
    try:
        with fs.open_input_stream(manifest_path) as f:
            body = f.read()
        with fs.open_input_stream(checksum_path) as f:
            promised = f.read().decode("ascii", errors="replace")
    except FileNotFoundError as e:
        raise InventoryError(f"{checksum_path}: missing, the inventory run is not complete") from e
    except OSError as e:
        raise InventoryError(f"{manifest_path}: cannot read manifest or checksum: {e}") from e
    if not _md5_matches(body, promised):
        raise InventoryError(f"{checksum_path}: does not match the MD5 of {manifest_path}")
    try:
        manifest = json.loads(body)
    except ValueError as e:
        raise InventoryError(f"{manifest_path}: not JSON: {e}") from e
    if not isinstance(manifest, dict):
        raise InventoryError(f"{manifest_path}: not a JSON object")
    return manifest


def _md5_matches(body: bytes, promised: str) -> bool:
    """Hex or base64: the checksum's encoding is not documented (reference §2.3), so accept both."""
    digest = hashlib.md5(body).digest()
    text = promised.strip().strip('"').strip()
    if text.lower() == digest.hex():
        return True
    try:
        return base64.b64decode(text, validate=True) == digest
    except (binascii.Error, ValueError):
        return False


def _delivery_from(manifest_path: str, root: str, manifest: Mapping[str, Any]) -> Delivery:
    def fail(reason: str) -> InventoryError:
        return InventoryError(f"{manifest_path}: {reason}")

    status = manifest.get("status")
    if status != "Succeeded":
        raise fail(f"inventory run status is {status!r}, not 'Succeeded'")
    rule = manifest.get("ruleDefinition")
    if not isinstance(rule, dict):
        raise fail("no ruleDefinition")
    fmt = _FORMATS.get(str(rule.get("format", "")).lower())
    if fmt is None:
        raise fail(f"unknown format {rule.get('format')!r} (expected csv or parquet)")
    columns = rule.get("schemaFields")
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise fail("ruleDefinition.schemaFields is not a list of names")
    for names in (_NAME, _LAST_MODIFIED, _CONTENT_LENGTH):
        if _field(columns, names) is None:
            raise fail(f"schemaFields lacks {' / '.join(names)}, which the GC needs")
    if rule.get("objectType", "blob") != "blob":
        raise fail(f"objectType {rule.get('objectType')!r} is not 'blob'")
    filters = rule.get("filters")
    if not isinstance(filters, dict):
        filters = {}
    return Delivery(
        id=manifest_path,
        flavour="azure",
        manifest_path=manifest_path,
        snapshot_time=_completion_time(manifest, fail),
        source=_account(manifest.get("endpoint")),
        columns=tuple(columns),
        files=_data_files(manifest, root, fmt, fail),
        versioned=bool(filters.get("includeBlobVersions")) or "VersionId" in columns,
    )


def _completion_time(manifest: Mapping[str, Any], fail: Any) -> datetime:
    text = manifest.get("inventoryCompletionTime")
    parsed = _parse_time(text) if isinstance(text, str) else None
    if parsed is None:
        raise fail(f"inventoryCompletionTime {text!r} is not an ISO-8601 time")
    return parsed


def _data_files(manifest: Mapping[str, Any], root: str, fmt: FileFormat, fail: Any) -> tuple[DataFile, ...]:
    files = manifest.get("files")
    if not isinstance(files, list) or not files:
        raise fail("no files listed")
    out = []
    for entry in files:
        blob = entry.get("blob") if isinstance(entry, dict) else None
        size = entry.get("size") if isinstance(entry, dict) else None
        if not isinstance(blob, str) or not blob or (size is not None and not isinstance(size, int)):
            raise fail(f"bad files entry {entry!r}")
        out.append(DataFile(path=f"{root}/{blob.lstrip('/')}", format=fmt, size=size))
    return tuple(out)


def _account(endpoint: object) -> str:
    """``https://acct.blob.core.windows.net`` or Azurite ``http://127.0.0.1:10000/acct`` -> ``acct``."""
    if not isinstance(endpoint, str):
        return ""
    parts = urlsplit(endpoint)
    path = parts.path.strip("/")
    if path:
        return path.split("/")[0]
    return (parts.hostname or endpoint).split(".")[0]


def _parse_time(text: str) -> datetime | None:
    text = re.sub(_FRACTION_RE, r"\1", text.strip())
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else parsed.astimezone(timezone.utc)


def _field(columns: Sequence[str], names: Sequence[str]) -> str | None:
    return next((n for n in names if n in columns), None)


def _truthy(column: pa.ChunkedArray) -> pa.ChunkedArray:
    if pa.types.is_boolean(column.type):
        return column
    text = pc.utf8_lower(pc.utf8_trim_whitespace(column.cast(pa.string())))
    return pc.equal(text, "true")


def _only_current(table: pa.Table) -> pa.Table:
    """Drop non-current versions, soft-deleted blobs, snapshots and HNS directories: not live objects."""
    names = table.column_names
    keep = pa.array([True] * table.num_rows)
    if "IsCurrentVersion" in names:  # empty on blobs without versions: those are current
        col = table["IsCurrentVersion"]
        empty = pc.equal(pc.utf8_length(col.cast(pa.string())), 0)
        keep = pc.and_(keep, pc.or_kleene(pc.fill_null(_truthy(col), False), pc.fill_null(empty, True)))
    for flag in ("Deleted", "hdi_isfolder"):
        if flag in names:
            keep = pc.and_(keep, pc.invert(pc.fill_null(_truthy(table[flag]), False)))
    if "Snapshot" in names:
        snap = pc.fill_null(pc.utf8_length(table["Snapshot"].cast(pa.string())), 0)
        keep = pc.and_(keep, pc.equal(snap, 0))
    return table.filter(keep)


def _to_inventory(table: pa.Table, path: str) -> pa.Table:
    cols = table.column_names
    name = table[_field(cols, _NAME) or "Name"].cast(pa.string())
    _check_rows(path, "Name", pc.invert(pc.fill_null(pc.match_substring_regex(name, r"^[^/]+/."), False)))
    parts = pc.split_pattern(name, "/", max_splits=1)
    bucket = pc.list_element(parts, 0)
    key = pc.list_element(parts, 1)
    size = _sizes(table[_field(cols, _CONTENT_LENGTH) or ""], path)
    modified = _times(table[_field(cols, _LAST_MODIFIED) or ""], path)
    etag_name = _field(cols, _ETAG)
    if etag_name is None:
        etag = pa.nulls(table.num_rows, pa.string())
    else:
        etag = pc.utf8_trim(table[etag_name].cast(pa.string()), '"')
    return pa.Table.from_arrays([bucket, key, size, modified, etag], schema=INVENTORY_SCHEMA)


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
        return column.cast(_TS)
    text = pc.replace_substring_regex(pc.utf8_trim_whitespace(column.cast(pa.string())), _FRACTION_RE, r"\1")
    try:
        parsed: pa.ChunkedArray = text.cast(_TS)
        _check_rows(path, "Last-Modified", pc.is_null(parsed))
        return parsed
    except pa.ArrowInvalid:
        pass
    values = []  # slow path: find the bad row, or accept what only Python parses
    for i, value in enumerate(text.to_pylist()):
        parsed_one = _parse_time(value) if value else None
        if parsed_one is None:
            raise InventoryError(f"{path}: row {i + 1}: unparsable Last-Modified {value!r}")
        values.append(parsed_one)
    return pa.chunked_array([pa.array(values, _TS)])


def _dedupe(table: pa.Table) -> pa.Table:
    if table.num_rows == 0:
        return table
    indexed = table.append_column("_row", pa.array(range(table.num_rows), pa.int64()))
    first = indexed.group_by(["bucket", "key"], use_threads=False).aggregate([("_row", "min")])
    rows = first["_row_min"]
    return table.take(rows.take(pc.sort_indices(rows)))


def write_delivery(
    fs: pafs.FileSystem,
    destination_path: str,
    rule_name: str,
    snapshot_time: datetime,
    rows: pa.Table,
    *,
    format: Literal["csv", "parquet"] = "csv",
    rows_per_file: int = 1_000_000,
    account: str = "devstoreaccount1",
) -> str:
    """Write ``rows`` (bucket, key, size, last_modified, etag) as Azure would; return the manifest path.

    Data files first, then the ``Succeeded`` manifest, then the checksum (hex MD5) that marks completion.
    The run folder is named after ``snapshot_time``, which is also the completion time. Parquet times
    are ``timestamp_millis`` as Azure writes them, so sub-millisecond precision is lost.
    """
    root = destination_path.rstrip("/")
    start = snapshot_time.astimezone(timezone.utc)
    run = f"{start:%Y/%m/%d/%H-%M-%S}/{rule_name}"
    fs.create_dir(f"{root}/{run}", recursive=True)
    table = _azure_table(rows.select([f.name for f in INVENTORY_SCHEMA]).cast(INVENTORY_SCHEMA), format)
    files = []
    for index, offset in enumerate(range(0, max(table.num_rows, 1), rows_per_file), start=1):
        blob = f"{run}/{rule_name}-{index}.{format}"
        _write_table(fs, f"{root}/{blob}", table.slice(offset, rows_per_file), format)
        files.append({"blob": blob, "size": fs.get_file_info(f"{root}/{blob}").size})
    stamp = start.strftime("%Y-%m-%dT%H:%M:%SZ")
    manifest = {
        "destinationContainer": root.split("/")[-1],
        "endpoint": f"https://{account}.blob.core.windows.net",
        "files": files,
        "inventoryCompletionTime": stamp,
        "inventoryStartTime": stamp,
        "ruleDefinition": {
            "filters": {"blobTypes": ["blockBlob"], "includeBlobVersions": False, "includeSnapshots": False},
            "format": format,
            "objectType": "blob",
            "schedule": "daily",
            "schemaFields": table.column_names,
        },
        "ruleName": rule_name,
        "status": "Succeeded",
        "summary": {"objectCount": table.num_rows, "totalObjectSize": pc.sum(rows["size"]).as_py() or 0},
        "version": "1.0",
    }
    body = json.dumps(manifest, indent=2).encode()
    manifest_path = f"{root}/{run}/{rule_name}-manifest.json"
    with fs.open_output_stream(manifest_path) as f:
        f.write(body)
    with fs.open_output_stream(manifest_path.removesuffix(".json") + ".checksum") as f:
        f.write(hashlib.md5(body).hexdigest().encode())
    return manifest_path


def _azure_table(rows: pa.Table, format: str) -> pa.Table:
    name = pc.binary_join_element_wise(rows["bucket"], rows["key"], "/")
    modified = rows["last_modified"]
    if format == "parquet":
        modified = modified.cast(pa.timestamp("ms", tz="UTC"), safe=False)
    else:
        modified = pc.strftime(modified, format="%Y-%m-%dT%H:%M:%SZ")
    blob_type = pa.array(["BlockBlob"] * rows.num_rows, pa.string())
    return pa.table(
        {
            "Name": name,
            "Creation-Time": modified,
            "Last-Modified": modified,
            "Etag": rows["etag"],
            "Content-Length": rows["size"],
            "BlobType": blob_type,
        }
    )


def _write_table(fs: pafs.FileSystem, path: str, table: pa.Table, format: str) -> None:
    with fs.open_output_stream(path) as f:
        if format == "parquet":
            pq.write_table(table, f)
        else:
            pacsv.write_csv(table, f)
