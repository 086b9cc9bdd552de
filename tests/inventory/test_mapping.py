"""Routing inventory rows to repositories: namespace-relative addresses, nothing outside, nothing unsafe."""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa

from lakefs_gc.inventory.delivery import INVENTORY_SCHEMA
from lakefs_gc.inventory.mapping import NamespaceRoute, route_rows
from lakefs_gc.storage.locations import parse_storage_namespace

T = datetime(2026, 11, 1, tzinfo=timezone.utc)
SNAP = datetime(2026, 11, 20, tzinfo=timezone.utc)


def rows(*items: tuple[str, str]) -> pa.Table:
    n = len(items)
    return pa.table(
        {
            "bucket": [b for b, _ in items],
            "key": [k for _, k in items],
            "size": list(range(n)),
            "last_modified": [T] * n,
            "etag": [f"e{i}" for i in range(n)],
        },
        schema=INVENTORY_SCHEMA,
    )


def test_routes_rows_to_the_namespace_they_belong_to() -> None:
    routes = [
        NamespaceRoute.of("a", parse_storage_namespace("s3://bkt/repos/a")),
        NamespaceRoute.of("nested", parse_storage_namespace("s3://bkt/repos/a/nested/")),
        NamespaceRoute.of("root", parse_storage_namespace("s3://other")),
    ]
    table = rows(
        ("bkt", "repos/a/data/s1/x y#z"),
        ("bkt", "repos/a/0123456789abcdef0123456789abcdef"),  # legacy root object of a
        ("bkt", "repos/a/nested/data/s2/obj"),  # the longest prefix wins
        ("bkt", "repos/a/_lakefs/0f1e"),  # metadata: never
        ("bkt", "repos/a/data/loose"),  # directly under data/: never
        ("bkt", "repos/a/dummy"),  # lakeFS's marker: never
        ("bkt", "repos/ab/data/s/x"),  # a sibling prefix, not a's
        ("bkt", "elsewhere/data/s/x"),  # no namespace
        ("other", "data/s3/ü"),  # namespace at a bucket root
        ("third", "data/s/x"),  # unknown bucket
    )
    out = route_rows(table, routes, delivery_id="d1", snapshot_time=SNAP)
    got = sorted(zip(out.column("repository").to_pylist(), out.column("address").to_pylist(), strict=True))
    assert got == [
        ("a", "0123456789abcdef0123456789abcdef"),
        ("a", "data/s1/x y#z"),
        ("nested", "data/s2/obj"),
        ("root", "data/s3/ü"),
    ]
    assert set(out.column("delivery_id").to_pylist()) == {"d1"}
    assert out.column("snapshot_time").to_pylist()[0] == SNAP
    assert sorted(out.column("size").to_pylist()) == [0, 1, 2, 8]


def test_no_routes_or_no_rows() -> None:
    assert route_rows(rows(("b", "data/s/x")), [], delivery_id="d", snapshot_time=SNAP).num_rows == 0
    routes = [NamespaceRoute("r", "b", "")]
    assert route_rows(rows(), routes, delivery_id="d", snapshot_time=SNAP).num_rows == 0
