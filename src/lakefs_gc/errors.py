"""The one error base of lakefs-gc and its meaningful subclasses.

Every failure the tool can explain derives from :class:`GcError`, so the CLI can print it
without a traceback and exit with a distinct code, and callers can catch one type. Per-object
delete failures are *data* (written to sweep reports), never exceptions.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from typing import Any


class ExitCode(IntEnum):
    """The ``lakefs-gc`` exit statuses: one per outcome (the README's table; tested row by row)."""

    OK = 0
    #: an unexpected error: a bug (the traceback is printed); report it
    INTERNAL = 1
    #: the command line is wrong (unknown flag, missing argument, no command)
    USAGE = 2
    #: bad settings or arguments (config file, flags, environment, a mark id that does not exist)
    SETTINGS = 3
    #: lakeFS answered with an error or could not be reached (after retries)
    LAKEFS = 4
    #: a lakeFS export or a mark report is missing or unreadable
    EXPORT = 5
    #: an object store could not be reached or answered with an error
    STORAGE = 6
    #: no usable inventory delivery (missing, pending, too old, rejected)
    INVENTORY = 7
    #: a corrupt range or metarange file (SSTable)
    CORRUPT_RANGE = 8
    #: the work finished but some objects failed (sweep deletes, backup or restore copies): see the report
    PARTIAL = 9
    #: a safety guard refused (a failed or stale mark, too large a sweep): nothing was deleted
    REFUSED = 10
    #: ``demo``/``serve`` (embedded demo): the GC did not do what the demo expects
    CHECK_FAILED = 11
    #: Spark failed: a job (lost executors, out of memory) or, in ``serve``, a streaming query
    SPARK = 12
    #: ``serve``: another service holds the lease on the same ``service.state``
    STATE_IN_USE = 13
    #: interrupted (Ctrl-C)
    INTERRUPTED = 130


class GcError(Exception):
    """Base of every error lakefs-gc raises on purpose.

    An error raised in a Spark task reaches the driver only as text; :meth:`wire_fields` and
    :meth:`from_wire` are how it crosses whole (``lakefs_gc.spark.runtime.failures``): a subclass
    with fields beyond its message names them, and is rebuilt with them, so the operator sees the
    same error, and the CLI exits with the same code, as if it had been raised on the driver.
    """

    #: process exit code the CLI uses for this kind of error
    exit_code: int = ExitCode.INTERNAL

    def wire_fields(self) -> dict[str, Any]:
        """What this error carries besides its message (JSON values)."""
        return {}

    @classmethod
    def from_wire(cls, message: str, fields: Mapping[str, Any]) -> GcError:
        """The error :meth:`wire_fields` and ``str()`` describe (fields may be missing: then the
        message alone)."""
        return cls(message)


class ConfigError(GcError):
    """Settings are missing, malformed or contradictory; nothing was attempted."""

    exit_code = ExitCode.SETTINGS


class SSTableFormatError(GcError):
    """An SSTable (range/metarange file) cannot be read safely.

    Always names the file and the byte offset, because a corrupt range must abort a mark
    (fail closed) and an operator needs to find the file.
    """

    exit_code = ExitCode.CORRUPT_RANGE

    def __init__(self, name: str, offset: int | None, reason: str) -> None:
        self.name = name
        self.offset = offset
        self.reason = reason
        where = f"{name}" if offset is None else f"{name} at byte offset {offset}"
        super().__init__(f"{where}: {reason}")

    def wire_fields(self) -> dict[str, Any]:
        return {"name": self.name, "offset": self.offset, "reason": self.reason}

    @classmethod
    def from_wire(cls, message: str, fields: Mapping[str, Any]) -> GcError:
        if "reason" not in fields:
            error = cls("", None, message)
            error.args = (message,)
            return error
        return cls(str(fields.get("name", "")), fields.get("offset"), str(fields["reason"]))


class LakeFSError(GcError):
    """lakeFS answered with an error or could not be reached (after retries)."""

    exit_code = ExitCode.LAKEFS

    def __init__(self, message: str, *, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)

    def wire_fields(self) -> dict[str, Any]:
        return {"status": self.status}

    @classmethod
    def from_wire(cls, message: str, fields: Mapping[str, Any]) -> GcError:
        return cls(message, status=fields.get("status"))


class NoRetentionRulesError(LakeFSError):
    """The repository has no GC rules, so lakeFS cannot say which commits are active.

    Never read as "no commit is active": that would make every committed object garbage.
    """


class ExportError(GcError):
    """A lakeFS export (commits CSV, uncommitted parquet, range file) is missing or unreadable."""

    exit_code = ExitCode.EXPORT


class StorageError(GcError):
    """An object store could not be reached or a location is not understood."""

    exit_code = ExitCode.STORAGE


class StateInUseError(GcError):
    """Another ``lakefs-gc serve`` holds the lease on this service state: two services on one state
    would interleave their cycles and clean-ups, so the second one refuses to start (or stops)."""

    exit_code = ExitCode.STATE_IN_USE
