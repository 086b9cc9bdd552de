"""``swept/``: the sweep's report, as a log of small parts that a killed sweep can resume from.

The sweep's tasks write ``swept/`` as many small parquet parts (``address, outcome, error``), each
written whole once its rows are known (:func:`write_part`: one upload on S3/Azure, a rename on
local disks). A part holds either confirmed outcomes (``deleted``/``missing``) or only ``failed``
ones (``...-cNNN-failed.snappy.parquet``). Part names start with the run's tag, which starts with
the run's UTC start time, so parts sort by run.

The reading rule, for a ``swept/`` in any state (after a kill, or written by an older lakefs-gc
with one mixed part per task): parts that cannot be read (no parquet footer: a write cut short)
are ignored; an address's outcome is its confirmed one if any part confirms it (``deleted``
before ``missing``), else its newest ``failed`` one (:func:`effective_swept`). How a sweep run
uses it to resume: :mod:`lakefs_gc.spark.sweep.resume`.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakefs_gc.errors import StorageError
from lakefs_gc.spark.report.layout import SWEPT, SWEPT_SCHEMA
from lakefs_gc.storage.writes import write_whole

if TYPE_CHECKING:
    import pyarrow.fs as pafs

_log = logging.getLogger(__name__)

CONFIRMED = ("deleted", "missing")
FAILED_SUFFIX = "-failed.snappy.parquet"
_PART = re.compile(r"part-(?P<partition>\d+)-(?P<tag>.+)-c(?P<seq>\d+)(?:-failed)?\.snappy\.parquet$")


def run_tag(now: datetime | None = None) -> str:
    """A sweep run's part-name tag: starts with the UTC start time, so that tags sort by run."""
    when = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{when}-{uuid.uuid4().hex[:12]}"


def swept_part_path(
    base: str, partition: int, tag: str, seq: int, *, failed: bool, directory: str = SWEPT
) -> str:
    """Where a task writes its ``seq``-th part (``directory``: ``swept``, or a dry run's ``dry-run``)."""
    suffix = FAILED_SUFFIX if failed else ".snappy.parquet"
    return f"{base}/{directory}/part-{partition:05d}-{tag}-c{seq:03d}{suffix}"


def is_failed_part(path: str) -> bool:
    return path.endswith(FAILED_SUFFIX)


def part_order(path: str) -> tuple[str, int, str]:
    """Sort key of a part: its run tag, then its number within the task (names of other writers last)."""
    name = path.rsplit("/", 1)[-1]
    match = _PART.match(name)
    return (match["tag"], int(match["seq"]), name) if match else ("~", 0, name)


def write_part(fs: pafs.FileSystem, path: str, rows: Mapping[str, list[Any]]) -> None:
    """Write one ``swept/`` part whole: encoded in memory, then one upload (S3 and Azure show an object
    only once its upload completes) or, on a local disk, a hidden temporary file renamed into place.
    A kill therefore never leaves a visible part without its footer."""

    buffer = pa.BufferOutputStream()
    pq.write_table(pa.table(dict(rows), schema=SWEPT_SCHEMA), buffer, compression="snappy")
    write_whole(fs, path, buffer.getvalue().to_pybytes())


def read_part(fs: pafs.FileSystem, path: str) -> pa.Table | None:
    """A part's rows, or ``None`` when it is not a readable parquet file (a write cut short).
    A storage error (the part may well be fine) raises: never taken for "nothing confirmed"."""
    try:
        with fs.open_input_file(path) as f:
            return pq.read_table(f, columns=list(SWEPT_SCHEMA.names))
    except OSError as e:
        raise StorageError(f"cannot read sweep report part {path}: {e}") from e
    except pa.ArrowException as e:  # ArrowInvalid: no footer, not parquet
        _log.warning("ignoring unreadable sweep report part %s: %s", path, e)
        return None


def effective_swept(fs: pafs.FileSystem, paths: list[str]) -> pa.Table:
    """``swept/`` by the reading rule (module docstring): one row per address, on the driver."""
    best: dict[str, tuple[str, str | None]] = {}
    for path in sorted(paths, key=part_order):
        table = read_part(fs, path)
        if table is None:
            continue
        for address, outcome, error in zip(
            *(table.column(c).to_pylist() for c in SWEPT_SCHEMA.names), strict=True
        ):
            seen = best.get(address)
            # newer replaces older unless the older is confirmed; deleted replaces missing
            if seen is None or seen[0] not in CONFIRMED or (outcome == "deleted" and seen[0] == "missing"):
                best[address] = (outcome, error)
    return pa.table(
        {
            "address": list(best),
            "outcome": [o for o, _ in best.values()],
            "error": [e for _, e in best.values()],
        },
        schema=SWEPT_SCHEMA,
    )


def earlier_attempts(fs: pafs.FileSystem, directory: str, partition: int, tag: str) -> list[str]:
    """The parts that earlier attempts of this run's task ``partition`` wrote to ``directory``.

    A task whose executor was lost (a worker killed, a container evicted) may have flushed parts
    before it died; Spark runs the task again elsewhere. The new attempt reads them first: their
    addresses have an outcome in this run already, and are neither asked again nor recorded twice.
    Every task looks (one listing of ``directory``): Python tasks cannot tell a stage re-run
    (after a lost executor's shuffle output) from a first run, both are attempt 0.
    """
    import pyarrow.fs as pafs

    selector = pafs.FileSelector(directory, allow_not_found=True, recursive=False)
    try:
        infos = fs.get_file_info(selector)
    except OSError as e:
        raise StorageError(f"cannot list {directory}: {e}") from e
    parts = []
    for info in infos:
        match = _PART.match(info.base_name)
        if match is None or int(match["partition"]) != partition:
            continue
        if match["tag"] == tag or match["tag"].startswith(f"{tag}."):
            parts.append(info.path)
    return sorted(parts, key=part_order)
