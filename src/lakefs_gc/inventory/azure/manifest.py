"""Where Azure Blob inventory deliveries are, whether they are complete, and what their manifests say.

Layout (docs/formats/inventories.md, "Azure output layout"), relative to the destination container::

    YYYY/MM/DD/HH-MM-SS/<rule>/<rule>-manifest.json   written with "status": "Pending" when a run starts
    YYYY/MM/DD/HH-MM-SS/<rule>/<rule>-manifest.checksum   MD5 of the manifest; its creation marks completion
    <files[].blob>                                     data files, relative to the destination container

A delivery is complete only when the checksum exists and matches, the status is ``Succeeded`` and every
data file exists with the size the manifest lists (docs/invariants.md, invariant 4: an incomplete inventory
never reads as "these objects do not exist").
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import posixpath
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from lakefs_gc.inventory.azure.fields import CONTENT_LENGTH, LAST_MODIFIED, NAME, field, parse_time
from lakefs_gc.inventory.azure.reader import verify_delivery
from lakefs_gc.inventory.delivery import DataFile, Delivery, DiscoveryResult, FileFormat, InventoryError
from lakefs_gc.storage.reads import read_whole

_MANIFEST_RE = re.compile(r"^(\d{4})/(\d{2})/(\d{2})/(\d{2}-\d{2}-\d{2})/([^/]+)/([^/]+)-manifest\.json$")
_FORMATS: Mapping[str, FileFormat] = {"csv": "csv", "parquet": "parquet"}


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


def _read_verified_manifest(fs: pafs.FileSystem, manifest_path: str) -> dict[str, Any]:
    checksum_path = manifest_path.removesuffix(".json") + ".checksum"
    try:
        body = read_whole(fs, manifest_path)
        promised = read_whole(fs, checksum_path).decode("ascii", errors="replace")
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
    """Hex or base64: the checksum's encoding is not documented (inventories.md, "Azure
    manifest"): accept both."""
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
    for names in (NAME, LAST_MODIFIED, CONTENT_LENGTH):
        if field(columns, names) is None:
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
    parsed = parse_time(text) if isinstance(text, str) else None
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
