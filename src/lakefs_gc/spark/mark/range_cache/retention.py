"""The range cache's byte cap (``service.range_cache_max_bytes``), honoured between marks.

A mark leaves in the cache what it needed and, per bucket, up to half of it no longer needed
(:mod:`.cache`: rewriting a bucket for every unneeded range would cost more than it saves). That
bounds the cache by the repository's active ranges, which keep growing with the repository. So
the service's maintenance, before each mark, trims the newest generation to the cap, one part
(a metarange part, or a bucket's part of the addresses, of the HEAD entries or of the committed
addresses) at a time:

1. parts the newest mark did not need (nothing its active metaranges reference), least recently
   needed first; the HEAD entries level is not among them (the identity-twin guard reads it
   whenever a mark has garbage of a HEAD entry's size: a cycle with none leaves it unused, not
   unneeded);
2. then least recently used: the parts of older marks' generations first, the oldest written first.

What is dropped is only work lost: the next mark reads those metaranges and ranges from lakeFS again
(and caches them again; a cap below what one mark needs makes every mark read that excess). Dropping
any part of the committed addresses, or any address part, drops that level whole: the next mark
builds it afresh from the addresses level (:mod:`.committed`).
The trimmed generation is written as a new record, and the dropped files deleted, before the
mark opens the cache; a kill in between leaves files the next open deletes.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace

from lakefs_gc.spark.mark.range_cache.cache import RangeCache
from lakefs_gc.spark.mark.range_cache.generation import Generation
from lakefs_gc.spark.mark.range_cache.tasks import Part

_log = logging.getLogger(__name__)

_WRITTEN = re.compile(r"part-(\d+)")


@dataclass(frozen=True)
class Trimmed:
    """What one retention run did to a repository's cache."""

    bytes_before: int
    bytes_after: int
    parts_dropped: int
    #: the bytes the next mark needs as the newest did (:func:`needed_bytes`): above the cap, every
    #: mark reads the excess from lakeFS again (a dropped address part: the committed level too)
    needed_bytes: int = 0


def plan_retention(generation: Generation, sizes: dict[str, int], max_bytes: int) -> Generation:
    """``generation`` without the parts to drop to fit ``max_bytes`` (see the module docstring);
    ``generation`` itself when it fits. The result is numbered one higher."""
    total = sum(sizes.get(p.file, 0) for p in generation.parts())
    if total <= max_bytes:
        return generation
    last, heads = generation.last_used(), _head_files(generation)
    dropped: set[str] = set()
    for part in sorted(generation.parts(), key=lambda p: _drop_order(p, last, heads)):
        if total <= max_bytes:
            break
        dropped.add(part.file)
        total -= sizes.get(part.file, 0)
    ranges, entries = (
        {b: kept for b, ps in level.items() if (kept := tuple(p for p in ps if p.file not in dropped))}
        for level in (generation.ranges, generation.entries)
    )
    metaranges = tuple(p for p in generation.metaranges if p.file not in dropped)
    committed = generation.committed
    addresses = {p.file for ps in generation.ranges.values() for p in ps}
    if committed is not None and dropped & (addresses | {p.file for p in committed.parts()}):
        committed = None  # whole or not at all; and it must read the ranges it lost (:mod:`.committed`)
    return replace(
        generation, number=generation.number + 1, metaranges=metaranges, ranges=ranges, entries=entries,
        committed=committed,
    )  # fmt: skip


def needed_bytes(generation: Generation, sizes: dict[str, int]) -> int:
    """The bytes of ``generation``'s parts the next mark needs as its newest one did (those the byte
    cap drops last, see the module docstring): what the cache must keep for that mark to read
    nothing of it from lakeFS again."""
    last, heads = generation.last_used(), _head_files(generation)
    return sum(sizes.get(p.file, 0) for p in generation.parts() if _needed(p, last, heads))


def _head_files(generation: Generation) -> frozenset[str]:
    return frozenset(p.file for ps in generation.entries.values() for p in ps)


def _needed(part: Part, last: int, heads: frozenset[str]) -> bool:
    return part.used >= last or part.file in heads


def _drop_order(part: Part, last: int, heads: frozenset[str]) -> tuple[int, int, int, str]:
    written = _WRITTEN.search(part.file)
    return (int(_needed(part, last, heads)), part.used, int(written.group(1)) if written else 0, part.file)


def trim_range_cache(cache: RangeCache, max_bytes: int) -> Trimmed:
    """Apply :func:`plan_retention` to the cache's newest generation (no mark may run meanwhile)."""
    current = cache.latest()
    if current is None:
        return Trimmed(0, 0, 0)
    sizes = cache.part_sizes(current)
    before, needed = sum(sizes.values()), needed_bytes(current, sizes)
    trimmed = plan_retention(current, sizes, max_bytes)
    if trimmed is current:
        return Trimmed(before, before, 0, needed)
    cache.replace(trimmed)
    after = sum(sizes[f] for f in trimmed.files())
    dropped = len(current.files()) - len(trimmed.files())
    _log.info("range cache %s: %d parts dropped to fit %d bytes (%d -> %d)",
              cache.root, dropped, max_bytes, before, after)  # fmt: skip
    return Trimmed(before, after, dropped, needed)
