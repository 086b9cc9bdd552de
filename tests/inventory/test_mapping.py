"""Routing inventory rows to repositories: namespace-relative addresses, nothing outside, nothing unsafe."""

from __future__ import annotations

import itertools
from datetime import datetime, timezone
from unittest import mock

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from lakefs_gc.gc import twins
from lakefs_gc.gc.addresses import deletable_key
from lakefs_gc.inventory import mapping
from lakefs_gc.inventory.delivery import INVENTORY_SCHEMA
from lakefs_gc.inventory.mapping import (
    ROUTED_SCHEMA,
    NamespaceRoute,
    content_md5s,
    deletable_keys,
    route_rows,
)
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
            "encryption": [None] * n,
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


def test_rows_without_bucket_or_key_are_dropped() -> None:
    table = pa.table(
        {
            "bucket": ["b", None, "b", "b"],
            "key": ["data/s/x", "data/s/y", None, "data/s/z"],
            "size": [1, 2, 3, 4],
            "last_modified": [T] * 4,
            "etag": [None, "e", "e", "e"],
            "encryption": [None] * 4,
        },
        schema=INVENTORY_SCHEMA,
    )
    for prefix in ("", "data/"):
        route = [NamespaceRoute("r", "b", prefix)]
        out = route_rows(table, route, delivery_id="d", snapshot_time=SNAP)
        expected = ["data/s/x", "data/s/z"] if not prefix else []  # "s/x" is not deletable
        assert out.column("address").to_pylist() == expected
        assert out.column("etag").to_pylist() == [None, "e"][: len(expected)]


def test_rows_routed_from_record_batches_and_many_chunks() -> None:
    routes = [NamespaceRoute("a", "bkt", "ns/"), NamespaceRoute("b", "bkt", "")]
    table = rows(("bkt", "ns/data/s/1"), ("bkt", "data/s/2"), ("bkt", "ns/_lakefs/x"), ("bkt", "ns/data/s/3"))
    chunked = pa.concat_tables([table.slice(0, 1), table.slice(1, 2), table.slice(3)])
    for rows_in in (table.to_batches()[0], chunked):
        out = route_rows(rows_in, routes, delivery_id="d", snapshot_time=SNAP)
        got = sorted(
            zip(out.column("repository").to_pylist(), out.column("address").to_pylist(), strict=True)
        )
        assert got == [("a", "data/s/1"), ("a", "data/s/3"), ("b", "data/s/2")]
        assert out.schema == ROUTED_SCHEMA


def test_one_bucket_and_prefixes_of_any_character() -> None:
    """An S3 inventory lists one bucket, so the bucket test is skipped once every row is in it;
    a prefix is cut off by bytes, and what remains must still be whole characters."""
    routes = [NamespaceRoute("u", "bkt", "répos/ü€/"), NamespaceRoute("root", "bkt", "")]
    table = rows(
        ("bkt", "répos/ü€/data/s/ä𝄞"),
        ("bkt", "data/s/x"),
        ("bkt", "répos/ü€x/data/s/y"),  # a sibling prefix: the root namespace's, and not deletable there
        ("bkt", "répos/ü€/data/s/"),  # trailing slash: never
        ("bkt", "répos/ü€/data/.s/z"),  # a segment starting with a dot: deletable, by the patterns
    )
    for table_in in (table, table.slice(1), pa.concat_tables([table.slice(0, 2), table.slice(2)])):
        out = route_rows(table_in, routes, delivery_id="d", snapshot_time=SNAP)
        got = sorted(
            zip(out.column("repository").to_pylist(), out.column("address").to_pylist(), strict=True)
        )
        expected = [("root", "data/s/x"), ("u", "data/.s/z"), ("u", "data/s/ä𝄞")]
        assert got == [e for e in expected if table_in.num_rows == 5 or e != ("u", "data/s/ä𝄞")]
    mixed = pa.concat_tables([table, rows(("other", "répos/ü€/data/s/q"))])
    out = route_rows(mixed, routes, delivery_id="d", snapshot_time=SNAP)
    assert "data/s/q" not in out.column("address").to_pylist()  # another bucket's row is no one's


def routed_row_by_row(table: pa.Table, routes: list[NamespaceRoute]) -> list[tuple[str, str, int]]:
    """The routing rule one row at a time: the longest prefix of the row's bucket claims it, and
    it is a candidate when its address there is deletable."""
    out = []
    for row in table.to_pylist():
        if row["bucket"] is None or row["key"] is None:
            continue
        for route in sorted(routes, key=lambda r: len(r.prefix), reverse=True):
            if row["bucket"] == route.container and row["key"].startswith(route.prefix):
                address = row["key"][len(route.prefix) :]
                if deletable_key(address):
                    out.append((route.repository, address, row["size"]))
                break
    return sorted(out)


PREFIXES = ["", "repos/a/", "repos/a/n/", "repos/ab/", "data/"]
KEY_TAILS = ["data/s/x", "data/s/", "_lakefs/m", "data/loose", "0f1e", "data//y", "data/.s/z", "dummy", "d"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["bkt", "other", None]), st.sampled_from(PREFIXES), st.sampled_from(KEY_TAILS)
        ),
        max_size=60,
    ),
    st.booleans(),
    st.booleans(),
    st.integers(min_value=1, max_value=7),
    st.sampled_from([0, 1, 3, mapping._MAX_RUNS]),
)
def test_routing_agrees_with_the_rule_row_by_row(
    picks: list[tuple[str | None, str, str]], in_order: bool, one_bucket: bool, chunk: int, max_runs: int
) -> None:
    """Whatever the order (an inventory's keys sorted, as S3 writes them: claimed by ranges when
    they are one bucket's, each namespace's deletable rows a few runs, taken as slices; or
    shuffled: claimed by masks, taken by a filter), however the rows are chunked, and wherever
    the bound between slices and a filter lies."""
    if one_bucket:
        picks = [("bkt", p, t) for _, p, t in picks]
    with mock.patch.object(mapping, "_MAX_RUNS", max_runs):
        check_routing(picks, in_order, chunk)


def routed(out: pa.Table) -> list[tuple[str, str, int]]:
    """``route_rows``'s candidates in the form ``routed_row_by_row`` gives them."""
    return sorted(zip(*(out.column(c).to_pylist() for c in ("repository", "address", "size")), strict=True))


def check_routing(picks: list[tuple[str | None, str, str]], in_order: bool, chunk: int) -> None:
    items = sorted(picks, key=lambda p: (p[0] or "", p[1] + p[2])) if in_order else picks
    table = rows(*[("" if b is None else b, p + t) for b, p, t in items])
    if any(b is None for b, _, _ in items):
        table = table.set_column(0, "bucket", pa.array([b for b, _, _ in items], pa.string()))
    chunked = pa.concat_tables([table.slice(i, chunk) for i in range(0, table.num_rows, chunk)] or [table])
    routes = [NamespaceRoute("a", "bkt", "repos/a/"), NamespaceRoute("n", "bkt", "repos/a/n/"),
              NamespaceRoute("root", "other", ""), NamespaceRoute("ab", "bkt", "repos/ab/")]  # fmt: skip
    out = route_rows(chunked, routes, delivery_id="d", snapshot_time=SNAP)
    assert routed(out) == routed_row_by_row(table, routes)
    assert out.schema == ROUTED_SCHEMA
    assert [f"e{size}" for size in out.column("size").to_pylist()] == out.column("etag").to_pylist()


def test_one_buckets_ascending_keys_are_claimed_by_ranges() -> None:
    """An S3 inventory's rows (one bucket, keys ascending) are claimed by a binary search per
    route, never by a test of every key: nested prefixes, a namespace at the bucket root, a
    prefix no key has, prefixes of any character, a key equal to a prefix, a repeated key. Out
    of order or with a null key, they are claimed by masks; the same rule either way."""
    routes = [
        NamespaceRoute("a", "bkt", "repos/a/"),
        NamespaceRoute("n", "bkt", "repos/a/n/"),
        NamespaceRoute("root", "bkt", ""),
        NamespaceRoute("none", "bkt", "zzz/"),
        NamespaceRoute("u", "bkt", "répos/ü€/"),
        NamespaceRoute("elsewhere", "other", "repos/"),
    ]
    keys = [
        *("data/s/0", "repos/a/", "repos/a/data/s/1", "repos/a/data/s/1", "repos/a/n/data/s/2"),
        *("repos/a/n0/data/s/3", "repos/a/o/x", "repos/ab/data/s/4", "répos/ü€/data/s/ä𝄞"),
        "répos/ü€x/data/s/5",
    ]
    assert keys == sorted(keys) == sorted(keys, key=str.encode)  # code-point order is byte order
    table = rows(*[("bkt", k) for k in keys])
    for chunk in (1, 3, len(keys)):
        chunked = pa.concat_tables([table.slice(i, chunk) for i in range(0, table.num_rows, chunk)])
        with mock.patch.object(mapping, "_claims_by_mask", side_effect=AssertionError("claimed by masks")):
            out = route_rows(chunked, routes, delivery_id="d", snapshot_time=SNAP)
        assert routed(out) == routed_row_by_row(table, routes)
        assert {r for r, _, _ in routed(out)} == {"a", "n", "root", "u"}
    for disorder in (keys[::-1], [*keys[:3], None, *keys[3:]]):
        table = rows(*[("bkt", k or "") for k in disorder])
        table = table.set_column(1, "key", pa.array(disorder, pa.string()))
        with mock.patch.object(mapping, "_claims_by_range", side_effect=AssertionError("claimed by ranges")):
            out = route_rows(table, routes, delivery_id="d", snapshot_time=SNAP)
        assert routed(out) == routed_row_by_row(table, routes)


def test_uncovered_parts_of_a_range() -> None:
    assert mapping._uncovered((0, 10), []) == [(0, 10)]
    assert mapping._uncovered((0, 10), [(2, 4), (6, 12)]) == [(0, 2), (4, 6)]
    assert mapping._uncovered((3, 8), [(0, 3), (8, 9), (5, 6), (4, 7)]) == [(3, 4), (7, 8)]
    assert mapping._uncovered((3, 8), [(0, 20)]) == []
    assert mapping._uncovered((5, 5), []) == []


# ---- deletable_keys is deletable_key -------------------------------------------------------------

#: characters and words the rule turns on: separators, dots, URI schemes, lakeFS's own names
CHARS = ["/", ".", ":", "a", "_", "+", "\n", "ü"]
WORDS = ["data", "_lakefs", "dummy", "/", ".", "..", "s3:", "A1+.-", "x", "//", "ü"]


def same_as_deletable_key(keys: list[str]) -> None:
    got = deletable_keys(pa.array(keys, pa.string())).to_pylist()
    expected = [deletable_key(k) for k in keys]
    wrong = [(k, g) for k, g, e in zip(keys, got, expected, strict=True) if g != e]
    assert not wrong, wrong[:20]


def test_deletable_keys_exhaustively_on_short_keys() -> None:
    for alphabet, longest in ((CHARS, 6), (WORDS, 4)):
        keys = ["".join(p) for n in range(longest + 1) for p in itertools.product(alphabet, repeat=n)]
        same_as_deletable_key(keys)


def test_deletable_keys_on_lakefs_shapes() -> None:
    same_as_deletable_key(
        [
            "data/gqv3epl4fd2o8m3men70/ce8co454fd2o8m3menag",
            "data/!ab/c/bpel26ce4m36oefv1600/xid",
            "4e068d1a46734113abd2218e87aace4c",
            "_lakefs/retention/gc/unified/x/summary.json",
            "data/staged_object",
            "s3://bucket/data/a/b",
            "data/a/../../etc",
            "data/.../x",
            "...",
            "a:b",
            "1a:b",
            "a b:c",
            "data/x/y\n",
            "\n",
        ]
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=12) | st.lists(st.sampled_from(WORDS + CHARS), max_size=7).map("".join)))
def test_deletable_keys_on_random_keys(keys: list[str]) -> None:
    same_as_deletable_key(keys)


def test_deletable_keys_of_null_is_false() -> None:
    assert deletable_keys(pa.array(["data/s/x", None, "x"], pa.string())).to_pylist() == [True, False, True]
    chunked = pa.chunked_array([pa.array(["data/s/x"]), pa.array(["a/b", "y"])])
    assert deletable_keys(chunked).to_pylist() == [True, False, True]


def test_deletable_keys_on_sliced_arrays_and_nulls_between() -> None:
    """The byte tests read Arrow's buffers directly: slices (an offset into the buffers) and null
    slots between keys must not shift a key's bytes onto its neighbour."""
    keys = ["data/s/x", None, "data//x", "data/s/", "", "data/.a/b", None, "x", "data/a", "data/s/y/z"]
    array = pa.array(keys * 3, pa.string())
    for start in range(len(keys)):
        part = array.slice(start, 2 * len(keys) - 3)
        expected = [k is not None and deletable_key(k) for k in part.to_pylist()]
        assert deletable_keys(part).to_pylist() == expected, start


ETAGS = st.sampled_from(["", '"', "-2", "0x8DC0FFEE", " ", "G" * 32]) | st.text(
    "0123456789abcdefABCDEF", max_size=33
)


@settings(max_examples=300)
@given(
    st.lists(
        st.tuples(
            st.none() | st.builds(lambda q, e, r: q + e + r, st.sampled_from(["", '"', ' "']), ETAGS,
                                  st.sampled_from(["", '"', '" ', "-3"])),
            st.none() | st.sampled_from(["NOT-SSE", "SSE-S3", "SSE-KMS", "DSSE-KMS", "SSE-C", ""]),
        ),
        max_size=30,
    )
)  # fmt: skip
def test_content_md5s_agree_with_the_rule(rows: list[tuple[str | None, str | None]]) -> None:
    """The vectorised proof of an inventory row's bytes' MD5 is :func:`lakefs_gc.gc.twins.content_md5`."""
    etags = pa.array([e for e, _ in rows], pa.string())
    encryptions = pa.array([c for _, c in rows], pa.string())
    got = content_md5s(etags, encryptions).to_pylist()
    assert got == [twins.content_md5("s3", e, c) for e, c in rows]
