"""Listing a storage namespace into Arrow record batches (the mark's view of what exists).

Runs inside Spark executor tasks, so only ``pyarrow`` and the standard library, and only
module-level functions (which pickle by reference). The layout follows lakeFS's own GC
(docs/formats/lakefs-storage.md, "Listing a namespace"): the driver lists the direct children
of ``<ns>/data/`` with :func:`list_children` and hands each one to a task that lists it recursively with
:func:`iter_listing`; files directly at the namespace root (the old layout) come from
:func:`iter_root_files`.

Fail closed: any error of the store raises :class:`StorageError` naming the location; nothing
ever ends a listing early and quietly, because a partial listing must never pass for a complete
one (the mark, its report and any incremental state would be silently wrong). An absent prefix
is simply empty, as it is on object stores.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from lakefs_gc.errors import StorageError

LISTING_SCHEMA = pa.schema(
    [
        ("address", pa.string()),
        ("size", pa.int64()),
        ("last_modified", pa.timestamp("us", tz="UTC")),
    ]
)
DEFAULT_BATCH_ROWS = 50_000


@dataclass(frozen=True)
class Child:
    """A direct child of a directory: a file, or a directory (a common prefix on object stores)."""

    name: str
    is_dir: bool


def list_children(fs: pafs.FileSystem, path: str) -> list[Child]:
    """The direct children of directory ``path`` (not recursive), sorted by name; [] if it is absent.

    On object stores a name may appear twice, as a file and as a directory, when both ``x`` and
    ``x/...`` exist.
    """
    base = path.rstrip("/")
    infos = _get_file_info(fs, pafs.FileSelector(base, allow_not_found=True, recursive=False), base)
    children = {
        Child(_relative(info.path, base), info.type == pafs.FileType.Directory)
        for info in infos
        if info.type in (pafs.FileType.File, pafs.FileType.Directory)
    }
    return sorted(children, key=lambda c: (c.name, c.is_dir))


def iter_listing(
    fs: pafs.FileSystem, namespace_path: str, prefix: str, *, batch_rows: int = DEFAULT_BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """Every file under ``namespace_path/prefix``, recursively, as :data:`LISTING_SCHEMA` batches.

    ``prefix`` is namespace-relative (``data/<slice>/``) and the ``address`` column is too
    (``data/<slice>/<sub>/<xid>``). Directories and S3 directory markers (keys ending in ``/``)
    are not files and are skipped. The store answers one prefix with one listing (pyarrow has no
    streaming listing in Python), so memory is bounded by the largest prefix a caller asks for.
    """
    _check_batch_rows(batch_rows)
    namespace = namespace_path.rstrip("/")
    base = _under(namespace, _clean_prefix(prefix))
    infos = _get_file_info(fs, pafs.FileSelector(base, allow_not_found=True, recursive=True), base)
    return _batches(infos, namespace, base, batch_rows)


def iter_root_files(
    fs: pafs.FileSystem, namespace_path: str, *, batch_rows: int = DEFAULT_BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """The files directly at the namespace root (old layout; ``address`` = file name), as batches.

    Never descends into ``_lakefs/``, ``data/`` or any other directory.
    """
    _check_batch_rows(batch_rows)
    namespace = namespace_path.rstrip("/")
    infos = _get_file_info(fs, pafs.FileSelector(namespace, allow_not_found=True, recursive=False), namespace)
    return _batches(infos, namespace, namespace, batch_rows)


def _clean_prefix(prefix: str) -> str:
    """A namespace-relative prefix without empty, ``.`` or ``..`` segments (never escapes)."""
    stripped = prefix.strip("/")
    if prefix.startswith("/") or any(p in ("", ".", "..") for p in stripped.split("/") if stripped):
        raise StorageError(f"listing prefix {prefix!r} is not a plain namespace-relative prefix")
    return stripped


def _check_batch_rows(batch_rows: int) -> None:
    if batch_rows < 1:
        raise StorageError(f"batch_rows must be positive, got {batch_rows}")


def _under(namespace: str, relative: str) -> str:
    return f"{namespace}/{relative}" if relative else namespace


def _get_file_info(fs: pafs.FileSystem, selector: pafs.FileSelector, base: str) -> list[pafs.FileInfo]:
    try:
        infos: list[pafs.FileInfo] = fs.get_file_info(selector)
    except (OSError, pa.ArrowException) as e:
        raise StorageError(f"cannot list {fs.type_name}:{base}/: {e}") from e
    return infos


def _relative(path: str, base: str) -> str:
    """``path`` relative to ``base``; anything else means the store answered for another location."""
    if not path.startswith(base + "/") or len(path) == len(base) + 1:
        raise StorageError(f"listing of {base}/ returned {path!r}, which is not under it")
    return path[len(base) + 1 :]


def _batches(
    infos: Iterable[pafs.FileInfo], namespace: str, base: str, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    addresses: list[str] = []
    sizes: list[int] = []
    mtimes: list[int] = []
    for info in infos:
        if info.type != pafs.FileType.File or info.path.endswith("/"):
            continue
        _relative(info.path, base)  # fail closed on a path outside the listed prefix
        if info.size is None or info.mtime_ns is None:
            raise StorageError(f"listing of {base}/ gave {info.path!r} without a size or modification time")
        addresses.append(_relative(info.path, namespace))
        sizes.append(info.size)
        mtimes.append(info.mtime_ns // 1000)
        if len(addresses) >= batch_rows:
            yield _batch(addresses, sizes, mtimes)
            addresses, sizes, mtimes = [], [], []
    if addresses:
        yield _batch(addresses, sizes, mtimes)


def _batch(addresses: list[str], sizes: list[int], mtimes_us: list[int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array(addresses, pa.string()),
            pa.array(sizes, pa.int64()),
            pa.array(mtimes_us, pa.timestamp("us", tz="UTC")),
        ],
        schema=LISTING_SCHEMA,
    )
