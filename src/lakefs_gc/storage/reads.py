"""Reading a file from any store ``pyarrow.fs`` reaches once (with its MD5), to parse it after;
reading a small file whole.

A reader that must check a file against a published checksum before it trusts any of its bytes
(an S3 Inventory data file against its manifest's MD5) used to read it twice from the store: a
streamed pass to hash it, then the parser's reads. :func:`read_once` reads it once. A file on an
object store is copied to a local scratch file while it is hashed, and the caller parses that
copy, so:

* the store serves the file's bytes once, not twice (for a gzipped CSV, twice the whole file; for
  Parquet, the selected columns a second time);
* the bytes parsed are the bytes hashed, even if the object is replaced between the two reads;
* the file comes in large reads: a parser reading a stream asks for little at a time (64 KiB
  through a gzip stream, 1 MiB for a plain CSV), which on an object store is a GET each.

Readers without a checksum to verify (Azure's inventories publish none) use it for the last
point alone (``md5=False``), and so does :func:`fetched_file`, which opens the copy for random
access: for decoders that read a little at a time (lakeFS's SSTables, a few-KiB block per read),
where reading an object store in place would be a request per read.

:func:`read_whole` reads a small file (a manifest, its checksum, a state record) in one read.
Both retry what pyarrow's S3 filesystem reports for an object smaller than S3's error answer to a
throttled or failed GET, which the AWS SDK does not retry
(:func:`~lakefs_gc.storage.filesystems.is_misread`); S3 retries every other such answer itself.

Scratch files go under Spark's local directories (``SPARK_LOCAL_DIRS``, which Spark sets for its
Python workers), else the system's temporary directory, and are removed on leaving the context,
error or not: disk, not memory, holds the copy, however large the file. A local file is hashed
where it lies and parsed from there (no copy).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from lakefs_gc.errors import StorageError
from lakefs_gc.storage.filesystems import is_misread, is_not_found

#: bytes per read from the store (and per hash update)
READ_CHUNK = 8 * 1024 * 1024
#: attempts at a read that fails as :func:`~lakefs_gc.storage.filesystems.is_misread` (S3 retries
#: every other throttled or failed request itself: storage/filesystems.py, S3_ATTEMPTS)
MISREAD_ATTEMPTS = 5


class ObjectNotFound(StorageError):
    """The file is not in the store."""


class ScratchSpaceError(StorageError):
    """This process's local disk could not hold the copy (full, or the directory is missing):
    a fault of where the work runs, not of the file, so callers must not judge the file by it."""


@dataclass(frozen=True)
class FetchedFile:
    """Where to parse a file's bytes (``fs``, ``path``), and their MD5 (hex; None: not asked for)."""

    fs: pafs.FileSystem
    path: str
    md5: str | None


def scratch_directory() -> str:
    """The first of Spark's local directories for this process, else the temporary directory."""
    spark_dirs = [d for d in os.environ.get("SPARK_LOCAL_DIRS", "").split(",") if d]
    return spark_dirs[0] if spark_dirs else tempfile.gettempdir()


@contextlib.contextmanager
def read_once(fs: pafs.FileSystem, path: str, *, md5: bool = True) -> Iterator[FetchedFile]:
    """``path``'s bytes, read from ``fs`` once, and their MD5 if ``md5``; a :class:`StorageError`
    naming ``path`` if it cannot be read (:class:`ScratchSpaceError` if it cannot be copied)."""
    digest = hashlib.md5(usedforsecurity=False) if md5 else None
    if isinstance(fs, pafs.LocalFileSystem):
        if digest is not None:
            for chunk in _chunks(fs, path):
                digest.update(chunk)
        yield FetchedFile(fs, path, digest.hexdigest() if digest else None)
        return
    directory = scratch_directory()
    try:
        fd, local = tempfile.mkstemp(prefix="lakefs-gc-read-", suffix=".tmp", dir=directory)
    except OSError as e:
        raise ScratchSpaceError(f"{path}: cannot create a scratch file in {directory}: {e}") from e
    try:
        try:
            with os.fdopen(fd, "wb") as copy:
                for chunk in _chunks(fs, path):  # the store's errors are raised in there, as StorageError
                    if digest is not None:
                        digest.update(chunk)
                    copy.write(chunk)
        except OSError as e:  # the copy's own writes (and their flush on close)
            raise ScratchSpaceError(f"{path}: cannot copy to the scratch file {local}: {e}") from e
        yield FetchedFile(pafs.LocalFileSystem(), local, digest.hexdigest() if digest else None)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(local)


@contextlib.contextmanager
def fetched_file(fs: pafs.FileSystem, path: str) -> Iterator[pa.NativeFile]:
    """``path`` open for random access where reads are cheap: in place on a local disk, else its
    local copy (:func:`read_once`). For decoders that read a little at a time (an SSTable's data
    blocks), where reading an object store in place would cost a request per read."""
    with read_once(fs, path, md5=False) as local:
        try:
            opened = local.fs.open_input_file(local.path)
        except OSError as e:
            raise _read_error(path, e) from e
        with opened:
            yield opened


def read_whole(fs: pafs.FileSystem, path: str, *, compression: str | None = None) -> bytes:
    """A small file's bytes in one read (``compression``: as ``open_input_stream``'s); pyarrow's
    ``OSError`` as it raised it, after retrying the S3 answers the AWS SDK does not retry for a
    small object (:func:`~lakefs_gc.storage.filesystems.is_misread`)."""
    attempt = 0
    while True:
        attempt += 1
        try:
            with fs.open_input_stream(path, compression=compression) as f:
                return bytes(f.read())
        except OSError as e:
            if not _retry_misread(attempt, e):
                raise


def _chunks(fs: pafs.FileSystem, path: str) -> Iterator[bytes]:
    """``path``'s bytes, a chunk at a time; a misread is retried only before its first byte
    (after it, a new attempt would yield the file's start again)."""
    attempt = 0
    while True:
        attempt += 1
        started = False
        try:
            with fs.open_input_stream(path, compression=None) as f:
                while chunk := f.read(READ_CHUNK):
                    started = True
                    yield chunk
            return
        except (OSError, pa.ArrowException) as e:
            if started or not _retry_misread(attempt, e):
                raise _read_error(path, e) from e


def _retry_misread(attempt: int, e: Exception) -> bool:
    """Whether attempt ``attempt``'s error earns another attempt: a misread, attempts left. When it
    does, the backoff has been slept on return."""
    if attempt >= MISREAD_ATTEMPTS or not is_misread(e):
        return False
    time.sleep(_misread_backoff(attempt))
    return True


def _misread_backoff(attempt: int) -> float:
    """Seconds before attempt ``attempt + 1``: 0.2, 0.4, 0.8, 1.6 (the answer was a 503 or a 500)."""
    return 0.1 * float(2**attempt)


def _read_error(path: str, e: Exception) -> StorageError:
    missing = isinstance(e, OSError) and is_not_found(e)
    return (ObjectNotFound if missing else StorageError)(f"{path}: cannot read: {e}")
