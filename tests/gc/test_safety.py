"""Invariants 1–3 (docs/invariants.md) on the pure mark: properties over arbitrary listings and references."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakefs_gc.errors import ConfigError
from lakefs_gc.gc.addresses import deletable_by_rules, deletable_key
from lakefs_gc.gc.algebra import ListedObject, mark
from lakefs_gc.gc.cutoff import compute_cutoff

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
DAY = timedelta(days=1)


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("data/gqv3epl4fd2o8m3men70/ce8co454fd2o8m3menag", True),
        ("data/gcnobu/csfnri,_e7P9j-sig", True),
        ("data/!ab/c/bpel26ce4m36oefv1600/xid", True),  # sharded layout
        ("4e068d1a46734113abd2218e87aace4c", True),  # legacy root object
        ("dummy", False),
        ("_lakefs/dummy", False),
        ("_lakefs/4a5fe1", False),
        ("_lakefs/retention/gc/unified/x/summary.json", False),
        ("data/staged_object", False),  # file directly under data/
        ("data/", False),
        ("other/dir/file", False),
        ("data/../_lakefs/x", False),
        ("data/a/../../etc", False),
        ("/data/a/b", False),
        ("s3://bucket/data/a/b", False),
        ("data//b", False),
        ("", False),
    ],
)
def test_deletable_keys(key: str, ok: bool) -> None:
    assert deletable_key(key) is ok


def test_the_data_object_shortcut_never_changes_an_answer() -> None:
    """``deletable_key`` settles ``data/<slice>/<object>`` keys with one match before its rules:
    on every key "data" + up to 7 of the characters that make segments tricky it answers as the
    rules alone do (the table above checks the answers themselves)."""
    tails = ("".join(t) for n in range(8) for t in itertools.product("a./\n", repeat=n))
    checked = 0
    for key in ("data" + tail for tail in tails):
        assert deletable_key(key) is deletable_by_rules(key), repr(key)
        checked += 1
    assert checked == sum(4**n for n in range(8))


@given(st.text(max_size=40))
def test_the_data_object_shortcut_on_random_text(tail: str) -> None:
    for key in (tail, "data/" + tail, "data/s/" + tail):
        assert deletable_key(key) is deletable_by_rules(key), repr(key)


keys = st.one_of(
    st.builds(
        lambda s, o: f"data/{s}/{o}",
        st.sampled_from(["s1", "s2", "s3"]),
        st.text("abc", min_size=1, max_size=3),
    ),
    st.sampled_from(["dummy", "_lakefs/x", "data/file", "legacy1", "legacy2", "x/y/z", "../up"]),
)
listed = st.lists(
    st.builds(ListedObject, keys, st.integers(-10 * 86400, 86400).map(lambda s: NOW + timedelta(seconds=s))),
    max_size=40,
)


@given(listed, st.sets(keys, max_size=10), st.sets(keys, max_size=10), st.integers(0, 5 * 86400))
def test_mark_never_deletes_referenced_young_or_protected(
    objects: list[ListedObject], committed: set[str], uncommitted: set[str], grace: int
) -> None:
    cutoff = compute_cutoff(NOW, grace_period=timedelta(seconds=grace))
    garbage = mark(objects, committed=committed, uncommitted=uncommitted, cutoff=cutoff)
    by_address: dict[str, list[ListedObject]] = {}
    for o in objects:
        by_address.setdefault(o.address, []).append(o)
    for address in garbage:
        assert address not in committed and address not in uncommitted  # invariant 1
        assert any(
            o.last_modified < NOW - max(DAY, timedelta(seconds=grace)) for o in by_address[address]
        )  # 2
        assert deletable_key(address)  # invariant 3
    for o in objects:  # and nothing eligible is left behind
        eligible = deletable_key(o.address) and o.last_modified < cutoff.time
        if eligible and o.address not in committed | uncommitted:
            assert o.address in garbage


def test_cutoff_is_raised_to_the_grace_period() -> None:
    cutoff = compute_cutoff(NOW, grace_period=timedelta(hours=36), min_age=timedelta(hours=6))
    assert cutoff.time == NOW - timedelta(hours=36) and "raised" in cutoff.reason
    cutoff = compute_cutoff(NOW, grace_period=timedelta(hours=24), min_age=timedelta(days=3))
    assert cutoff.time == NOW - timedelta(days=3)
    assert not cutoff.admits(cutoff.time)  # strictly older only
    assert cutoff.admits(cutoff.time - timedelta(microseconds=1))


def test_unsafe_min_age_is_explicit_and_labelled() -> None:
    cutoff = compute_cutoff(NOW, grace_period=DAY, unsafe_min_age=timedelta(seconds=1))
    assert cutoff.time == NOW - timedelta(seconds=1) and cutoff.reason.startswith("UNSAFE")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"grace_period": -DAY},
        {"grace_period": DAY, "min_age": -DAY},
        {"grace_period": DAY, "unsafe_min_age": -DAY},
    ],
)
def test_cutoff_rejects_nonsense(kwargs: dict[str, timedelta]) -> None:
    with pytest.raises(ConfigError):
        compute_cutoff(NOW, **kwargs)


def test_cutoff_needs_an_aware_clock() -> None:
    with pytest.raises(ConfigError, match="timezone"):
        compute_cutoff(datetime(2026, 1, 1), grace_period=DAY)
