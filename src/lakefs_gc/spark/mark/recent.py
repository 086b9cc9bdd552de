"""A range reader's bounded memory of what it has just read: :class:`RecentAddresses` (the
addresses it gave) and :class:`RecentContents` (the HEAD entries' contents it will give).

A task of the mark reads its ranges in key order: the versions of one span of paths (each
commit that touches a range writes it again) come one after the other and share most of their
addresses, so leaving out what the last few ranges gave already hands Spark's ``distinct`` a
fraction of the rows (at the bottom line the HEADs' ranges hold 8.6 entries per object).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

from lakefs_gc.sstable.addresses import ContentEntry

K = TypeVar("K", bound=Hashable)

#: ranges a task remembers the addresses of (:class:`RecentAddresses`), and at most this many of
#: their addresses (older ranges are forgotten first, the last one never): ~200 bytes each, so
#: ~40 MB per task whatever lakeFS's range sizes. An address the ranges read one after the other
#: keep giving is never forgotten, so the window only bridges ranges that lack it
DEDUPE_WINDOW = 16
DEDUPE_ADDRESSES = 200_000


class _Window(Generic[K]):
    """The last ``window`` ranges a task read (fewer when they hold more than ``cap`` items), and
    for each item the latest range that held it: what :class:`RecentAddresses` and
    :class:`RecentContents` remember, and the one rule by which they forget it."""

    def __init__(self, window: int, cap: int) -> None:
        self.window = window
        self.cap = cap
        self._last: dict[K, int] = {}  # item -> the latest range (its ordinal) that held it
        self._ranges: deque[tuple[int, list[K]]] = deque()
        self._held = 0  # items in ``_ranges``
        self._ordinal = 0

    def _open(self) -> int:
        """The ordinal of the range about to be read."""
        self._ordinal += 1
        return self._ordinal - 1

    def _close(self, ordinal: int, items: list[K]) -> list[K]:
        """Remember the range ``ordinal`` held ``items``; forget the oldest ranges past the window
        or the cap (never the last one), and give the items no later range held (each once)."""
        last = self._last
        self._ranges.append((ordinal, items))
        self._held += len(items)
        forgotten: list[K] = []
        while len(self._ranges) > self.window or (len(self._ranges) > 1 and self._held > self.cap):
            old, old_items = self._ranges.popleft()
            self._held -= len(old_items)
            for item in old_items:
                if last.get(item) == old:
                    del last[item]
                    forgotten.append(item)
        return forgotten


class RecentAddresses(_Window[str]):
    """The addresses of the last ``window`` ranges a task read (fewer when they list more than
    ``addresses``): an address one of them gave is not given again. Only ever leaves out repeats,
    so the distinct addresses are those of every range; memory is bounded by ``addresses`` (or
    by the last range, if it alone lists more)."""

    def __init__(self, window: int = DEDUPE_WINDOW, addresses: int = DEDUPE_ADDRESSES) -> None:
        super().__init__(window, addresses)

    def fresh(self, addresses: Iterable[str]) -> list[str]:
        """Those of one range's ``addresses`` none of the last ranges gave (each once)."""
        ordinal, last = self._open(), self._last
        seen: list[str] = []
        fresh: list[str] = []
        for address in addresses:
            if last.get(address) is None:
                fresh.append(address)
            last[address] = ordinal
            seen.append(address)
        self._close(ordinal, seen)
        return fresh

    def held(self) -> int:
        """How many distinct addresses it remembers (bounded as the class says)."""
        return len(self._last)


class RecentContents(_Window[ContentEntry]):
    """The HEAD entries' contents ``(size, address, checksum)`` of the last ``window`` ranges a task
    read (fewer when they hold more than ``contents``), each with the sum of its entries' weights
    (the branch HEADs holding each entry's range): a content is given once it leaves the window,
    with all it gathered there. Gives every content its ranges hold, and the sums of what it
    gives per content add up to the sum of its entries' weights exactly (a content that comes
    back after leaving is given again, with what it gathers then)."""

    def __init__(self, window: int = DEDUPE_WINDOW, contents: int = DEDUPE_ADDRESSES) -> None:
        super().__init__(window, contents)
        self._weights: dict[ContentEntry, int] = {}

    def add(self, entries: list[ContentEntry], weight: int) -> list[tuple[ContentEntry, int]]:
        """Take one range's entries, each of ``weight``; give the contents that left the window."""
        ordinal, last, weights = self._open(), self._last, self._weights
        for entry in entries:
            weights[entry] = weights.get(entry, 0) + weight
            last[entry] = ordinal
        return [(entry, weights.pop(entry)) for entry in self._close(ordinal, entries)]

    def rest(self) -> list[tuple[ContentEntry, int]]:
        """Everything still held (the task's last ranges), given now and forgotten."""
        given = list(self._weights.items())
        self._weights.clear()
        self._last.clear()
        self._ranges.clear()
        self._held = 0
        return given
