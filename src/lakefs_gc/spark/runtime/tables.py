"""Where one of the service's tables lives: a location on any store ``pyarrow.fs`` reaches."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.fs as pafs

from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
from lakefs_gc.storage.locations import StorageLocation


@dataclass(frozen=True)
class TableLocation:
    """A table's root and how to reach it (no Hadoop connector: the executors use ``pyarrow.fs``)."""

    location: StorageLocation
    options: StorageOptions

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        fs, path = filesystem_for(self.location, self.options)
        return fs, path.rstrip("/")

    def __str__(self) -> str:
        return str(self.location)
