"""Where S3 Inventory deliveries are, whether they are complete, and what their manifests say.

Layout (docs/formats/inventories.md, "S3 destination layout")::

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
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from lakefs_gc.inventory.delivery import (
    DataFile,
    Delivery,
    DiscoveryResult,
    FileFormat,
    InventoryError,
    check_data_files,
)
from lakefs_gc.inventory.s3.columns import REQUIRED, VERSION_COLUMNS, WANTED, norm
from lakefs_gc.inventory.s3.reader import read_data_file
from lakefs_gc.storage.reads import read_whole

MANIFEST = "manifest.json"
CHECKSUM = "manifest.checksum"
_DELIVERY_DIR = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}-\d{2}Z$")
_FORMATS: dict[str, FileFormat] = {"csv": "csv", "parquet": "parquet", "orc": "orc"}


def join(*parts: str) -> str:
    """Join filesystem path segments with single slashes (the first keeps its leading slash)."""
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
        manifest_path = join(d, MANIFEST)
        if MANIFEST not in names:
            if CHECKSUM in names:
                error = InventoryError(f"{join(d, CHECKSUM)}: checksum present but {MANIFEST} missing")
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
        return read_whole(fs, path)
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
        checksum_path = join(manifest_path.rsplit("/", 1)[0], CHECKSUM)
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
    present = {WANTED[norm(c)] for c in columns if norm(c) in WANTED}
    missing = [c for c in REQUIRED if c not in present]
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
        versioned=any(norm(c) in VERSION_COLUMNS for c in columns),
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
    """The filesystem path of data file ``key`` (see "Mapping data-file keys" above)."""
    if bucket_root is not None:
        return join(bucket_root, key)
    dest_parts = manifest_path.split("/")[:-4]  # strip <src>/<cfg>/<ts>/manifest.json
    key_parts = key.split("/")
    # the longest destination prefix first: a prefix ending in a segment named like the source
    # bucket (s3://inventories/data-bucket for bucket data-bucket) must not match at that segment
    for j in reversed(range(len(key_parts) - 1)):
        part, prefix = key_parts[j], key_parts[:j]
        if part == source and (not prefix or dest_parts[-len(prefix) :] == prefix):
            return "/".join([*dest_parts, *key_parts[j:]])
    raise InventoryError(
        f"{manifest_path}: data file key {key!r} is not under the destination prefix of this "
        f"manifest (pass bucket_root to map it)"
    )
