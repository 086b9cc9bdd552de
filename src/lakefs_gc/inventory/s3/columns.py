"""S3 Inventory column names, matched whatever their spelling.

CSV uses CamelCase (``LastModifiedDate``), ORC/Parquet snake_case (``last_modified_date``); both
are normalised (lower case, no underscores) before being looked up.
"""

from __future__ import annotations

#: normalised column name -> INVENTORY_SCHEMA / filter column
WANTED = {
    "bucket": "bucket",
    "key": "key",
    "size": "size",
    "lastmodifieddate": "last_modified",
    "etag": "etag",
    "encryptionstatus": "encryption",
    "islatest": "is_latest",
    "isdeletemarker": "is_delete_marker",
}
#: the columns the GC cannot do without (INVENTORY_SCHEMA names)
REQUIRED = ("bucket", "key", "last_modified")
#: normalised names whose presence makes a delivery a versioned one
VERSION_COLUMNS = {"versionid", "islatest", "isdeletemarker"}


def norm(name: str) -> str:
    """``LastModifiedDate`` and ``last_modified_date`` both -> ``lastmodifieddate``."""
    return name.replace("_", "").lower()


def selected(columns: tuple[str, ...] | list[str]) -> dict[str, str]:
    """Wanted target name -> column name in the file."""
    return {WANTED[norm(c)]: c for c in columns if norm(c) in WANTED}
