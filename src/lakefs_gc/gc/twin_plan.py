"""The identity-twin guard's plan, in memory: which sizes to resolve by stats within the budgets.

The mark plans with Spark when the marked objects or the HEAD entries of their sizes are many
(:func:`lakefs_gc.spark.mark.twins.plan_weighted`). A small mark, the common case of a service
cycle and of a repository with little garbage, would spend seconds there on a dozen Spark jobs
over a few rows; it plans here instead, on the driver, from the same inputs and to the same
plan (the tests hold the two to each other):

- a HEAD entry (one per branch and path) is *needed* when some marked object of its size may be
  its twin (:func:`lakefs_gc.gc.twins.is_twin` in ``content`` mode); a size then costs one stat per
  needed entry, and as many pairs as the marked objects each needed entry may be a twin of;
- sizes are taken cheapest first (by stats, then size) while the running sums of stats and pairs
  stay within both budgets; every later size is *unresolved*: its marked objects that have a twin
  pair at all are kept without a stat;
- the marked objects of a HEAD entry's size without any twin pair were *ruled out* by content
  evidence.

Pairs are counted per size without being built, so a size shared by thousands of objects and
entries (empty files) costs a count, not a quadratic join; only the checked sizes' pairs, within
the pair budget by construction, are built. :func:`plan_twins` plans from HEAD entries with their
paths (read from the trees) and builds those pairs; :func:`plan_keys` plans from the entries
counted by content key, as the classification's reading of the HEAD ranges gives them, and
leaves the pairs to the caller, who reads the trees for the checked sizes only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace

from lakefs_gc.gc.twins import HeadEntry, MarkedObject, TwinPair, entry_key, find_twins


@dataclass(frozen=True)
class TwinPlan:
    """What the guard does with the marked objects: the ``pairs`` of the ``checked`` sizes to
    resolve by stats, the exposed objects of the other sizes kept ``unresolved``, and the objects
    content evidence ``ruled_out`` (of a HEAD entry's size, without any pair)."""

    checked: frozenset[int]
    pairs: list[TwinPair]
    unresolved: list[MarkedObject]
    ruled_out: list[MarkedObject]


@dataclass
class _Size:
    """The marked objects of one size, as the plan counts them against that size's entries."""

    objects: list[MarkedObject]
    unknown: int  # objects without a proven MD5: a twin of any entry of the size
    same: Counter[str]  # objects per proven MD5

    def matches(self, key: str | None) -> int:
        """How many of the objects an entry with content ``key`` may be a twin of."""
        return len(self.objects) if key is None else self.unknown + self.same[key]

    def exposed(self, keys: Collection[str | None]) -> list[MarkedObject]:
        """The objects with at least one pair among entries of these ``keys`` (the size's entries)."""
        if not keys:
            return []
        return [m for m in self.objects if m.md5 is None or None in keys or m.md5 in keys]


def plan_twins(
    marked: Iterable[MarkedObject], entries: Iterable[HeadEntry], *, stat_budget: int, pair_budget: int
) -> TwinPlan:
    """The plan for ``marked`` against the HEAD ``entries`` (one per branch and path, each with its
    own object's proven MD5 where known), with the pairs of the sizes it checks; see the module
    docstring."""
    marked = list(marked)
    sizes = {m.size for m in marked}
    by_size: dict[int, list[HeadEntry]] = {}
    keys: dict[int, Counter[str | None]] = {}
    for e in entries:
        if e.size in sizes:
            by_size.setdefault(e.size, []).append(e)
            keys.setdefault(e.size, Counter())[entry_key(e.checksum, e.object_md5)] += 1
    plan = plan_keys(marked, keys, stat_budget=stat_budget, pair_budget=pair_budget)
    pairs_of = [m for m in marked if m.size in plan.checked]
    pairs = find_twins(pairs_of, (e for s in plan.checked for e in by_size[s]), "content")
    return replace(plan, pairs=pairs)


def plan_keys(
    marked: Iterable[MarkedObject],
    keys: Mapping[int, Mapping[str | None, int]],
    *,
    stat_budget: int,
    pair_budget: int,
) -> TwinPlan:
    """The plan for ``marked`` from the HEAD entries of their sizes counted by content: ``keys``
    maps a size to each entry key (:func:`~lakefs_gc.gc.twins.entry_key`, None: unproven) and the
    number of (branch, path) entries of that size with that key, as the classification's reading
    of the HEAD ranges gives them without paths. Its ``pairs`` are left empty: building them
    needs the entries' paths, which the caller reads for the ``checked`` sizes only."""
    sizes: dict[int, _Size] = {}
    for m in marked:
        size = sizes.setdefault(m.size, _Size([], 0, Counter()))
        size.objects.append(m)
        if m.md5 is None:
            size.unknown += 1
        else:
            size.same[m.md5] += 1
    counted = {s: k for s, k in keys.items() if s in sizes and any(k.values())}
    costs = []  # (stats, size, pairs) of every size with a needed entry
    for s, weights in counted.items():
        matched = [(n, sizes[s].matches(key)) for key, n in weights.items()]
        stats = sum(n for n, matches in matched if matches)
        if stats:
            costs.append((stats, s, sum(n * matches for n, matches in matched)))
    checked: set[int] = set()
    total_stats = total_pairs = 0
    for stats, s, pairs in sorted(costs):
        total_stats, total_pairs = total_stats + stats, total_pairs + pairs
        if total_stats > stat_budget or total_pairs > pair_budget:
            break
        checked.add(s)
    exposed = {s: sizes[s].exposed({k for k, n in weights.items() if n}) for s, weights in counted.items()}
    return TwinPlan(
        checked=frozenset(checked),
        pairs=[],
        unresolved=sorted(
            (m for s, found in exposed.items() if s not in checked for m in found), key=_address
        ),
        ruled_out=sorted(
            (m for s, found in exposed.items() for m in set(sizes[s].objects) - set(found)), key=_address
        ),
    )


def _address(m: MarkedObject) -> str:
    return m.address
