"""A range reader's bounded memory of what it has just read: :class:`RecentAddresses` (the
addresses it gave) and :class:`RecentContents` (the HEAD entries' contents it will give).

A task of the mark reads its ranges in key order: the versions of one span of paths (each
commit that touches a range writes it again) come one after the other and share most of their
addresses, so leaving out what the last few ranges gave already hands Spark's ``distinct`` a
fraction of the rows (at the bottom line the HEADs' ranges hold 8.6 entries per object).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from lakefs_gc.sstable.addresses import ContentEntry

#: ranges a task remembers the addresses of (:class:`RecentAddresses`), and at most this many of
#: their addresses (older ranges are forgotten first, the last one never): ~200 bytes each, so
#: ~40 MB per task whatever lakeFS's range sizes. An address the ranges read one after the other
#: keep giving is never forgotten, so the window only bridges ranges that lack it
DEDUPE_WINDOW = 16
DEDUPE_ADDRESSES = 200_000


class RecentAddresses:
    """The addresses of the last ``window`` ranges a task read (fewer when they list more than
    ``addresses``): an address one of them gave is not given again. Only ever leaves out repeats,
    so the distinct addresses are those of every range; memory is bounded by ``addresses`` (or
    by the last range, if it alone lists more)."""

    def __init__(self, window: int = DEDUPE_WINDOW, addresses: int = DEDUPE_ADDRESSES) -> None:
        self.window = window
        self.addresses = addresses
        self._last: dict[str, int] = {}  # address -> the latest range (its ordinal) that gave it
        self._ranges: deque[tuple[int, list[str]]] = deque()
        self._listed = 0  # addresses in ``_ranges``
        self._ordinal = 0

    def fresh(self, addresses: Iterable[str]) -> list[str]:
        """Those of one range's ``addresses`` none of the last ranges gave (each once)."""
        ordinal, last = self._ordinal, self._last
        self._ordinal += 1
        seen: list[str] = []
        fresh: list[str] = []
        for address in addresses:
            if last.get(address) is None:
                fresh.append(address)
            last[address] = ordinal
            seen.append(address)
        self._ranges.append((ordinal, seen))
        self._listed += len(seen)
        while len(self._ranges) > self.window or (len(self._ranges) > 1 and self._listed > self.addresses):
            old, old_addresses = self._ranges.popleft()
            self._listed -= len(old_addresses)
            for address in old_addresses:
                if last.get(address) == old:
                    del last[address]
        return fresh

    def held(self) -> int:
        """How many distinct addresses it remembers (bounded as the class says)."""
        return len(self._last)


class RecentContents:
    """The HEAD entries' contents ``(size, address, checksum)`` of the last ``window`` ranges a task
    read (fewer when they hold more than ``contents``), each with the sum of its entries' weights
    (the branch HEADs holding each entry's range): a content is given once it leaves the window,
    with all it gathered there. Gives every content its ranges hold, and the sums of what it
    gives per content add up to the sum of its entries' weights exactly (a content that comes
    back after leaving is given again, with what it gathers then)."""

    def __init__(self, window: int = DEDUPE_WINDOW, contents: int = DEDUPE_ADDRESSES) -> None:
        self.window = window
        self.contents = contents
        self._weights: dict[ContentEntry, int] = {}
        self._last: dict[ContentEntry, int] = {}  # content -> the latest range (its ordinal) that held it
        self._ranges: deque[tuple[int, list[ContentEntry]]] = deque()
        self._held = 0  # entries in ``_ranges``
        self._ordinal = 0

    def add(self, entries: list[ContentEntry], weight: int) -> list[tuple[ContentEntry, int]]:
        """Take one range's entries, each of ``weight``; give the contents that left the window."""
        ordinal, last, weights = self._ordinal, self._last, self._weights
        self._ordinal += 1
        for entry in entries:
            weights[entry] = weights.get(entry, 0) + weight
            last[entry] = ordinal
        self._ranges.append((ordinal, entries))
        self._held += len(entries)
        given: list[tuple[ContentEntry, int]] = []
        while len(self._ranges) > self.window or (len(self._ranges) > 1 and self._held > self.contents):
            old, old_entries = self._ranges.popleft()
            self._held -= len(old_entries)
            for entry in old_entries:
                if last.get(entry) == old:
                    del last[entry]
                    given.append((entry, weights.pop(entry)))
        return given

    def rest(self) -> list[tuple[ContentEntry, int]]:
        """Everything still held (the task's last ranges), given now and forgotten."""
        given = list(self._weights.items())
        self._weights.clear()
        self._last.clear()
        self._ranges.clear()
        self._held = 0
        return given
