"""Why a listed object is kept or collected: the vocabulary of mark reports and the demo.

Each listed object gets exactly one reason. References are named before age because "staged on a
branch" explains a survivor better than "too young" when both hold; only ``GARBAGE`` is deleted.
"""

from __future__ import annotations

COMMITTED = "committed"  # referenced by an active commit
UNCOMMITTED = "uncommitted"  # staged on some branch (hidden ones included)
TOO_YOUNG = "too_young"  # modified at or after the cutoff (may be about to be linked)
GARBAGE = "garbage"  # none of the above: the mark lists it for deletion

#: in precedence order
REASONS = (COMMITTED, UNCOMMITTED, TOO_YOUNG, GARBAGE)
