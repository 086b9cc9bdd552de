"""Readers for what lakeFS exports for a GC run: the active-commits CSV and the uncommitted parquet.

Both are read through a ``pyarrow.fs`` filesystem so the same code reads S3, Azure and local
files. Any surprise (missing file, missing column, unknown value) is an :class:`ExportError`
naming the file: a GC that silently under-reads references deletes live data.
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakefs_gc.errors import ExportError
from lakefs_gc.storage.reads import read_whole

if TYPE_CHECKING:
    import pyarrow.fs as pafs

COMMITS_COLUMNS = ("commit_id", "expired", "metarange_id")
ADDRESS_COLUMN = "physical_address"


@dataclass(frozen=True, slots=True)
class ActiveCommit:
    """An active commit and the metarange holding its tree.

    Slotted, its ids interned: the mark holds one per active commit (~14,000 at lakeFS's bottom
    line), and the commit graph read next (:mod:`lakefs_gc.lakefs.commit_graph`) then shares
    these strings instead of holding its own copies.
    """

    commit_id: str
    metarange_id: str


@dataclass(frozen=True)
class ActiveCommits:
    """The active commits of a commits CSV.

    ``commits`` holds those with a metarange. ``without_metarange`` counts active commits with an
    empty ``metarange_id`` (the initial empty commit): they reference nothing, but are counted so
    a report can account for every row. ``expired`` counts rows skipped as expired (only servers
    older than 2023-09 write such rows).
    """

    commits: list[ActiveCommit] = field(default_factory=list)
    without_metarange: int = 0
    expired: int = 0

    @property
    def metarange_ids(self) -> list[str]:
        """Distinct metarange ids, sorted: each metarange needs reading once."""
        return sorted({c.metarange_id for c in self.commits})


def read_commits_csv(fs: pafs.FileSystem, path: str) -> ActiveCommits:
    """Read ``commit_id,expired,metarange_id``; keep ``expired == false`` (case-insensitive).

    ``metarange_id`` is used directly, which saves one ``getCommit`` call per commit
    (lakefs-gc-api.md, "The commits export").
    """
    text = _read_text(fs, path)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = [name.strip() for name in reader.fieldnames or []]
    missing = [c for c in COMMITS_COLUMNS if c not in header]
    if missing:
        raise ExportError(f"commits CSV {path}: missing column(s) {missing} (header: {header})")
    reader.fieldnames = header
    commits: list[ActiveCommit] = []
    without_metarange = expired = 0
    for row in reader:
        line = reader.line_num
        commit_id = (row.get("commit_id") or "").strip()
        if not commit_id:
            raise ExportError(f"commits CSV {path}: line {line} has an empty commit_id")
        if _is_expired(row.get("expired"), path, line):
            expired += 1
            continue
        metarange_id = (row.get("metarange_id") or "").strip()
        if metarange_id:
            commits.append(ActiveCommit(sys.intern(commit_id), sys.intern(metarange_id)))
        else:
            without_metarange += 1
    return ActiveCommits(commits, without_metarange, expired)


def _is_expired(value: str | None, path: str, line: int) -> bool:
    normalized = (value or "").strip().lower()
    if normalized == "false":
        return False
    if normalized == "true":
        return True
    raise ExportError(f"commits CSV {path}: line {line} has expired={value!r}, expected true/false")


def _read_text(fs: pafs.FileSystem, path: str) -> str:
    try:
        data = read_whole(fs, path)
    except FileNotFoundError as e:
        raise ExportError(f"commits CSV {path} does not exist") from e
    except OSError as e:
        raise ExportError(f"cannot read commits CSV {path}: {e}") from e
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ExportError(f"commits CSV {path} is not UTF-8: {e}") from e


def uncommitted_files(fs: pafs.FileSystem, dir_path: str, *, required: bool) -> list[str]:
    """The parquet parts of an uncommitted dump directory, sorted.

    Names starting with ``_`` or ``.`` are ignored (Spark and pyarrow datasets do the same); the
    server writes parts without an extension. If ``required`` (a page reported data), a
    missing or empty directory is an error; otherwise it means "nothing staged".
    """
    import pyarrow.fs as pafs

    selector = pafs.FileSelector(dir_path.rstrip("/"), allow_not_found=True, recursive=False)
    try:
        infos = fs.get_file_info(selector)
    except OSError as e:
        raise ExportError(f"cannot list uncommitted dump {dir_path}: {e}") from e
    files = sorted(
        info.path
        for info in infos
        if info.type == pafs.FileType.File and not info.base_name.startswith(("_", "."))
    )
    if required and not files:
        raise ExportError(
            f"uncommitted dump {dir_path} has no data files, but lakeFS reported data there; "
            "refusing to treat the repository as having no uncommitted objects"
        )
    return files


def iter_uncommitted_addresses(
    fs: pafs.FileSystem, dir_path: str, *, required: bool
) -> Iterator[pa.ChunkedArray]:
    """``physical_address`` of each parquet part (namespace-relative keys), one array per file."""
    for path in uncommitted_files(fs, dir_path, required=required):
        yield read_uncommitted_file(fs, path)


def read_uncommitted_addresses(fs: pafs.FileSystem, dir_path: str, *, required: bool) -> pa.Table:
    """All staged addresses of a dump as a one-column table ``physical_address`` (string)."""
    chunks: list[Any] = []
    for column in iter_uncommitted_addresses(fs, dir_path, required=required):
        chunks.extend(column.chunks)
    return pa.table({ADDRESS_COLUMN: pa.chunked_array(chunks, type=pa.string())})


def read_uncommitted_file(fs: pafs.FileSystem, path: str) -> pa.ChunkedArray:
    """``physical_address`` of one part file of the dump, as strings."""
    try:
        with fs.open_input_file(path) as f:
            parquet = pq.ParquetFile(f)
            if ADDRESS_COLUMN not in parquet.schema_arrow.names:
                raise ExportError(
                    f"uncommitted parquet {path} has no column {ADDRESS_COLUMN!r} "
                    f"(columns: {parquet.schema_arrow.names})"
                )
            column = parquet.read(columns=[ADDRESS_COLUMN]).column(ADDRESS_COLUMN)
    except ExportError:
        raise
    except (OSError, pa.ArrowException) as e:
        raise ExportError(f"cannot read uncommitted parquet {path}: {e}") from e
    try:
        return column.cast(pa.string())
    except pa.ArrowException as e:
        raise ExportError(f"uncommitted parquet {path}: {ADDRESS_COLUMN} is not text: {e}") from e
