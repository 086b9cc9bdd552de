"""One generation record of the range cache (``_gen/<gen:08d>.json``): every part in use.

The record is the cache's commit point (:mod:`.cache`): parts it does not list are leftovers. Each
part says the newest generation whose mark needed it (``used``), which the byte cap
(:mod:`.retention`) orders its drops by.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from lakefs_gc.spark.mark.range_cache.tasks import Part

#: the record format this version writes (a record of another format reads as an empty cache)
FORMAT = 1
#: the record's key of the HEAD entries level (ENTRY_SCHEMA)
ENTRIES_KEY = "head_entries"
#: the record's key of the committed-address level (:mod:`.committed`)
COMMITTED_KEY = "committed_addresses"
#: how that level spreads its addresses over buckets (:func:`.committed.committed_bucket`) and
#: hashes each (:func:`.committed.committed_hash`); a level recorded otherwise (an older version's:
#: crc32 buckets, or no hashes) reads as none, and is built afresh
BUCKETING = "spark-murmur3+xxhash64"


@dataclass(frozen=True)
class CommittedLevel:
    """The committed-address level's parts (:mod:`.committed`): the part listing the ranges it
    counts (None: it counts none), and one part per bucket that holds an address."""

    ranges: Part | None
    buckets: Mapping[int, Part] = field(default_factory=dict)

    def parts(self) -> list[Part]:
        return [*([self.ranges] if self.ranges is not None else []), *self.buckets.values()]

    def used_by(self, number: int) -> CommittedLevel:
        """The level, every part needed by the mark of generation ``number`` (every mark reads it whole)."""
        ranges = replace(self.ranges, used=number) if self.ranges is not None else None
        return CommittedLevel(ranges, {b: replace(p, used=number) for b, p in self.buckets.items()})

    def to_json(self) -> dict[str, Any]:
        return {
            "bucketing": BUCKETING,
            "ranges": _part_json(self.ranges) if self.ranges is not None else None,
            "buckets": {str(b): _part_json(p) for b, p in sorted(self.buckets.items())},
        }

    @classmethod
    def from_json(cls, body: dict[str, Any], number: int) -> CommittedLevel | None:
        """The level ``body`` records; None when its buckets are spread otherwise than this
        version looks them up (an address would be sought in the wrong bucket)."""
        if body.get("bucketing") != BUCKETING:
            return None
        ranges = body["ranges"]
        return cls(
            _part(ranges, number) if ranges is not None else None,
            {int(b): _part(p, number) for b, p in body["buckets"].items()},
        )


def _part_json(part: Part) -> dict[str, Any]:
    return {"file": part.file, "rows": part.rows, "used": part.used}


def _part(body: dict[str, Any], number: int) -> Part:
    return Part(body["file"], int(body["rows"]), used=int(body.get("used", number)))


@dataclass(frozen=True)
class Generation:
    """What one record lists; ``number`` 0 with no parts is the empty cache."""

    number: int
    repository: str
    storage_namespace: str
    buckets: int
    metaranges: tuple[Part, ...] = ()
    ranges: Mapping[int, tuple[Part, ...]] = field(default_factory=dict)
    #: the entries of the HEAD trees' ranges, by bucket (:mod:`.heads`): the record's
    #: ``head_entries``. A record's ``entries`` are an older level without the content evidence
    #: (ENTRY_SCHEMA's address and checksum): not read, so the next open deletes their parts, and
    #: the guard reads those HEAD ranges from lakeFS once more
    entries: Mapping[int, tuple[Part, ...]] = field(default_factory=dict)
    #: every address the counted ranges hold, once (:mod:`.committed`); None: not built yet
    committed: CommittedLevel | None = None

    def files(self) -> set[str]:
        return {p.file for p in self.parts()}

    def to_json(self) -> str:
        body = {
            "format": FORMAT, "generation": self.number, "repository": self.repository,
            "storage_namespace": self.storage_namespace, "buckets": self.buckets,
            "metaranges": [
                {"file": p.file, "rows": p.rows, "ids": list(p.ids), "used": p.used} for p in self.metaranges
            ],
            "ranges": {
                str(b): [{"file": p.file, "rows": p.rows, "ranges": p.ranges, "used": p.used} for p in ps]
                for b, ps in sorted(self.ranges.items())
            },
            ENTRIES_KEY: {
                str(b): [{"file": p.file, "rows": p.rows, "ranges": p.ranges, "used": p.used} for p in ps]
                for b, ps in sorted(self.entries.items())
            },
            COMMITTED_KEY: self.committed.to_json() if self.committed is not None else None,
        }  # fmt: skip
        return json.dumps(body, indent=1)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Generation:
        number = int(body["generation"])  # a record without "used": every part used by its mark
        metaranges = tuple(
            Part(m["file"], int(m["rows"]), ids=tuple(m["ids"]), used=int(m.get("used", number)))
            for m in body["metaranges"]
        )
        ranges, entries = (
            {
                int(b): tuple(
                    Part(p["file"], int(p["rows"]), ranges=int(p["ranges"]), used=int(p.get("used", number)))
                    for p in ps
                )
                for b, ps in body.get(level, {}).items()
            }
            for level in ("ranges", ENTRIES_KEY)
        )
        level = body.get(COMMITTED_KEY)  # an older version's record has none, or another: built afresh
        committed = CommittedLevel.from_json(level, number) if level is not None else None
        return cls(
            number, str(body["repository"]), str(body["storage_namespace"]),
            int(body["buckets"]), metaranges, ranges, entries, committed,
        )  # fmt: skip

    def parts(self) -> list[Part]:
        levels = (*self.ranges.values(), *self.entries.values())
        committed = self.committed.parts() if self.committed is not None else []
        return [*self.metaranges, *(p for ps in levels for p in ps), *committed]

    def last_used(self) -> int:
        """The generation of the newest mark that used this cache (0: none)."""
        return max((p.used for p in self.parts()), default=0)

    def used_by_update(self, *, evict: bool) -> int:
        """The ``used`` of a part the next update writes or needs: the generation that update
        records, when it is a mark's (``evict``); a read-ahead's, which only adds (:mod:`.ahead`),
        leaves the newest mark's, so that the byte cap still orders parts by the marks that needed
        them, even after a read-ahead whose mark then failed."""
        return self.number + 1 if evict else self.last_used()

    def shape(self) -> tuple[frozenset[str], frozenset[str]]:
        """Its address files, and those the newest mark did not need: two generations of the same
        shape differ only in numbering, and need no new record. The HEAD entries level is left out:
        :mod:`.heads` updates it in the newest record after the mark's own step."""
        parts = [*self.metaranges, *(p for ps in self.ranges.values() for p in ps)]
        last = max((p.used for p in parts), default=0)
        return frozenset(p.file for p in parts), frozenset(p.file for p in parts if p.used < last)
