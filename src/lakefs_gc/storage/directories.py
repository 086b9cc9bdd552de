"""A directory of small files on any store ``pyarrow.fs`` reaches: the service's state.

The service keeps its spools, cycle records, range cache and tables under ``service.state``, which
may be a local path, ``file://``, ``s3://`` or an Azure ``https://<account>.blob…`` location, so
that Spark executors on other machines read and write the same files. Object stores have no
rename, so what readers take as complete is written under a name written once, in one PUT
(atomic: S3 and Azure show an object only once its upload completes), and the record that lists
it is written last; on a local disk a file is written under a temporary name, flushed and renamed
(:func:`~lakefs_gc.storage.writes.replace_local_file`), exactly as before state could be remote.

Pickled to executors with the tasks that use it: it holds a location and settings, never a client.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lakefs_gc.errors import StorageError
from lakefs_gc.storage.filesystems import StorageOptions, file_exists, filesystem_for, is_not_found
from lakefs_gc.storage.locations import StorageLocation, parse_location, uri_scheme
from lakefs_gc.storage.writes import open_output, replace_local_file

if TYPE_CHECKING:
    import pyarrow.fs as pafs


def parse_state_location(uri: str | os.PathLike[str]) -> StorageLocation:
    """A state location: a URI :func:`parse_location` takes, or a local path (relative: to the
    working directory)."""
    text = os.fspath(uri)
    if not uri_scheme(text) and not text.startswith("/"):
        text = os.path.abspath(text)
    return parse_location(text)


@dataclass(frozen=True)
class StoreDirectory:
    """Files under one location; paths are relative to it, with ``/``."""

    location: StorageLocation
    options: StorageOptions = field(default_factory=StorageOptions)

    @classmethod
    def of(cls, uri: str | os.PathLike[str], options: StorageOptions | None = None) -> StoreDirectory:
        return cls(parse_state_location(uri), options or StorageOptions())

    @property
    def is_local(self) -> bool:
        return self.location.kind == "local"

    @property
    def local_path(self) -> Path:
        """The directory on this machine (local locations only)."""
        assert self.is_local, self.location
        return Path(self.location.fs_path)

    def sub(self, relative: str) -> StoreDirectory:
        return StoreDirectory(self.location.join(relative.strip("/") + "/"), self.options)

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        fs, path = filesystem_for(self.location, self.options)
        return fs, path.rstrip("/")

    def path(self, relative: str) -> str:
        """``relative``'s path inside :meth:`filesystem` (for ``pyarrow`` readers and messages)."""
        return f"{self.filesystem()[1]}/{relative}"

    def uri(self, relative: str = "") -> str:
        return str(self.location.join(relative)) if relative else str(self.location)

    def names(self, relative: str = "") -> list[str]:
        """The names of the files directly under ``relative`` (sorted; none if it does not exist)."""
        import pyarrow.fs as pafs

        fs, base = self.filesystem()
        where = f"{base}/{relative}".rstrip("/")
        try:
            infos = fs.get_file_info(pafs.FileSelector(where, allow_not_found=True))
        except OSError as e:
            raise StorageError(f"cannot list {self.uri(relative)}: {e}") from e
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.File)

    def exists(self, relative: str) -> bool:
        fs, base = self.filesystem()
        try:
            return file_exists(fs, f"{base}/{relative}")
        except OSError as e:
            raise StorageError(f"cannot look at {self.uri(relative)}: {e}") from e

    def read(self, relative: str) -> bytes | None:
        """The file's bytes, or None when there is no such file."""
        from lakefs_gc.storage.reads import read_whole  # pyarrow, imported when first read

        fs, base = self.filesystem()
        try:
            return read_whole(fs, f"{base}/{relative}", compression="detect")
        except OSError as e:
            if is_not_found(e):
                return None
            raise StorageError(f"cannot read {self.uri(relative)}: {e}") from e

    def write(self, relative: str, data: bytes) -> None:
        """Write the file whole: readers see all of it or nothing (see the module docstring)."""
        if self.is_local:
            try:
                replace_local_file(self.local_path / relative, data)
            except OSError as e:
                raise StorageError(f"cannot write {self.uri(relative)}: {e}") from e
            return
        fs, base = self.filesystem()
        try:
            with open_output(fs, f"{base}/{relative}") as out:
                out.write(data)
        except OSError as e:
            raise StorageError(f"cannot write {self.uri(relative)}: {e}") from e

    def delete(self, relative: str) -> None:
        """Delete the file if it is there."""
        fs, base = self.filesystem()
        try:
            fs.delete_file(f"{base}/{relative}")
        except OSError as e:
            if not is_not_found(e):
                raise StorageError(f"cannot delete {self.uri(relative)}: {e}") from e

    def delete_all(self) -> None:
        """Delete the directory and everything under it (a missing one is fine)."""
        fs, base = self.filesystem()
        try:
            fs.delete_dir_contents(base, missing_dir_ok=True)
        except OSError as e:
            if not is_not_found(e):
                raise StorageError(f"cannot delete {self.uri()}: {e}") from e

    def __str__(self) -> str:
        return self.uri()
