"""Paginating lakeFS's uncommitted dump (``prepareGarbageCollectionUncommitted``) safely.

The server answers page by page. Each page writes at most one parquet file under
``<ns>/_lakefs/retention/gc/uncommitted/<run_id>/uncommitted/`` and reports that directory in
``gc_uncommitted_location`` *only if that page wrote rows* (docs/formats/lakefs-gc-api.md, "The
uncommitted export"). The Scala client keeps only the last page's location, so a dump whose last
page happened to be empty reads as "no uncommitted data" and staged objects become deletion
candidates (lakefs-gc-api.md, "An empty last page"). Here:

* every page is requested until the continuation token is blank;
* every page must carry the same ``run_id`` (it becomes the mark id);
* any non-empty location is remembered (all pages write to the same directory);
* if no page returned a location, the directory is *derived* from the namespace and run id.

Whether the directory exists is the reader's concern, and the two cases differ:

* a location the server returned means some page wrote a file, so a missing or empty
  directory is an error (fail closed; see :attr:`UncommittedDump.data_expected`);
* a derived location that does not exist means no page had data, which is acceptable *only*
  because no page returned a location. Reading the derived directory anyway (instead of
  concluding "nothing staged") also protects against a server that writes data but forgets
  to report it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from lakefs_gc.errors import GcError, LakeFSError

_log = logging.getLogger(__name__)

UNCOMMITTED_PREFIX_TEMPLATE = "_lakefs/retention/gc/uncommitted/{run_id}/uncommitted/"

#: a dump that needs more pages than this is looping, not progressing
DEFAULT_MAX_PAGES = 100_000


class UncommittedDumpError(LakeFSError):
    """The dump failed after lakeFS had started it: ``run_id`` names the aborted run (and mark)."""

    def __init__(self, message: str, *, run_id: str, status: int | None = None) -> None:
        super().__init__(message, status=status)
        self.run_id = run_id

    def wire_fields(self) -> dict[str, Any]:
        return {"status": self.status, "run_id": self.run_id}

    @classmethod
    def from_wire(cls, message: str, fields: Mapping[str, Any]) -> GcError:
        return cls(message, run_id=str(fields.get("run_id", "")), status=fields.get("status"))


@dataclass(frozen=True)
class UncommittedPage:
    """One answer of ``prepareGarbageCollectionUncommitted``."""

    run_id: str
    location: str
    continuation_token: str | None


@dataclass(frozen=True)
class UncommittedDump:
    """The outcome of a complete uncommitted dump.

    ``run_id`` becomes the GC mark id. ``location`` is the directory of parquet parts (a full
    storage URI, ending in ``/``), either as returned by the server or derived from the
    namespace when no page returned one.
    """

    run_id: str
    location: str
    location_source: Literal["server", "derived"]
    pages: int
    pages_with_data: int

    @property
    def data_expected(self) -> bool:
        """True when the server reported data, so the directory must exist and hold files."""
        return self.location_source == "server"


def uncommitted_location(storage_namespace: str, run_id: str) -> str:
    """``<ns>/_lakefs/retention/gc/uncommitted/<run_id>/uncommitted/`` (server template)."""
    if not run_id:
        raise LakeFSError("cannot derive the uncommitted location without a run id")
    return storage_namespace.rstrip("/") + "/" + UNCOMMITTED_PREFIX_TEMPLATE.format(run_id=run_id)


def collect_uncommitted_dump(
    fetch_page: Callable[[str | None], UncommittedPage],
    *,
    repository: str,
    storage_namespace: str,
    max_pages: int = DEFAULT_MAX_PAGES,
) -> UncommittedDump:
    """Call ``fetch_page(token)`` from ``None`` until the token is blank; see module docstring."""
    run_id: str | None = None
    location: str | None = None
    seen_tokens: set[str] = set()
    pages = pages_with_data = 0
    token: str | None = None
    try:
        while True:
            page = fetch_page(token)
            pages += 1
            run_id = _check_run_id(repository, run_id, page, pages)
            if page.location:
                pages_with_data += 1
                location = _check_location(repository, location, page.location)
            token = page.continuation_token or None
            if token is None:
                break
            if token in seen_tokens or pages >= max_pages:
                raise LakeFSError(
                    f"uncommitted dump of repository {repository!r} is not progressing "
                    f"(page {pages}, run {run_id}, repeated or endless continuation token)"
                )
            seen_tokens.add(token)
    except LakeFSError as e:
        if run_id is None:
            raise
        # lakeFS started run `run_id`: say which, so the aborted mark can be reported as failed
        raise UncommittedDumpError(
            f"uncommitted dump of repository {repository!r} (run {run_id}) failed after {pages} page(s): {e}",
            run_id=run_id,
            status=e.status,
        ) from e
    return _finish(repository, storage_namespace, run_id, location, pages, pages_with_data)


def _check_run_id(repository: str, run_id: str | None, page: UncommittedPage, number: int) -> str:
    if not page.run_id:
        raise LakeFSError(f"uncommitted dump of repository {repository!r}: page {number} has no run_id")
    if run_id is not None and page.run_id != run_id:
        raise LakeFSError(
            f"uncommitted dump of repository {repository!r}: page {number} has run_id "
            f"{page.run_id!r}, earlier pages had {run_id!r}"
        )
    return page.run_id


def _check_location(repository: str, known: str | None, new: str) -> str:
    if known is not None and known.rstrip("/") != new.rstrip("/"):
        raise LakeFSError(
            f"uncommitted dump of repository {repository!r}: pages report different locations "
            f"{known!r} and {new!r}"
        )
    return known if known is not None else new


def _finish(
    repository: str,
    storage_namespace: str,
    run_id: str,
    location: str | None,
    pages: int,
    pages_with_data: int,
) -> UncommittedDump:
    if location is not None:
        source: Literal["server", "derived"] = "server"
        final = location if location.endswith("/") else location + "/"
    else:
        source = "derived"
        final = uncommitted_location(storage_namespace, run_id)
        _log.info(
            "uncommitted dump of %s (run %s): no page reported data; will read derived %s if it exists",
            repository,
            run_id,
            final,
        )
    return UncommittedDump(
        run_id=run_id,
        location=final,
        location_source=source,
        pages=pages,
        pages_with_data=pages_with_data,
    )
