"""The event table's compacted generations: which files a reader reads, and what they replace.

Compaction (:mod:`.compaction`) folds batch parts into a *generation*::

    compacted/<generation:012d>/part-<task>-<tag>.parquet   EVENT_SCHEMA rows
    compacted/<generation:012d>.json                        its manifest, written last

A generation is complete once its manifest exists (written whole,
:func:`~lakefs_gc.storage.writes.write_whole`); the manifest lists its files and the batch
records it *folded* (their events are in the generation, summarised or copied). A reader takes
the newest complete generation and the parts of every batch record it did not fold: a generation
whose manifest is missing (a compaction killed while writing it) is invisible, and its files are
removed by the next compaction.

Nothing is deleted when a generation is written: the files it supersedes (older generations, the
batch records and parts it folded) are retired at the start of the *next* compaction. A crash at
any point therefore leaves a readable table, and a mark that listed the table's files just before
a compaction still finds them all while it runs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs

from lakefs_gc.errors import StorageError
from lakefs_gc.spark.runtime.tables import TableLocation
from lakefs_gc.storage.reads import read_whole

GENERATIONS = "compacted"
_MANIFEST = re.compile(r"^(\d{12})\.json$")


@dataclass(frozen=True)
class Generation:
    """One complete generation, as its manifest says."""

    number: int
    created_at: str
    files: tuple[str, ...]  # relative to the table root
    folded: frozenset[str]  # batch records (relative paths) whose events it holds
    rows: int
    watermarks: dict[str, str] = field(default_factory=dict)  # repository -> ISO time

    def to_json(self) -> dict[str, Any]:
        return {
            "generation": self.number,
            "created_at": self.created_at,
            "files": list(self.files),
            "folded": sorted(self.folded),
            "rows": self.rows,
            "watermarks": self.watermarks,
        }


def generation_dir(number: int) -> str:
    return f"{GENERATIONS}/{number:012d}"


def manifest_path(number: int) -> str:
    return f"{GENERATIONS}/{number:012d}.json"


def generation_numbers(table: TableLocation) -> tuple[list[int], list[int]]:
    """(complete generations, generation directories), each ascending."""
    fs, base = table.filesystem()
    infos = fs.get_file_info(pafs.FileSelector(f"{base}/{GENERATIONS}", allow_not_found=True))
    complete, directories = [], []
    for info in infos:
        if info.type == pafs.FileType.File and (m := _MANIFEST.match(info.base_name)):
            complete.append(int(m.group(1)))
        elif info.type == pafs.FileType.Directory and info.base_name.isdigit():
            directories.append(int(info.base_name))
    return sorted(complete), sorted(directories)


def read_generation(table: TableLocation, number: int) -> Generation:
    fs, base = table.filesystem()
    path = f"{base}/{manifest_path(number)}"
    try:
        body = json.loads(read_whole(fs, path))
        return Generation(
            number=int(body["generation"]),
            created_at=str(body["created_at"]),
            files=tuple(body["files"]),
            folded=frozenset(body["folded"]),
            rows=int(body["rows"]),
            watermarks=dict(body.get("watermarks", {})),
        )
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise StorageError(f"{path}: unreadable event table generation manifest: {e}") from e


def newest_generation(table: TableLocation) -> Generation | None:
    """The newest complete generation, or None (never compacted)."""
    complete, _ = generation_numbers(table)
    return read_generation(table, complete[-1]) if complete else None
