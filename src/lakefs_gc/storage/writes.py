"""Writing files on any store ``pyarrow.fs`` reaches, and writing them whole.

Every file lakefs-gc writes (mark and sweep reports, table parts and records, spools, cache
records) goes through here, so that two rules hold everywhere:

* a failure names the file and becomes a :class:`~lakefs_gc.errors.StorageError`;
* a file that readers take as complete the moment it exists (a ``swept/`` part, a batch record, a
  spool file, a cache generation) is written *whole*: an object store's PUT is atomic (S3 and
  Azure show an object only once its upload completes), and a local file is written under a hidden
  temporary name and renamed into place. A kill therefore never leaves a torn file that a reader
  would take for a complete one.

Local directories are created on demand (``pyarrow``'s local filesystem does not create parents
for an output stream; object stores have no directories).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakefs_gc.errors import StorageError

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs


def open_output(fs: pafs.FileSystem, path: str) -> Any:
    """An output stream for ``path`` (its local parent directories created first)."""
    import pyarrow.fs as pafs

    if isinstance(fs, pafs.LocalFileSystem):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        return fs.open_output_stream(path)
    except OSError as e:
        raise StorageError(f"cannot write report file {path}: {e}") from e


def write_bytes(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` (one upload on an object store; on a local disk not atomic:
    use :func:`write_whole` where a reader must never see part of the file)."""
    try:
        with open_output(fs, path) as out:
            out.write(data)
    except OSError as e:
        raise StorageError(f"cannot write report file {path}: {e}") from e


def write_whole(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Write ``path`` so that readers see all of it or nothing (see the module docstring)."""
    import pyarrow.fs as pafs

    local = isinstance(fs, pafs.LocalFileSystem)
    directory, name = path.rsplit("/", 1)
    target = f"{directory}/.{name}.tmp" if local else path
    try:
        with open_output(fs, target) as out:
            out.write(data)
        if local:
            fs.move(target, path)
    except OSError as e:
        raise StorageError(f"cannot write {path}: {e}") from e


def write_parquet(fs: pafs.FileSystem, path: str, schema: pa.Schema, batches: list[pa.RecordBatch]) -> None:
    """One snappy parquet file of ``batches`` (possibly none: a schema-only file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with (
            open_output(fs, path) as out,
            pq.ParquetWriter(out, schema, compression="snappy") as writer,
        ):
            for batch in batches:
                writer.write_batch(batch)
    except (OSError, pa.ArrowException) as e:
        raise StorageError(f"cannot write report file {path}: {e}") from e


def replace_local_file(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write a local file whole: ``<name>.tmp`` beside it, flushed to disk (``durable``), renamed.

    For what the driver keeps on a local disk and must find complete after a crash: the event
    spool (an offset Spark logs next must never name a file a crash lost), the range cache's
    generation records, a checkpoint's stream id. Raises :class:`OSError` as ``open`` does.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(path.name + ".tmp")
    with open(temp, "wb") as out:
        out.write(data)
        if durable:
            out.flush()
            os.fsync(out.fileno())
    os.replace(temp, path)
