"""Why a listed object is kept or collected: the vocabulary of mark reports and the demo.

Each listed object gets exactly one reason. References are named before age because "staged on a
branch" explains a survivor better than "too young" when both hold; only ``GARBAGE`` is deleted.
"""

from __future__ import annotations

COMMITTED = "committed"  # referenced by an active commit
UNCOMMITTED = "uncommitted"  # staged on some branch (hidden ones included)
RETENTION_CROSS_CHECK = "retention_cross_check"  # only in a commit lakeFS's export expired (gc.retention)
IDENTITY_TWIN = "identity_twin"  # may be a staged identical re-upload lakeFS's dump leaves out (gc.twins)
TOO_YOUNG = "too_young"  # modified at or after the cutoff (may be about to be linked)
GARBAGE = "garbage"  # none of the above: the mark lists it for deletion

#: in precedence order
REASONS = (COMMITTED, UNCOMMITTED, RETENTION_CROSS_CHECK, IDENTITY_TWIN, TOO_YOUNG, GARBAGE)
