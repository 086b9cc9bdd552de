"""The range reader's bounded de-duplication (:class:`RecentAddresses`): it only ever leaves out
repeats, so the distinct committed addresses are exactly those of every range it reads; and its
bounded sums of the HEAD entries' contents (:class:`RecentContents`): every content is given, and
the weights given per content add up to its entries' exactly."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from lakefs_gc.spark.mark.recent import RecentAddresses, RecentContents

addresses = st.sampled_from([f"data/g0/{i}" for i in range(12)])


@given(st.lists(st.lists(addresses, max_size=8), max_size=12), st.integers(min_value=0, max_value=4))
@settings(max_examples=300, deadline=None)
def test_every_address_is_given_and_none_again_within_the_window(
    ranges: list[list[str]], window: int
) -> None:
    recent = RecentAddresses(window)
    given_per_range = [recent.fresh(iter(r)) for r in ranges]
    assert {a for g in given_per_range for a in g} == {a for r in ranges for a in r}
    for i, fresh in enumerate(given_per_range):
        assert len(fresh) == len(set(fresh)), "a range's repeats are given once"
        assert set(fresh) <= set(ranges[i])
        earlier = {a for r in ranges[max(0, i - window) : i] for a in r}
        assert not set(fresh) & earlier, "an address the last ranges gave is not given again"
        assert set(ranges[i]) - earlier <= set(fresh), "and every other one is"


def test_memory_is_bounded_by_the_window() -> None:
    recent = RecentAddresses(2)
    for i in range(100):
        recent.fresh(f"data/g0/{i}-{j}" for j in range(10))
    assert recent.held() == 20  # the addresses of the last two ranges


@given(st.lists(st.lists(addresses, max_size=8), max_size=12), st.integers(min_value=1, max_value=10))
@settings(max_examples=300, deadline=None)
def test_a_cap_on_addresses_forgets_sooner_and_loses_nothing(ranges: list[list[str]], cap: int) -> None:
    recent = RecentAddresses(16, cap)
    given_per_range = [recent.fresh(iter(r)) for r in ranges]
    assert {a for g in given_per_range for a in g} == {a for r in ranges for a in r}
    assert all(len(g) == len(set(g)) for g in given_per_range)
    assert recent.held() <= max(cap, len(ranges[-1]) if ranges else 0)


contents = st.tuples(
    st.sampled_from([0, 10, 11]), st.sampled_from(["data/a", "data/b", None]), st.sampled_from(["x", "y"])
)


@given(
    st.lists(st.tuples(st.lists(contents, max_size=8), st.integers(min_value=1, max_value=5)), max_size=12),
    st.integers(min_value=0, max_value=4),
    st.integers(min_value=1, max_value=10),
)
@settings(max_examples=300, deadline=None)
def test_contents_are_all_given_with_their_weights_summed_exactly(
    ranges: list[tuple[list[tuple[int, str | None, str]], int]], window: int, cap: int
) -> None:
    recent = RecentContents(window, cap)
    given: Counter[tuple[int, str | None, str]] = Counter()
    rows = 0
    for entries, weight in ranges:
        for content, w in recent.add(entries, weight):
            given[content] += w
            rows += 1
    for content, w in recent.rest():
        given[content] += w
        rows += 1
    expected: Counter[tuple[int, str | None, str]] = Counter()
    for entries, weight in ranges:
        for content in entries:
            expected[content] += weight
    assert given == expected
    assert rows <= sum(len(e) for e, _ in ranges), "never more rows than entries"
    assert recent.rest() == [], "rest() forgets"


def test_contents_repeated_within_the_window_are_given_once() -> None:
    recent = RecentContents(4)
    given = [g for i in range(10) for g in recent.add([(10, "data/a", "x"), (i, f"data/{i}", "y")], 2)]
    given += recent.rest()
    assert [w for c, w in given if c == (10, "data/a", "x")] == [20]
    assert len(given) == 11
