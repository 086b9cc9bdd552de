"""What past marks did with a few addresses, read on the driver: for ``lakefs-gc explain``.

The newest successful mark of a repository (by its summary's ``start_time``; ours or lakeFS's
Scala job's, same layout), whether its ``deleted/`` lists an address, and what its sweep did
(``swept/`` by the reading rule of :mod:`.swept`; ``swept/_SUCCESS`` tells a finished sweep,
whose listed-but-unswept addresses its revalidation kept). Unreadable files raise: ``explain``
never reads "not listed" from a report it could not read.
"""

from __future__ import annotations

from collections.abc import Set
from datetime import datetime, timezone

import pyarrow.fs as pafs

from lakefs_gc.errors import StorageError
from lakefs_gc.gc.explain import MarkRecord
from lakefs_gc.gc.reports import REPORTS_PREFIX, StoredSummary, parse_summary
from lakefs_gc.spark.report.layout import MARKED, SUCCESS_MARKER, SUMMARY, SWEPT, ReportDir, part_files
from lakefs_gc.spark.report.read import read_address_column, read_summary
from lakefs_gc.spark.report.swept import effective_swept
from lakefs_gc.storage.filesystems import StorageOptions, file_exists, filesystem_for, is_not_found
from lakefs_gc.storage.locations import StorageLocation
from lakefs_gc.storage.reads import read_whole

_EPOCH = datetime.min.replace(tzinfo=timezone.utc)


def newest_mark(namespace: StorageLocation, options: StorageOptions) -> ReportDir | None:
    """The report of the newest successful mark in the namespace, or None when there is none."""
    fs, _ = filesystem_for(namespace, options)
    base = namespace.join(REPORTS_PREFIX + "/").fs_path.rstrip("/")
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    except OSError as e:
        raise StorageError(f"cannot list {namespace.join(REPORTS_PREFIX)}: {e}") from e
    best: tuple[datetime, str] | None = None
    for info in infos:
        if info.type != pafs.FileType.Directory:
            continue
        summary = _summary_if_any(fs, f"{info.path}/{SUMMARY}")
        if summary is None or not summary.success:
            continue
        key = (summary.start_time or _EPOCH, info.base_name)
        best = key if best is None or key > best else best
    return ReportDir(namespace, best[1], options) if best else None


def _summary_if_any(fs: pafs.FileSystem, path: str) -> StoredSummary | None:
    try:
        text = read_whole(fs, path).decode("utf-8")
    except OSError as e:
        if is_not_found(e):
            return None  # a mark in progress, or only lakeFS's uncommitted dumps
        raise StorageError(f"cannot read {path}: {e}") from e
    return parse_summary(text, path)


def mark_records(report: ReportDir, addresses: Set[str]) -> dict[str, MarkRecord]:
    """Per address: listed by the mark, its sweep's outcome, whether the sweep finished."""
    summary = read_summary(report)
    fs, base = report.filesystem()
    listed: set[str] = set()
    for path in part_files(report, MARKED):
        for batch in read_address_column(fs, path):
            listed.update(a for a in batch.column(0).to_pylist() if a in addresses)
    swept = effective_swept(fs, part_files(report, SWEPT))
    outcomes = {
        a: o
        for a, o in zip(swept.column("address").to_pylist(), swept.column("outcome").to_pylist(), strict=True)
        if a in addresses
    }
    try:
        finished = file_exists(fs, f"{base}/{SWEPT}/{SUCCESS_MARKER}")
    except OSError as e:
        raise StorageError(f"cannot read {report.child(SWEPT)}: {e}") from e
    return {
        a: MarkRecord(
            report.mark_id, summary.start_time, summary.cutoff_time, a in listed, outcomes.get(a), finished
        )
        for a in addresses
    }
