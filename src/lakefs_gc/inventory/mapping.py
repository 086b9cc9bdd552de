"""From inventory rows to per-repository candidates.

One inventory usually covers a whole bucket (or storage account) and therefore many repositories'
storage namespaces. Each row is routed to the namespace whose key prefix it starts with (the
longest, should namespaces nest), and its key becomes a namespace-relative ``address``. Rows
outside every configured namespace, under ``_lakefs/``, directly under ``data/`` or otherwise not
deletable are dropped here (docs/invariants.md, invariant 3), exactly as the listing drops them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from lakefs_gc.storage.locations import StorageLocation

CANDIDATE_SCHEMA = pa.schema(
    [
        ("repository", pa.string()),
        ("address", pa.string()),
        ("size", pa.int64()),
        ("last_modified", pa.timestamp("us", tz="UTC")),
        ("etag", pa.string()),
        ("delivery_id", pa.string()),
        ("snapshot_time", pa.timestamp("us", tz="UTC")),
    ]
)


@dataclass(frozen=True)
class NamespaceRoute:
    """A repository's storage namespace as an inventory sees it: a bucket/container and key prefix."""

    repository: str
    container: str
    prefix: str  # "" for a namespace at the bucket root, else ending in "/"

    @classmethod
    def of(cls, repository: str, namespace: StorageLocation) -> NamespaceRoute:
        key = namespace.key.strip("/")
        return cls(repository, namespace.container, key + "/" if key else "")


def route_rows(
    rows: pa.Table | pa.RecordBatch,
    routes: Sequence[NamespaceRoute],
    *,
    delivery_id: str,
    snapshot_time: datetime,
) -> pa.Table:
    """``rows`` (INVENTORY_SCHEMA) as candidates (CANDIDATE_SCHEMA) of the routed repositories.

    Vectorised: a handful of Arrow kernels per route, no Python per row (an inventory has
    millions of rows per data file).
    """
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
    keys, buckets = table.column("key"), table.column("bucket")
    unclaimed: pa.ChunkedArray | None = None  # None: no route has claimed any row yet
    parts: list[pa.Table] = []
    for route in sorted(routes, key=lambda r: len(r.prefix), reverse=True):  # longest prefix wins
        mine = pc.equal(buckets, route.container)
        if route.prefix:
            mine = pc.and_(mine, pc.starts_with(keys, route.prefix))
        mine = pc.fill_null(mine, False)  # a row without bucket or key belongs to no namespace
        if unclaimed is not None:
            mine = pc.and_(mine, unclaimed)
        unclaimed = pc.invert(mine) if unclaimed is None else pc.and_not(unclaimed, mine)
        rows_of_route = pc.indices_nonzero(mine)
        if len(rows_of_route) == 0:
            continue
        addresses = pc.utf8_slice_codeunits(keys.take(rows_of_route), len(route.prefix))
        keep = deletable_keys(addresses)
        if not pc.all(keep).as_py():
            rows_of_route, addresses = rows_of_route.filter(keep), addresses.filter(keep)
        parts.append(_candidates(table, rows_of_route, addresses, route, delivery_id, snapshot_time))
    return pa.concat_tables(parts) if parts else CANDIDATE_SCHEMA.empty_table()


def _candidates(
    table: pa.Table,
    rows: pa.Array,
    addresses: pa.ChunkedArray,
    route: NamespaceRoute,
    delivery_id: str,
    snapshot_time: datetime,
) -> pa.Table:
    n = len(rows)
    snapshot = pa.array([snapshot_time], CANDIDATE_SCHEMA.field("snapshot_time").type)[0]
    return pa.table(
        {
            "repository": pa.repeat(pa.scalar(route.repository, pa.string()), n),
            "address": addresses,
            "size": table.column("size").take(rows),
            "last_modified": table.column("last_modified").take(rows),
            "etag": table.column("etag").take(rows),
            "delivery_id": pa.repeat(pa.scalar(delivery_id, pa.string()), n),
            "snapshot_time": pa.repeat(snapshot, n),
        },
        schema=CANDIDATE_SCHEMA,
    )


# ---- deletable_key, vectorised -----------------------------------------------------------------

#: one path segment other than "", "." and ".." (RE2 has no look-ahead, hence the three branches)
_SEGMENT = r"(?:[^/.][^/]*|\.[^/.][^/]*|\.\.[^/]+)"
#: data/<slice>/<object>, or deeper (sharded layouts); never data/<file>
_DATA_KEY = rf"^data/{_SEGMENT}/{_SEGMENT}(?:/{_SEGMENT})*$"
#: a legacy object at the namespace root
_ROOT_KEY = rf"^{_SEGMENT}$"
#: the same pattern as :data:`lakefs_gc.gc.addresses._SCHEME` (a URI, not a relative key)
_SCHEME_KEY = r"^[A-Za-z][A-Za-z0-9+.-]*:"
#: root-level names that are lakeFS's own
_NOT_ROOT_OBJECTS = ("dummy", "_lakefs")


def deletable_keys(keys: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """:func:`~lakefs_gc.gc.addresses.deletable_key` of every key (a null key: False), vectorised.

    The same rule (invariant 3), as RE2 patterns: a key is deletable when it is
    ``data/<segment>/<segment>[/<segment>...]``, or a single segment at the namespace root that
    is neither ``dummy`` nor ``_lakefs`` and does not begin like a URI (``s3:``); a segment is
    anything without ``/`` except ``""``, ``.`` and ``..``. Every other shape (``_lakefs/...``,
    ``data/<file>``, other directories, absolute paths, empty segments) is not.
    ``tests/inventory/test_mapping.py`` checks it against :func:`deletable_key` exhaustively on
    short keys of the tricky characters and on random text.
    """
    ok = pc.fill_null(pc.match_substring_regex(keys, _DATA_KEY), False)
    root = pc.fill_null(pc.less(pc.find_substring(keys, "/"), 0), False)
    if not pc.any(root).as_py():  # the usual case: every key is in a directory
        return ok
    root = pc.and_(root, pc.match_substring_regex(keys, _ROOT_KEY))
    root = pc.and_not(root, pc.match_substring_regex(keys, _SCHEME_KEY))
    for name in _NOT_ROOT_OBJECTS:
        root = pc.and_not(root, pc.equal(keys, name))
    return pc.or_(ok, pc.fill_null(root, False))
