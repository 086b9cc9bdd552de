"""The version of the service state's layout: ``<state>/_layout.json``.

A service upgraded in place reads the state the previous release wrote (cycle records, the event
and candidate tables, the range cache). What may change between releases is versioned as one
number, the *layout*: the directories and file formats listed in :mod:`lakefs_gc.service.state`.
The service writes ``{"layout": 2, "written_by": "<lakefs_gc version>"}`` when it takes the state
(right after the lease), and reads it first:

- no marker and no state yet: a new state, the marker is written;
- no marker on a state that holds something: the state of a release from before the marker,
  which is layout 1; the marker is written;
- the layout this code writes, or an older one it reads: read as is (the marker is rewritten
  with this layout and version);
- a newer layout than this code knows (a newer release took the state, then it was rolled back):
  refused with :class:`~lakefs_gc.errors.ConfigError` (exit 3) before anything is written, since
  this release might misread it and a misread cycle record could sweep again, or forget a sweep.

Layouts:

1. the first marked layout (and every state from before the marker);
2. the candidate table's parts gained S3's EncryptionStatus (``encryption``), and the range
   cache's HEAD entries level each entry's address and checksum (recorded as ``head_entries``):
   the identity-twin guard's content evidence. Layout 1 is read as is, no migration: a part
   without ``encryption`` proves no content, and a range cache record's ``entries`` are dropped
   and read again. A release of layout 1 would fail on the new parts; it is refused instead.

A layout adds its migration here, from the layouts it still reads.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from lakefs_gc import __version__
from lakefs_gc.errors import ConfigError, StorageError
from lakefs_gc.storage.directories import StoreDirectory

_log = logging.getLogger(__name__)

MARKER = "_layout.json"
#: the layout this code writes (it reads every layout up to it)
LAYOUT = 2
#: what the state was before it had a marker
UNMARKED_LAYOUT = 1
#: files of the state that say nothing about its layout (the lease is taken before the marker)
_NOT_CONTENT = frozenset({MARKER, "_lease.json"})


@dataclass(frozen=True)
class LayoutDecision:
    """What the service does with a state: the layout it found (None: a new state), and whether
    it (re)writes the marker."""

    found: int | None
    write_marker: bool


def decide_layout(
    marker: dict[str, Any] | None, has_content: bool, written_by: str, *, where: str
) -> LayoutDecision:
    """Pure: the layout of a state from its marker (None: none) and whether it holds anything;
    raises :class:`ConfigError` for a layout this code cannot read, naming it and what to do."""
    if marker is None:
        found = UNMARKED_LAYOUT if has_content else None
        return LayoutDecision(found, write_marker=True)
    layout = marker.get("layout")
    if not isinstance(layout, int) or isinstance(layout, bool) or layout < 1:
        raise ConfigError(
            f"{where}: the state layout marker says layout {layout!r}, which is no layout version; "
            f'restore it (this release writes {{"layout": {LAYOUT}, ...}}) or point service.state elsewhere'
        )
    if layout > LAYOUT:
        by = marker.get("written_by") or "a newer release"
        raise ConfigError(
            f"{where}: the service state has layout {layout}, written by lakefs-gc {by}; this release "
            f"({written_by}) reads layout {LAYOUT} at most. Run lakefs-gc {by} or newer on this state, "
            "or give this release a new service.state and service.checkpoints (it starts with empty "
            "tables; this state stays as the newer release left it)"
        )
    return LayoutDecision(layout, write_marker=(layout, marker.get("written_by")) != (LAYOUT, written_by))


def take_layout(directory: StoreDirectory, written_by: str = __version__) -> int | None:
    """Read the marker of the state in ``directory``, refuse a layout this code cannot read, and
    write the marker; returns the layout found (None: a new state). Call it holding the lease."""
    where = directory.uri(MARKER)
    data = directory.read(MARKER)
    marker: dict[str, Any] | None = None
    if data is not None:
        try:
            body = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ConfigError(f"{where}: unreadable state layout marker ({e}); restore or remove it") from e
        marker = body if isinstance(body, dict) else {"layout": body}
    has_content = any(name not in _NOT_CONTENT for name in _entries(directory))
    decision = decide_layout(marker, has_content, written_by, where=where)
    if decision.found is None:
        _log.info("new service state %s: layout %d", directory, LAYOUT)
    elif marker is None:
        _log.info("service state %s has no layout marker: layout %d", directory, UNMARKED_LAYOUT)
    if decision.write_marker:
        body = {"layout": LAYOUT, "written_by": written_by}
        directory.write(MARKER, json.dumps(body, indent=1).encode("utf-8"))
    return decision.found


def _entries(directory: StoreDirectory) -> list[str]:
    """The names of the files and directories right under the state (none if it does not exist)."""
    import pyarrow.fs as pafs

    fs, base = directory.filesystem()
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    except OSError as e:
        raise StorageError(f"cannot list {directory.uri()}: {e}") from e
    return [i.base_name for i in infos]
