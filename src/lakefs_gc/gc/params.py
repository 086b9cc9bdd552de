"""What one mark and one sweep are asked to do: frozen values built once at the edge.

The command line, the service and the demo turn their settings into a :class:`MarkParams` or a
:class:`SweepParams` (``GcOptions.mark_params`` / ``GcOptions.sweep_params``) and pass it down;
nothing below reads settings, flags or the environment. Adapters (lakeFS, the stores) and the
clock are passed beside them as ports (:mod:`lakefs_gc.gc.ports`), so the values here are only
policy: how conservative to be, and how hard to push.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta


@dataclass(frozen=True)
class MarkParams:
    """One mark of one repository."""

    repository: str
    #: objects modified less than this long ago are kept (raised to lakeFS's grace period)
    min_age: timedelta
    #: forces the min age below the grace period (tests only); None: never
    unsafe_min_age: timedelta | None
    #: how long lakeFS may take to compute the active commits
    prepare_commits_timeout: timedelta
    #: the inventory destination whose newest snapshot replaces a listing; None: list
    inventory: str | None
    #: the newest snapshot must be younger than this, or the mark is refused
    max_inventory_age: timedelta
    #: let the identity-twin guard rule pairs out by the objects' proven MD5s: assumes every checksum
    #: lakeFS recorded describes its own object's bytes (docs/formats/lakefs-export-hazards.md,
    #: "Ruling twins out by content")
    trust_checksums: bool = False
    #: Spark tasks per stage; None: the session's default parallelism
    parallelism: int | None = None
    #: storage prices per GiB-month by ``<blockstore>/<class>`` over :data:`gc.cost.DEFAULT_PRICES`
    prices: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SweepParams:
    """One sweep of one repository's mark: the safety rails and the pace."""

    repository: str
    #: ask lakeFS again before deleting and keep what is referenced now
    #: (docs/invariants.md, invariants 1 and 6)
    revalidate: bool
    #: a mark older than this is swept only when revalidated
    max_mark_age: timedelta
    #: refuse to delete more than this share of the objects the mark listed, unless ``force``
    max_delete_fraction: float
    #: how long lakeFS may take to compute the active commits (revalidation)
    prepare_commits_timeout: timedelta
    #: bulk-delete requests in flight per task, at most
    concurrency: int
    #: retries of a throttled or transiently failed request
    max_retries: int
    #: ceiling on objects deleted per second over the whole sweep; None: none
    max_deletes_per_second: float | None = None
    #: override the delete-fraction guard (and sweep a mark that does not say what it listed)
    force: bool = False
    #: delete nothing: report what would be deleted (after revalidation)
    dry_run: bool = False
    #: Spark tasks per stage; None: the session's default parallelism
    parallelism: int | None = None
