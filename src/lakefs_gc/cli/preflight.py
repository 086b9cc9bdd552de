"""Checks that run before Spark starts: is lakeFS there, does the repository exist, does the mark.

Starting Spark costs seconds and a screen of JVM output; a wrong endpoint, a typo in a repository
name or a mark id that does not exist should fail in well under a second with one line instead.
Nothing here replaces the checks the mark and the sweep make themselves (they run again there,
against the state at that moment): this only moves the first failure forward.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lakefs_gc.errors import GcError, LakeFSError
from lakefs_gc.lakefs.answers import HTTP_NOT_FOUND
from lakefs_gc.lakefs.client import LakeFSClient
from lakefs_gc.settings import GcSettings
from lakefs_gc.spark.report.layout import ReportDir
from lakefs_gc.spark.report.read import read_summary
from lakefs_gc.storage.locations import parse_storage_namespace


@dataclass(frozen=True)
class Preflight:
    """The repositories that passed (with their mark ids for a sweep) and the errors of the others."""

    ready: list[tuple[str, str | None]]
    failures: list[tuple[str, GcError]]


def preflight(
    settings: GcSettings,
    client: LakeFSClient,
    command: str,
    repositories: Sequence[str],
    mark_ids: Sequence[str],
) -> Preflight:
    """Ask lakeFS for every repository (and read the mark a sweep names); an unreachable lakeFS
    fails at once, a repository's own problem only that repository."""
    ready: list[tuple[str, str | None]] = []
    failures: list[tuple[str, GcError]] = []
    for index, repository in enumerate(repositories):
        mark_id = mark_ids[index] if command == "sweep" else None
        try:
            _check(client, settings, repository, mark_id)
        except LakeFSError as e:
            if e.status is None:  # not an answer about this repository: lakeFS is not there
                raise
            failures.append((repository, _not_found(e, repository)))
            continue
        except GcError as e:
            failures.append((repository, e))
            continue
        ready.append((repository, mark_id))
    return Preflight(ready, failures)


def _check(client: LakeFSClient, settings: GcSettings, repository: str, mark_id: str | None) -> None:
    repo = client.get_repository(repository)
    namespace = parse_storage_namespace(repo.storage_namespace, local_root=settings.storage.local_root)
    if mark_id is None:
        return
    read_summary(ReportDir(namespace, mark_id, settings.storage))  # refuses a missing, failed or other mark


def _not_found(error: LakeFSError, repository: str) -> LakeFSError:
    if error.status == HTTP_NOT_FOUND:
        return LakeFSError(
            f"repository {repository!r} does not exist in lakeFS ({error})", status=error.status
        )
    return error
