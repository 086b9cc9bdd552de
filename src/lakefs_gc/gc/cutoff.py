"""The cutoff: objects modified at or after it are never deleted (docs/invariants.md, invariant 2).

``cutoff = now − max(min_age, grace_period)``. lakeFS accepts a link to a physical address for
``grace_period`` after issuing it (docs/formats/lakefs-gc-api.md, "Safety windows"), so an object
younger than that may be about to become referenced; a client with a smaller min age (lakeFS's
Scala job defaulted to 6 h while servers moved to 24 h) can delete data that is still being
linked. The only way below the grace period is an explicit ``unsafe_min_age``, meant for tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from lakefs_gc.durations import format_duration
from lakefs_gc.errors import ConfigError

DEFAULT_MIN_AGE = timedelta(hours=24)


@dataclass(frozen=True)
class Cutoff:
    """The effective cutoff of one mark, with why it is what it is (for logs and reports)."""

    time: datetime
    min_age: timedelta
    reason: str

    def admits(self, last_modified: datetime) -> bool:
        """True when an object this old may be a candidate (strictly older than the cutoff)."""
        return last_modified < self.time


def compute_cutoff(
    now: datetime,
    *,
    grace_period: timedelta,
    min_age: timedelta = DEFAULT_MIN_AGE,
    unsafe_min_age: timedelta | None = None,
) -> Cutoff:
    """The cutoff for a mark starting at ``now`` (timezone-aware)."""
    if now.tzinfo is None:
        raise ConfigError("the GC clock must be timezone-aware (UTC)")
    if min_age < timedelta(0) or grace_period < timedelta(0):
        raise ConfigError("min age and grace period cannot be negative")
    if unsafe_min_age is not None:
        if unsafe_min_age < timedelta(0):
            raise ConfigError("--unsafe-min-age cannot be negative")
        reason = (
            f"UNSAFE: min age forced to {format_duration(unsafe_min_age)} "
            f"(lakeFS grace period {format_duration(grace_period)})"
        )
        return Cutoff(now - unsafe_min_age, unsafe_min_age, reason)
    if grace_period > min_age:
        grace = format_duration(grace_period)
        reason = f"min age {format_duration(min_age)} raised to lakeFS's grace period {grace}"
        return Cutoff(now - grace_period, grace_period, reason)
    return Cutoff(now - min_age, min_age, f"min age {format_duration(min_age)}")
