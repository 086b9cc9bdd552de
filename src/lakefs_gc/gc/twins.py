"""Identity twins: staged re-uploads that lakeFS's uncommitted export leaves out.

lakeFS's uncommitted export (``gcWriteUncommitted`` over ``DiffUncommitted``) skips a staged entry
whose *identity* equals the committed entry it shadows on the branch's HEAD. The identity
(``catalog.EntryToValue``) hashes size, ETag, user metadata and content type, not the physical
address. Uploading the same bytes again over a committed path (or copying a committed object onto
its own path) stages an entry with a new address and an equal identity: the branch reads the new
address, yet no export references it, and a GC driven by the exports deletes it once it is older
than the cutoff. The path then reads 410 Gone.

Such an object is marked, and has the size and lakeFS checksum (ETag) of an entry in some branch's
HEAD tree. This module holds the rule; the mark does the big join (marked objects x HEAD entries on
size, filtered by :func:`is_twin`), asks lakeFS about the few pairs found, and hands the answers
back here:

1. a *twin pair* is (marked object, branch, path) where the HEAD of the branch holds an entry at
   ``path`` with the object's size and a checksum the object may have been recorded with;
2. one ``statObject`` (``presign=false``) per distinct (branch, path) tells which physical address
   the branch serves at ``path`` now: staged if any, else committed;
3. per marked object: **live** if some pair's answer is that object (keep it), **garbage** if every
   pair was answered with another address or "no such path" (release it), else **kept**: it could
   not be ruled out (an error, a refused or unbudgeted stat). Nothing unresolved is ever released.

Matching (see ``docs/formats/lakefs-export-hazards.md``): lakeFS records the hex MD5 it computes while
writing an upload through its API or S3 gateway (any blockstore), the multipart completion ETag
without its ``-N`` suffix for gateway multipart uploads, and whatever the client sends, quotes
stripped, for ``linkPhysicalAddress``. Only the size is certain to be shared with what a store can
tell about an object, so the default match is on size; ``checksum`` mode narrows it with the
candidates of :func:`lakefs_checksums` where every write is known to record one of them.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Literal

from lakefs_gc.errors import GcError


class TwinError(GcError):
    """Inputs to the twin rule are inconsistent (a marked address listed twice with other sizes)."""


@dataclass(frozen=True)
class MarkedObject:
    """An object the mark would delete: namespace-relative address, size, possible lakeFS checksums.

    ``checksums`` None means "unknown": the object matches any entry of its size.
    """

    address: str
    size: int
    checksums: frozenset[str] | None = None
    #: the MD5 of the object's bytes where its store proves it (:func:`content_md5`), else None
    md5: str | None = None


@dataclass(frozen=True)
class HeadEntry:
    """An entry of a branch's HEAD tree (from the HEAD commit's ranges): where a twin could hide.

    ``object_md5``: the MD5 of the bytes of the entry's own physical object where its store proves
    it (:func:`content_md5` of the object the entry's address names), else None.
    """

    branch: str
    path: str
    size: int
    checksum: str
    object_md5: str | None = None


@dataclass(frozen=True)
class TwinPair:
    """A marked object that may be staged at ``path`` on ``branch``."""

    address: str
    size: int
    branch: str
    path: str


AnswerKind = Literal["address", "absent", "unknown"]


@dataclass(frozen=True)
class StatAnswer:
    """What ``statObject(branch, path, presign=false)`` said, as data.

    * ``address``: 200; ``address`` is the served physical address made namespace-relative
      (None when it is outside the namespace: it can equal no marked object);
    * ``absent``: 404 *and* the branch was confirmed to exist or to be gone (a path deleted on
      the branch, or a deleted branch: either way no staged entry serves the object);
    * ``unknown``: anything else (an error, 401/403, a 404 that could be the repository, no stat
      made within the budget). Unknown never releases an object.
    """

    kind: AnswerKind
    address: str | None = None
    detail: str = ""

    @classmethod
    def at(cls, address: str | None) -> StatAnswer:
        return cls("address", address)

    @classmethod
    def absent(cls, detail: str = "no such path on the branch") -> StatAnswer:
        return cls("absent", None, detail)

    @classmethod
    def unknown(cls, detail: str) -> StatAnswer:
        return cls("unknown", None, detail)


class TwinVerdict(str, Enum):
    LIVE = "live"  # served by a branch: keep
    GARBAGE = "garbage"  # every pair answered with something else: release to the sweep
    KEPT = "kept"  # could not be ruled out: keep


@dataclass(frozen=True)
class TwinDecision:
    address: str
    size: int
    verdict: TwinVerdict
    #: the (branch, path) pairs that serve the object (LIVE) or could not be resolved (KEPT)
    evidence: tuple[tuple[str, str], ...]
    reason: str


def _trim(etag: str) -> str:
    """lakeFS strips quotes and spaces from client checksums (``httputil.StripQuotesAndSpaces``)."""
    return etag.strip().strip('"').strip()


def lakefs_checksums(
    blockstore: str,
    *,
    etag: str | None = None,
    content_md5: str | None = None,
    md5_hex: str | None = None,
) -> frozenset[str] | None:
    """The checksums lakeFS may have recorded for an object, from what its store says about it.

    ``etag`` is the store's ETag (S3 listing or inventory, Azure's ``0x8D...``), ``content_md5``
    Azure's base64 Content-MD5, ``md5_hex`` an MD5 the caller computed from the content (a local
    store has nothing else). Candidates: the content MD5 (every upload lakeFS writes itself), the
    store's ETag without quotes (``linkPhysicalAddress`` writes that pass it through) and, on S3,
    a multipart ETag without its ``-N`` suffix (S3-gateway multipart uploads). None when the store
    said nothing: such an object matches on size alone.
    """
    candidates: set[str] = set()
    if md5_hex:
        candidates.add(md5_hex.lower())
    if content_md5:
        try:
            candidates.add(base64.b64decode(content_md5, validate=True).hex())
        except (binascii.Error, ValueError):
            raise TwinError(f"Content-MD5 {content_md5!r} is not base64") from None
    if etag and _trim(etag):
        trimmed = _trim(etag)
        candidates.add(trimmed)
        if blockstore == "s3" and "-" in trimmed:
            candidates.add(
                trimmed.split("-", 1)[0]
            )  # gateway multipart: pkg/gateway/operations/postobject.go
    return frozenset(candidates) or None


#: S3 ``EncryptionStatus`` values under which a single-part object's ETag is the MD5 of its bytes.
#: AWS documents it for objects written by PUT, POST or Copy that are "encrypted by SSE-S3 or
#: plaintext"; an SSE-KMS, DSSE-KMS or SSE-C object's ETag is not, and a multipart ETag (``-N``)
#: never is, whatever the encryption.
MD5_ETAG_ENCRYPTION = frozenset({"NOT-SSE", "SSE-S3"})
_HEX = frozenset("0123456789abcdef")


def content_md5(blockstore: str, etag: str | None, encryption: str | None) -> str | None:
    """The hex MD5 of an object's bytes where its store's listing proves it, else None.

    Only S3 proves it: a 32-hex ETag of an object whose inventory row says it is not encrypted or
    encrypted with SSE-S3. Without ``encryption`` (an inventory configured without the
    ``EncryptionStatus`` field, a listing, an event) nothing is proven: a KMS-encrypted copy of
    the same bytes has another ETag, so an ETag alone cannot tell two objects' bytes apart.
    """
    if blockstore != "s3" or not etag or encryption not in MD5_ETAG_ENCRYPTION:
        return None
    trimmed = etag.strip(' "').lower()  # S3 quotes its ETags
    return trimmed if len(trimmed) == 32 and set(trimmed) <= _HEX else None


def entry_key(checksum: str | None, object_md5: str | None) -> str | None:
    """A HEAD entry's proven content MD5: its recorded ``checksum`` when that is the MD5 of its own
    object's bytes (``object_md5``), else None (unproven: any object of its size may be its twin).

    An entry recorded by a client with a checksum of its own, by an S3-gateway multipart upload
    (the MD5 of the parts' MD5s) or on a KMS-encrypted object is unproven, however it looks.
    """
    if checksum is None or object_md5 is None:
        return None
    return object_md5 if checksum.lower() == object_md5 else None  # lakeFS stores checksums trimmed


def ruled_out(object_md5: str | None, key: str | None) -> bool:
    """Content evidence that a marked object is no twin of a HEAD entry (``key``: :func:`entry_key`).

    A twin records the entry's checksum, so with a proven entry it records the MD5 of the entry's
    bytes. Every way lakeFS records a checksum gives an object of other bytes another one: the MD5
    it computes itself (API and S3-gateway uploads), the store's ETag a client links (the MD5 of
    the linked bytes when proven), the source's checksum for a copy (the same bytes as the source).
    Only a client linking bytes under the MD5 of *other* bytes would make such a twin, and lakeFS
    drops that write itself at the branch's next commit (the committed base wins on equal
    identities). So two proven MD5s that differ rule the pair out; anything unproven does not.
    """
    return object_md5 is not None and key is not None and object_md5 != key


#: ``size``: every same-size HEAD entry is a pair (complete: the only field lakeFS's identity shares
#: with what a store can tell for sure). ``checksum``: also require a checksum candidate to match
#: (fewer stats; complete only if every write records the content MD5 or the store's ETag, so not
#: with SSE-KMS/SSE-C on S3 or clients linking objects with checksums of their own). ``content``:
#: every same-size HEAD entry except those content evidence rules out (:func:`ruled_out`).
TwinMatch = Literal["size", "checksum", "content"]


def is_twin(marked: MarkedObject, entry: HeadEntry, match: TwinMatch = "size") -> bool:
    """The join predicate: same size and, in ``checksum`` mode, a checksum the object may carry; in
    ``content`` mode, not ruled out by the proven MD5s of the object's and the entry's bytes."""
    if marked.size != entry.size:
        return False
    if match == "content":
        return not ruled_out(marked.md5, entry_key(entry.checksum, entry.object_md5))
    if match == "size" or marked.checksums is None:
        return True
    return entry.checksum in marked.checksums


def find_twins(
    marked: Iterable[MarkedObject], entries: Iterable[HeadEntry], match: TwinMatch = "size"
) -> list[TwinPair]:
    """Every twin pair, in memory (the reference of the mark's Spark join; small inputs only)."""
    by_size: dict[int, list[HeadEntry]] = {}
    for entry in entries:
        by_size.setdefault(entry.size, []).append(entry)
    pairs = {
        TwinPair(m.address, m.size, e.branch, e.path)
        for m in marked
        for e in by_size.get(m.size, ())
        if is_twin(m, e, match)
    }
    return sorted(pairs, key=lambda p: (p.address, p.branch, p.path))


def stat_requests(pairs: Iterable[TwinPair]) -> list[tuple[str, str]]:
    """The distinct (branch, path) stats the pairs need: one stat answers every object at a path."""
    return sorted({(p.branch, p.path) for p in pairs})


def decide(pairs: Iterable[TwinPair], answers: Mapping[tuple[str, str], StatAnswer]) -> list[TwinDecision]:
    """One decision per marked object that has twin pairs; a missing answer counts as unknown."""
    by_address: dict[str, list[TwinPair]] = {}
    sizes: dict[str, int] = {}
    for pair in pairs:
        if sizes.setdefault(pair.address, pair.size) != pair.size:
            raise TwinError(f"marked object {pair.address} has two sizes: {sizes[pair.address]}, {pair.size}")
        by_address.setdefault(pair.address, []).append(pair)
    return [
        _decide_one(address, sizes[address], group, answers) for address, group in sorted(by_address.items())
    ]


def _decide_one(
    address: str, size: int, pairs: list[TwinPair], answers: Mapping[tuple[str, str], StatAnswer]
) -> TwinDecision:
    where = sorted({(p.branch, p.path) for p in pairs})
    missing = StatAnswer.unknown("not asked (stat budget)")
    got = {w: answers.get(w, missing) for w in where}
    serving = tuple(w for w, a in got.items() if a.kind == "address" and a.address == address)
    if serving:
        branch, path = serving[0]
        return TwinDecision(
            address, size, TwinVerdict.LIVE, serving, f"staged at {path!r} on branch {branch!r}"
        )
    unresolved = tuple(w for w, a in got.items() if a.kind == "unknown")
    if unresolved:
        branch, path = unresolved[0]
        detail = got[unresolved[0]].detail
        return TwinDecision(
            address, size, TwinVerdict.KEPT, unresolved, f"cannot rule out {path!r} on {branch!r}: {detail}"
        )
    reason = f"none of {len(where)} same-size HEAD entries serves it"
    return TwinDecision(address, size, TwinVerdict.GARBAGE, (), reason)


@dataclass(frozen=True)
class TwinCounts:
    """The twin half of ``summary.json``: every twin kept or released, counted with its bytes."""

    pairs: int
    stats: int
    live: int
    live_bytes: int
    kept: int
    kept_bytes: int
    released: int
    released_bytes: int

    def summary(self) -> dict[str, int]:
        return dict(self.__dict__)


def count(pairs: Iterable[TwinPair], decisions: Iterable[TwinDecision]) -> TwinCounts:
    pair_list = list(pairs)
    totals = {v: [0, 0] for v in TwinVerdict}
    for d in decisions:
        totals[d.verdict][0] += 1
        totals[d.verdict][1] += d.size
    return TwinCounts(
        pairs=len(pair_list),
        stats=len(stat_requests(pair_list)),
        live=totals[TwinVerdict.LIVE][0],
        live_bytes=totals[TwinVerdict.LIVE][1],
        kept=totals[TwinVerdict.KEPT][0],
        kept_bytes=totals[TwinVerdict.KEPT][1],
        released=totals[TwinVerdict.GARBAGE][0],
        released_bytes=totals[TwinVerdict.GARBAGE][1],
    )
