"""The identity-twin rule (``lakefs_gc.gc.twins``): a marked object is released only when proven.

A random "world" says which physical address each branch serves at each path (staged or committed)
and what its HEAD tree holds. Marked objects include objects really served at a path whose HEAD
entry has their size (twins lakeFS's export leaves out) and real garbage. Whatever subset of the
stats is answered, and however the rest fails:

* an object some branch serves is never released (never ``garbage``);
* with every stat answered truthfully, an object is ``live`` iff served, else ``garbage``;
* counts add up to the decisions and their bytes.
"""

from __future__ import annotations

import base64
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakefs_gc.gc import twins
from lakefs_gc.gc.twins import HeadEntry, MarkedObject, StatAnswer, TwinPair, TwinVerdict

BRANCHES = ["main", "dev", "h-hidden"]
PATHS = ["a", "b", "c/d"]
SIZES = st.integers(min_value=0, max_value=3)


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[HeadEntry], dict[tuple[str, str], str], list[MarkedObject]]:
    """HEAD entries, the address each (branch, path) serves, and the marked objects."""
    heads: list[HeadEntry] = []
    served: dict[tuple[str, str], str] = {}
    objects: dict[str, int] = {}
    for n, (branch, path) in enumerate((b, p) for b in BRANCHES for p in PATHS):
        if draw(st.booleans(), label=f"HEAD holds {branch}:{path}"):
            size = draw(SIZES)
            heads.append(HeadEntry(branch, path, size, f"md5-{size}"))
            committed = f"data/committed-{n}"
            staged = draw(st.sampled_from(["none", "twin", "other"]), label="staged")
            # "other": the twin was staged, then overwritten on the branch by a newer upload
            served[(branch, path)] = {"none": committed, "twin": f"data/twin-{n}", "other": f"data/new-{n}"}[
                staged
            ]
            if staged != "none":
                objects[f"data/twin-{n}"] = size
    for k in range(draw(st.integers(0, 4), label="garbage")):
        objects[f"data/garbage-{k}"] = draw(SIZES)
    checksums = st.none() | st.builds(lambda s: frozenset({f"md5-{s}"}), SIZES)
    marked = [MarkedObject(a, s, draw(checksums, label="checksums")) for a, s in sorted(objects.items())]
    return heads, served, marked


def truthful(
    requests: list[tuple[str, str]], served: dict[tuple[str, str], str]
) -> dict[tuple[str, str], StatAnswer]:
    return {r: StatAnswer.at(served[r]) if r in served else StatAnswer.absent() for r in requests}


@settings(max_examples=300, deadline=None)
@given(world=worlds(), data=st.data())
def test_a_served_object_is_never_released(
    world: tuple[list[HeadEntry], dict[tuple[str, str], str], list[MarkedObject]], data: st.DataObject
) -> None:
    heads, served, marked = world
    pairs = twins.find_twins(marked, heads)
    requests = twins.stat_requests(pairs)
    answers = truthful(requests, served)
    failing = data.draw(st.sets(st.sampled_from(requests)) if requests else st.just(set()), label="failing")
    for r in failing:  # an error answer, or no answer at all (beyond the stat budget)
        if data.draw(st.booleans(), label="error or unanswered"):
            answers[r] = StatAnswer.unknown("503 Service Unavailable")
        else:
            del answers[r]
    decisions = twins.decide(pairs, answers)
    live_addresses = set(served.values())
    for d in decisions:
        if d.address in live_addresses:
            assert d.verdict is not TwinVerdict.GARBAGE, d
        if not failing:
            assert d.verdict is (TwinVerdict.LIVE if d.address in live_addresses else TwinVerdict.GARBAGE), d
    counts = twins.count(pairs, decisions)
    assert counts.live + counts.kept + counts.released == len(decisions) == len({p.address for p in pairs})
    assert counts.live_bytes + counts.kept_bytes + counts.released_bytes == sum(d.size for d in decisions)
    assert counts.stats == len(requests)


@settings(max_examples=200, deadline=None)
@given(world=worlds())
def test_every_served_twin_is_found_in_size_mode(
    world: tuple[list[HeadEntry], dict[tuple[str, str], str], list[MarkedObject]],
) -> None:
    """Size mode pairs every marked object with every same-size HEAD entry: nothing can hide."""
    heads, served, marked = world
    found = {(p.address, p.branch, p.path) for p in twins.find_twins(marked, heads)}
    sizes = {m.address: m.size for m in marked}
    for h in heads:
        address = served[(h.branch, h.path)]
        if address in sizes and sizes[address] == h.size:
            assert (address, h.branch, h.path) in found
    brute = {(m.address, h.branch, h.path) for m in marked for h in heads if m.size == h.size}
    assert found == brute


def test_decisions_name_their_evidence() -> None:
    pairs = [
        TwinPair("data/x", 5, "main", "a"),
        TwinPair("data/x", 5, "h1", "a"),
        TwinPair("data/y", 7, "main", "b"),
        TwinPair("data/z", 9, "dev", "c"),
    ]
    answers = {
        ("main", "a"): StatAnswer.at("data/committed"),
        ("h1", "a"): StatAnswer.at("data/x"),
        ("main", "b"): StatAnswer.at(None),  # served from outside the namespace
        ("dev", "c"): StatAnswer.unknown("403 Forbidden"),
    }
    by_address = {d.address: d for d in twins.decide(pairs, answers)}
    assert by_address["data/x"].verdict is TwinVerdict.LIVE
    assert by_address["data/x"].evidence == (("h1", "a"),)
    assert "h1" in by_address["data/x"].reason
    assert by_address["data/y"].verdict is TwinVerdict.GARBAGE
    assert by_address["data/z"].verdict is TwinVerdict.KEPT
    assert "403 Forbidden" in by_address["data/z"].reason
    assert twins.decide(pairs[:1], {})[0].verdict is TwinVerdict.KEPT  # not asked: kept
    with pytest.raises(twins.TwinError, match="two sizes"):
        twins.decide([TwinPair("data/x", 1, "a", "p"), TwinPair("data/x", 2, "b", "p")], {})


def test_checksum_candidates_per_blockstore() -> None:
    data = b"same bytes"
    md5 = hashlib.md5(data).hexdigest()
    content_md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
    # S3: a single-part ETag (quoted) and a multipart one (lakeFS's gateway drops "-N")
    assert twins.lakefs_checksums("s3", etag=f'"{md5}"') == {md5}
    assert twins.lakefs_checksums("s3", etag='"abc123-4"') == {"abc123-4", "abc123"}
    # Azure: Content-MD5 is base64 of the digest; the ETag is a link candidate
    assert twins.lakefs_checksums("azure", etag='"0x8DC0FFEE"', content_md5=content_md5) == {
        md5,
        "0x8DC0FFEE",
    }
    assert twins.lakefs_checksums("azure", etag='"0x8DC0FFEE"') == {"0x8DC0FFEE"}
    # local: only what the caller computed
    assert twins.lakefs_checksums("local", md5_hex=md5.upper()) == {md5}
    assert twins.lakefs_checksums("local") is None
    with pytest.raises(twins.TwinError, match="base64"):
        twins.lakefs_checksums("azure", content_md5="not base64!")


def test_checksum_mode_narrows_and_size_mode_does_not() -> None:
    entry = HeadEntry("main", "a", 10, "client-chosen")  # a linkPhysicalAddress checksum of its own
    marked = MarkedObject("data/x", 10, frozenset({"5d41402abc4b2a76b9719d911017c592"}))
    assert twins.is_twin(marked, entry)  # size mode (the default) cannot be fooled by the checksum
    assert not twins.is_twin(marked, entry, "checksum")
    assert twins.is_twin(MarkedObject("data/x", 10), entry, "checksum")  # unknown checksums: size decides
    assert not twins.is_twin(MarkedObject("data/x", 11), entry)
