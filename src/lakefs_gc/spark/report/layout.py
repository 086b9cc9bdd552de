"""Where a mark's reports live and what their files are: names, schemas, the report directory.

Layout (lakeFS's: docs/formats/lakefs-gc-api.md, "Mark reports") under
``<ns>/_lakefs/retention/gc/unified/<mark_id>/``:

* ``deleted/``       parquet part files, first column ``address`` (then ``size``, ``last_modified``);
* ``deleted.text/``  the same addresses, one per line (what lakeFS's rclone backup recipe reads);
* ``swept/``         parquet ``address, outcome, error``: what the sweep did to each marked object,
  written in small parts as it goes, so that a killed sweep resumes (:mod:`.swept`);
* ``ranges/``, ``metaranges/``  ours: parquet ``range_id`` / ``metarange_id``, what the mark read, so
  that a revalidation at sweep time reads only what is new (ids are content-addressed);
* ``backup/``, ``restore/`` (+ ``backup.json``, ``restore.json``), ``dry-run/``: ours, beside them;
* ``summary.json``   written last: its presence with ``success=true`` is what makes a mark sweepable.

Part files are named like Spark's (``part-<partition>-<tag>-c000...``) and written by the task that
holds the rows (:mod:`.write`), so nothing is collected to the driver and a retried task
overwrites its own file. No Hadoop connector is involved: lakeFS's Scala job reads these with
``spark.read.parquet``. Reading them back: :mod:`.read`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from lakefs_gc.errors import StorageError
from lakefs_gc.gc.reports import report_dir
from lakefs_gc.storage.filesystems import StorageOptions, filesystem_for
from lakefs_gc.storage.locations import StorageLocation, parse_storage_namespace

if TYPE_CHECKING:
    import pyarrow.fs as pafs

MARKED = "deleted"
MARKED_TEXT = "deleted.text"
SWEPT = "swept"
DRY_RUN = "dry-run"  # what a `sweep --dry-run` would have deleted (ours)
RANGES = "ranges"
METARANGES = "metaranges"
SUMMARY = "summary.json"
SUCCESS_MARKER = "_SUCCESS"

MARKED_SCHEMA = pa.schema(
    [("address", pa.string()), ("size", pa.int64()), ("last_modified", pa.timestamp("us", tz="UTC"))]
)
SWEPT_SCHEMA = pa.schema([("address", pa.string()), ("outcome", pa.string()), ("error", pa.string())])
PART_COUNTS_SCHEMA = "rows long, bytes long"
RANGES_SCHEMA = pa.schema([("range_id", pa.string())])
METARANGES_SCHEMA = pa.schema([("metarange_id", pa.string())])


@dataclass(frozen=True)
class ReportDir:
    """The report directory of one mark, and how to reach it."""

    namespace: StorageLocation
    mark_id: str
    options: StorageOptions

    @property
    def location(self) -> StorageLocation:
        return self.namespace.join(report_dir(self.mark_id))

    def child(self, name: str) -> StorageLocation:
        return self.namespace.join(report_dir(self.mark_id) + name)

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        fs, _ = filesystem_for(self.namespace, self.options)
        return fs, self.location.fs_path

    def __str__(self) -> str:
        return str(self.location)

    @classmethod
    def of(cls, storage_namespace: str, mark_id: str, options: StorageOptions) -> ReportDir:
        """The report directory of mark ``mark_id`` of the repository at ``storage_namespace``."""
        namespace = parse_storage_namespace(storage_namespace, local_root=options.local_root)
        return cls(namespace, mark_id, options)


def new_part_tag() -> str:
    """The job-unique middle of part file names (Spark uses a UUID there too)."""
    return str(uuid.uuid4())


def part_name(partition: int, tag: str, suffix: str) -> str:
    return f"part-{partition:05d}-{tag}-c000{suffix}"


def partition_id() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


def part_files(report: ReportDir, name: str) -> list[str]:
    """Data files of a report sub-directory (``_``/``.``-prefixed names are markers, not data)."""
    return [path for path, _ in part_sizes(report, name)]


def part_sizes(report: ReportDir, name: str) -> list[tuple[str, int]]:
    """:func:`part_files` with each file's size in bytes (one listing gives both)."""
    import pyarrow.fs as pafs

    fs, base = report.filesystem()
    selector = pafs.FileSelector(f"{base}/{name}", allow_not_found=True, recursive=False)
    try:
        infos = fs.get_file_info(selector)
    except OSError as e:
        raise StorageError(f"cannot list {report.child(name)}: {e}") from e
    return sorted(
        (i.path, int(i.size or 0))
        for i in infos
        if i.type == pafs.FileType.File and not i.base_name.startswith(("_", "."))
    )
