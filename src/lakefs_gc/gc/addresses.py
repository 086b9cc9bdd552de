"""Which namespace-relative keys a GC may ever consider (docs/invariants.md, invariant 3).

Listing and inventory rows pass through :func:`deletable_key` before they can become
candidates, and the sweep checks every key again before deleting it: never anything under
``_lakefs/`` (ranges, metaranges, exports, reports), never the legacy ``dummy`` marker, never
a file placed directly under ``data/`` (lakeFS's own GC never really deletes those:
docs/formats/lakefs-storage.md, "Namespace layout"), never anything that is not a plain relative
key inside the namespace.
"""

from __future__ import annotations

import re

METADATA_PREFIX = "_lakefs/"
DATA_PREFIX = "data/"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def deletable_key(key: str) -> bool:
    """True if ``key`` (relative to the storage namespace) may be a GC candidate."""
    if not key or key.startswith("/") or _SCHEME.match(key):
        return False
    parts = key.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return False
    if key.startswith(METADATA_PREFIX) or parts[0] == "_lakefs":
        return False
    if len(parts) == 1:
        return key != "dummy"  # legacy objects at the namespace root; `dummy` is lakeFS's marker
    if parts[0] == "data":
        return len(parts) >= 3  # data/<slice>/<object>, sharded layouts deeper; never data/<file>
    return False  # other root-level directories are not lakeFS data (lakefs-storage.md, "Namespace layout")
