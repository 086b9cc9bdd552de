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
from dataclasses import dataclass

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


# -- content evidence ------------------------------------------------------------------------------

MD5_OF = {b: hashlib.md5(b).hexdigest() for b in (b"x" * 10, b"y" * 10)}


def test_content_md5_is_proven_only_by_an_s3_single_part_etag_without_kms() -> None:
    md5 = MD5_OF[b"x" * 10]
    for encryption in ("NOT-SSE", "SSE-S3"):
        assert twins.content_md5("s3", f'"{md5.upper()}"', encryption) == md5
    for unproven in ("SSE-KMS", "DSSE-KMS", "SSE-C", None, ""):  # None: the field is not in the inventory
        assert twins.content_md5("s3", md5, unproven) is None
    assert twins.content_md5("s3", f"{md5}-2", "SSE-S3") is None  # multipart: the MD5 of the parts' MD5s
    assert twins.content_md5("s3", "0x8DC0FFEE", "SSE-S3") is None
    assert twins.content_md5("s3", None, "SSE-S3") is None
    assert twins.content_md5("azure", md5, "SSE-S3") is None
    assert twins.content_md5("local", md5, "NOT-SSE") is None


def test_an_entry_key_is_its_checksum_only_when_its_own_object_proves_it() -> None:
    md5 = MD5_OF[b"x" * 10]
    assert twins.entry_key(md5.upper(), md5) == md5
    assert twins.entry_key("client-chosen", md5) is None  # a checksum of the client's own
    assert twins.entry_key(md5, None) is None  # its object's bytes are not proven
    assert twins.entry_key(None, md5) is None  # a tree read without checksums (the range cache)
    assert twins.ruled_out(MD5_OF[b"y" * 10], md5)
    assert not twins.ruled_out(md5, md5) and not twins.ruled_out(None, md5) and not twins.ruled_out(md5, None)


#: how lakeFS came to record an entry (``link-*``: ``linkPhysicalAddress`` after a client's own PUT;
#: docs/formats/lakefs-export-hazards.md, "The checksum lakeFS records, per way of writing")
WAYS = ["api", "gateway", "gateway-multipart", "link-etag", "link-multipart-etag", "link-constant"]
ENCRYPTIONS = ["NOT-SSE", "SSE-S3", "SSE-KMS", "SSE-C"]


@dataclass(frozen=True)
class Written:
    """An object as lakeFS records it and as an inventory lists it."""

    data: bytes
    recorded: str  # the checksum lakeFS recorded
    etag: str  # the store's ETag
    reported: str | None  # the inventory's EncryptionStatus (None: not configured)


def _etag(data: bytes, encryption: str, multipart: bool, serial: int) -> str:
    """S3's ETag: the MD5 of the parts' MD5s with ``-N`` for multipart, the bytes' MD5 for a single
    part without KMS or SSE-C, an opaque value otherwise."""
    if multipart:
        return hashlib.md5(MD5_OF[data].encode()).hexdigest() + "-2"
    if encryption in twins.MD5_ETAG_ENCRYPTION:
        return MD5_OF[data]
    return hashlib.md5(f"opaque-{serial}".encode()).hexdigest()


@st.composite
def written(draw: st.DrawFn, serial: int) -> Written:
    """A write by one of :data:`WAYS`, of one of two 10-byte contents, on any encryption."""
    data = draw(st.sampled_from(sorted(MD5_OF)), label="bytes")
    way = draw(st.sampled_from(WAYS), label="way")
    encryption = draw(st.sampled_from(ENCRYPTIONS), label="encryption")
    etag = _etag(data, encryption, way in ("gateway-multipart", "link-multipart-etag"), serial)
    recorded = {
        "api": MD5_OF[data],
        "gateway": MD5_OF[data],
        "gateway-multipart": etag.split("-")[0],
        "link-etag": etag,
        "link-multipart-etag": etag,
        "link-constant": "client-constant",
    }[way]
    return Written(data, recorded, etag, draw(st.sampled_from([encryption, None]), label="reported"))


@st.composite
def copied(draw: st.DrawFn, source: Written, serial: int) -> Written:
    """``copyObject`` of ``source`` onto its own path: its bytes and recorded checksum, a new object
    written by S3's CopyObject (one part) on the copy's own encryption."""
    encryption = draw(st.sampled_from(ENCRYPTIONS), label="copy encryption")
    etag = _etag(source.data, encryption, False, serial)
    return Written(source.data, source.recorded, etag, draw(st.sampled_from([encryption, None])))


@settings(max_examples=1000)
@given(data=st.data())
def test_content_evidence_never_rules_out_a_twin(data: st.DataObject) -> None:
    """Whatever way a committed entry and a later object over its path were written, on whatever
    encryption, a later object lakeFS holds as the entry's identity twin (equal size and recorded
    checksum) is never ruled out by content evidence."""
    entry = data.draw(written(1), label="entry")
    later = data.draw(st.one_of(written(2), copied(entry, 3)), label="later object")
    if later.recorded != entry.recorded:
        return  # not a twin: lakeFS's export lists it (its identity differs)
    key = twins.entry_key(entry.recorded, twins.content_md5("s3", entry.etag, entry.reported))
    assert not twins.ruled_out(twins.content_md5("s3", later.etag, later.reported), key)


@settings(max_examples=300)
@given(data=st.data())
def test_content_evidence_rules_out_other_bytes_where_both_are_proven(data: st.DataObject) -> None:
    """The evidence is not idle: an API upload of other bytes over a proven entry is ruled out."""
    entry = data.draw(written(1), label="entry")
    key = twins.entry_key(entry.recorded, twins.content_md5("s3", entry.etag, entry.reported))
    other = next(b for b in MD5_OF if b != entry.data)
    later = Written(other, MD5_OF[other], MD5_OF[other], "SSE-S3")
    assert twins.ruled_out(twins.content_md5("s3", later.etag, later.reported), key) == (key is not None)


def test_content_mode_pairs_only_what_evidence_leaves() -> None:
    x, y = MD5_OF[b"x" * 10], MD5_OF[b"y" * 10]
    entries = [
        HeadEntry("main", "a", 10, x, object_md5=x),  # proven: only objects of x's bytes may be its twin
        HeadEntry("dev", "b", 10, "client-chosen", object_md5=y),  # unproven
    ]
    marked = [MarkedObject("data/same", 10, md5=x), MarkedObject("data/other", 10, md5=y),
              MarkedObject("data/unknown", 10)]  # fmt: skip
    pairs = {(p.address, p.branch) for p in twins.find_twins(marked, entries, "content")}
    assert pairs == {("data/same", "main"), ("data/same", "dev"), ("data/other", "dev"),
                     ("data/unknown", "main"), ("data/unknown", "dev")}  # fmt: skip
    assert len(twins.find_twins(marked, entries)) == 6  # size mode: every pair
