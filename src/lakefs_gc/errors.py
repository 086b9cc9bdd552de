"""The one error base of lakefs-gc and its meaningful subclasses.

Every failure the tool can explain derives from :class:`GcError`, so the CLI can print it
without a traceback and exit with a distinct code, and callers can catch one type. Per-object
delete failures are *data* (written to sweep reports), never exceptions.
"""

from __future__ import annotations


class GcError(Exception):
    """Base of every error lakefs-gc raises on purpose."""

    #: process exit code the CLI uses for this kind of error
    exit_code = 1


class ConfigError(GcError):
    """Settings are missing, malformed or contradictory; nothing was attempted."""

    exit_code = 3


class SSTableFormatError(GcError):
    """An SSTable (range/metarange file) cannot be read safely.

    Always names the file and the byte offset, because a corrupt range must abort a mark
    (fail closed) and an operator needs to find the file.
    """

    exit_code = 2

    def __init__(self, name: str, offset: int | None, reason: str) -> None:
        self.name = name
        self.offset = offset
        self.reason = reason
        where = f"{name}" if offset is None else f"{name} at byte offset {offset}"
        super().__init__(f"{where}: {reason}")


class LakeFSError(GcError):
    """lakeFS answered with an error or could not be reached (after retries)."""

    exit_code = 4

    def __init__(self, message: str, *, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


class NoRetentionRulesError(LakeFSError):
    """The repository has no GC rules, so lakeFS cannot say which commits are active.

    Never read as "no commit is active": that would make every committed object garbage.
    """


class ExportError(GcError):
    """A lakeFS export (commits CSV, uncommitted parquet, range file) is missing or unreadable."""

    exit_code = 5


class StorageError(GcError):
    """An object store could not be reached or a location is not understood."""

    exit_code = 6
