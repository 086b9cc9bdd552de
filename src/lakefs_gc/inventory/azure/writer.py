"""Write Azure Blob inventory deliveries the way Azure does, for tests and ``generate``.

Data files first, then the ``Succeeded`` manifest, then the checksum (hex MD5) that marks completion,
so a reader never sees a complete-looking delivery whose files are still being written.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lakefs_gc.inventory.delivery import INVENTORY_SCHEMA

#: the rows an Azure inventory holds: INVENTORY_SCHEMA without S3's encryption status
_ROWS = pa.schema([f for f in INVENTORY_SCHEMA if f.name != "encryption"])


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
    table = _azure_table(rows.select(_ROWS.names).cast(_ROWS), format)
    files = []
    for index, offset in enumerate(range(0, max(table.num_rows, 1), rows_per_file), start=1):
        blob = f"{run}/{rule_name}-{index}.{format}"
        _write_table(fs, f"{root}/{blob}", table.slice(offset, rows_per_file), format)
        files.append({"blob": blob, "size": fs.get_file_info(f"{root}/{blob}").size})
    total_size = pc.sum(rows["size"]).as_py() or 0
    manifest = _manifest(
        root, rule_name, start, account, format=format, files=files, table=table, total_size=total_size
    )
    body = json.dumps(manifest, indent=2).encode()
    manifest_path = f"{root}/{run}/{rule_name}-manifest.json"
    with fs.open_output_stream(manifest_path) as f:
        f.write(body)
    with fs.open_output_stream(manifest_path.removesuffix(".json") + ".checksum") as f:
        f.write(hashlib.md5(body).hexdigest().encode())
    return manifest_path


def _manifest(
    root: str,
    rule_name: str,
    start: datetime,
    account: str,
    *,
    format: str,
    files: list[dict[str, Any]],
    table: pa.Table,
    total_size: int,
) -> dict[str, Any]:
    """The ``Succeeded`` manifest of a run that started and completed at ``start``, in Azure's key order."""
    stamp = start.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
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
        "summary": {"objectCount": table.num_rows, "totalObjectSize": total_size},
        "version": "1.0",
    }


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
