"""From inventory rows to per-repository candidates.

One inventory usually covers a whole bucket (or storage account) and therefore many repositories'
storage namespaces. Each row is routed to the namespace whose key prefix it starts with (the
longest, should namespaces nest), and its key becomes a namespace-relative ``address``. Rows
outside every configured namespace, under ``_lakefs/``, directly under ``data/`` or otherwise not
deletable are dropped here (invariant 3), exactly as the listing drops them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from lakefs_gc.gc.addresses import deletable_key
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
    """``rows`` (INVENTORY_SCHEMA) as candidates (CANDIDATE_SCHEMA) of the routed repositories."""
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
    unclaimed = pa.array([True] * table.num_rows, pa.bool_())
    parts: list[pa.Table] = []
    for route in sorted(routes, key=lambda r: len(r.prefix), reverse=True):  # longest prefix wins
        mine = pc.and_(
            unclaimed,
            pc.and_(pc.equal(table.column("bucket"), route.container), _starts_with(table, route.prefix)),
        )
        unclaimed = pc.and_(unclaimed, pc.invert(mine))
        picked = table.filter(mine)
        if picked.num_rows == 0:
            continue
        addresses = pc.utf8_slice_codeunits(picked.column("key"), len(route.prefix))
        keep = pa.array([deletable_key(a) for a in addresses.to_pylist()], pa.bool_())
        picked, addresses = picked.filter(keep), addresses.filter(keep)
        n = picked.num_rows
        parts.append(
            pa.table(
                {
                    "repository": pa.array([route.repository] * n, pa.string()),
                    "address": addresses,
                    "size": picked.column("size"),
                    "last_modified": picked.column("last_modified"),
                    "etag": picked.column("etag"),
                    "delivery_id": pa.array([delivery_id] * n, pa.string()),
                    "snapshot_time": pa.array([snapshot_time] * n, pa.timestamp("us", tz="UTC")),
                },
                schema=CANDIDATE_SCHEMA,
            )
        )
    return pa.concat_tables(parts) if parts else CANDIDATE_SCHEMA.empty_table()


def _starts_with(table: pa.Table, prefix: str) -> pa.ChunkedArray:
    if not prefix:
        return pa.chunked_array([pa.array([True] * table.num_rows, pa.bool_())])
    return pc.starts_with(table.column("key"), prefix)
