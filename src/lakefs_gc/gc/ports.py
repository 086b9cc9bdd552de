"""The ports of a mark and a sweep: what they need from the world, as small Protocols.

A job body receives its adapters instead of building them, so that the command line, the service
and the tests each wire what they need (one lakeFS client per command, a deleter that only
records for ``sweep --dry-run``, a fixed clock in a test) and the job reads like the algorithm.
The adapters live at the edge: :class:`~lakefs_gc.lakefs.client.LakeFSClient` is a
:class:`RefsReader`; :mod:`lakefs_gc.storage.deleting` has the :class:`DeleterFactory` of the
stores and the dry run's.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from lakefs_gc.gc.retention import CommitGraph
    from lakefs_gc.gc.twins import StatAnswer


class Clock(Protocol):
    """The time now, timezone-aware (UTC). Injected: a cutoff and a mark's age are computed from it."""

    def __call__(self) -> datetime: ...


def utc_now() -> datetime:
    """The system :class:`Clock`."""
    return datetime.now(timezone.utc)


class RepositoryInfo(Protocol):
    """A repository as lakeFS describes it."""

    @property
    def id(self) -> str: ...
    @property
    def storage_namespace(self) -> str: ...
    @property
    def storage_id(self) -> str: ...
    @property
    def read_only(self) -> bool: ...


class StagedExport(Protocol):
    """A complete uncommitted dump: where lakeFS wrote the staged addresses (parquet parts)."""

    @property
    def run_id(self) -> str: ...
    @property
    def location(self) -> str: ...
    @property
    def location_source(self) -> str: ...
    @property
    def pages(self) -> int: ...
    @property
    def data_expected(self) -> bool: ...


class CommitsExport(Protocol):
    """Where lakeFS wrote the active commits (a CSV of commit id, expired flag, metarange id)."""

    @property
    def location(self) -> str: ...
    @property
    def run_id(self) -> str: ...


class RefsReader(Protocol):
    """What a mark (and a sweep's revalidation) asks lakeFS, on the driver.

    Order is part of the contract (docs/invariants.md, invariant 1): the uncommitted dump is
    complete before the active commits are asked for, and ranges are read after both, so an
    object committed in between is still seen as referenced. Every method raises rather than
    answer "nothing" when it cannot answer (invariant 4).
    """

    def get_repository(self, repository: str) -> RepositoryInfo: ...

    def blockstore_type(self, storage_id: str) -> str: ...

    def grace_period(self, *, default: timedelta | None = None) -> timedelta: ...

    def prepare_uncommitted(
        self, repository: str, *, storage_namespace: str | None = None
    ) -> StagedExport: ...

    def prepare_commits(self, repository: str, *, timeout: float | None = None) -> CommitsExport: ...

    def meta_range_location(self, repository: str, meta_range_id: str) -> str: ...

    def range_location(self, repository: str, range_id: str) -> str: ...


class CommitGraphReader(Protocol):
    """lakeFS's commit graph for the retention cross-check (docs/invariants.md, invariant 6).

    ``seeds`` are commits that must be in the graph besides the branch HEADs (lakeFS's exported
    active commits, which include dangling ones no branch reaches). Raises rather than answer with
    a partial graph (invariant 4): a missing commit would mean fewer active commits.
    """

    def commit_graph(self, repository: str, seeds: Collection[str]) -> CommitGraph: ...

    def served_address(self, repository: str, branch: str, path: str) -> StatAnswer:
        """The physical address ``branch`` serves at ``path``, as lakeFS spells it (for the
        identity-twin guard); never raises: a failure is an ``unknown`` answer."""
        ...


class DeleteResult(Protocol):
    """What became of one address: ``deleted``, ``missing`` or ``failed`` (``error`` says why)."""

    @property
    def address(self) -> str: ...
    @property
    def outcome(self) -> str: ...
    @property
    def error(self) -> str | None: ...


class Deleter(Protocol):
    """Deletes namespace-relative keys in bulk, one result per address, in input order.

    Per-object failures are results, never exceptions; every address is checked with
    :func:`~lakefs_gc.gc.addresses.deletable_key` again before it is deleted (invariant 3).
    """

    max_batch: int

    def delete(self, addresses: Sequence[str]) -> Sequence[DeleteResult]: ...

    def close(self) -> None: ...


class DeleterFactory(Protocol):
    """Opens one :class:`Deleter` per sweep task, on an executor (so: picklable, holding settings,
    never a client). ``throttle`` paces and retries its requests; ``not_modified_since`` is the
    mark's cutoff, enforced again at delete time where the store can (invariant 2).

    ``dry_run`` is true for a factory whose deleters delete nothing (``sweep --dry-run``): the
    sweep then records what would be deleted instead of a ``swept/`` report.
    """

    @property
    def dry_run(self) -> bool: ...

    def __call__(self, *, throttle: Any, not_modified_since: datetime | None) -> Deleter: ...
