"""The range cache's lookups: the rows of the needed ranges, from the parts of their buckets.

Executor tasks (pickled with their paths and settings, as :mod:`.tasks`' are), one per level:
the addresses (the classification's), the HEAD entries (the identity-twin guard's paths) and
their contents without paths (the guard's plan, :mod:`.heads`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakefs_gc.spark.mark.head_trees import HEAD_CONTENTS
from lakefs_gc.spark.mark.range_cache.tasks import (
    ENTRY_SCHEMA,
    RANGE_SCHEMA,
    Part,
    _by_bucket,
    _MetarangeLookup,
    _Store,
)


@dataclass(frozen=True)
class _Lookup:
    """The rows of the needed ranges, from the parts of their buckets; a needed range the cache does
    not hold raises (:class:`_RangeIngest` has just put every one there). A level reads its
    ``columns`` and keeps what :meth:`rows` makes of each batch."""

    store: _Store
    listed: Mapping[int, tuple[Part, ...]]
    columns: ClassVar[list[str]]
    level: ClassVar[str]

    def rows(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        raise NotImplementedError

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for bucket, ids in sorted(_by_bucket(batches).items()):
            found: set[str] = set()
            for part in self.listed.get(bucket, ()):
                for batch in self.store.scan(part, self.columns, ids, found):
                    rows = self.rows(batch)
                    if rows.num_rows:
                        yield rows
            self.store.require(ids, found, f"{self.level} {bucket}")


@dataclass(frozen=True)
class _RangeLookup(_Lookup):
    """The addresses of the needed ranges."""

    columns: ClassVar[list[str]] = RANGE_SCHEMA.names
    level: ClassVar[str] = "bucket"

    def rows(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([batch.column(1).drop_null()], names=["address"])


@dataclass(frozen=True)
class _EntryLookup(_Lookup):
    """``(id, path, size, address, checksum)`` of the needed ranges, from the entries level."""

    columns: ClassVar[list[str]] = ENTRY_SCHEMA.names
    level: ClassVar[str] = "entries bucket"

    def rows(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        batch = batch.filter(pc.is_valid(batch.column(1)))
        return pa.RecordBatch.from_arrays(batch.columns, names=["id", *ENTRY_SCHEMA.names[1:]])


@dataclass(frozen=True)
class _ContentLookup(_Lookup):
    """``(id, size, address, checksum)`` of the needed ranges' entries, from the entries level
    without their paths (the largest column, which the guard's plan does not need); ``sizes``:
    a broadcast sorted ``int64`` array, and only the entries of those sizes are returned (None:
    every entry). The filter runs here, before the rows reach the JVM: at the bottom line the
    level holds 177.6M entries, and a cycle after a sweep marks few sizes."""

    sizes: Any = None  # pyspark Broadcast of a sorted numpy int64 array, or None
    columns: ClassVar[list[str]] = ["range_id", "size", "address", "checksum"]
    #: :data:`~lakefs_gc.spark.mark.head_trees.HEAD_CONTENTS`' column names, in its order
    names: ClassVar[list[str]] = [column.split()[0] for column in HEAD_CONTENTS.split(",")]
    level: ClassVar[str] = "entries bucket"

    def rows(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        batch = batch.filter(pc.is_valid(batch.column(1)))  # an empty range's row has no size
        if self.sizes is not None and batch.num_rows:
            batch = batch.filter(
                pa.array(_among(batch.column(1).to_numpy(zero_copy_only=False), self.sizes.value))
            )
        return pa.RecordBatch.from_arrays(batch.columns, names=self.names)


@dataclass(frozen=True)
class _RangeFlags:
    """The distinct range ids of the task's metaranges (``lookup``'s), each with ``main``: whether
    a metarange outside ``only`` lists it, and ``head``: whether one of ``heads`` does. Made
    distinct in the task, before the rows reach the JVM: at the bottom line the active metaranges
    list 22M (metarange, range) pairs, for 32K distinct ranges."""

    lookup: _MetarangeLookup  # with_metarange
    only: tuple[str, ...]
    heads: tuple[str, ...]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        only, heads = pa.array(self.only, pa.string()), pa.array(self.heads, pa.string())
        tables = []
        for batch in self.lookup(batches):
            metarange = batch.column(0)
            main = pc.invert(pc.is_in(metarange, value_set=only))
            head = pc.is_in(metarange, value_set=heads)
            tables.append(_distinct(pa.table([batch.column(1), main, head], names=["id", "main", "head"])))
        if tables:
            yield from _distinct(pa.concat_tables(tables)).to_batches()


def _distinct(flagged: pa.Table) -> pa.Table:
    """``id, main, head``: each id of ``flagged`` once, with whether any of its rows is ``main``
    and whether any is ``head`` (per batch, then over the task's batches)."""
    merged = flagged.group_by("id").aggregate([("main", "any"), ("head", "any")])
    columns = [merged.column("id"), merged.column("main_any"), merged.column("head_any")]
    return pa.table(columns, names=["id", "main", "head"])


def _among(values: Any, sorted_values: Any) -> Any:
    """A boolean mask: which of ``values`` are in ``sorted_values`` (binary search: no hash set
    of a million sizes built again for every batch)."""
    if not len(sorted_values):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_values, values), len(sorted_values) - 1)
    return sorted_values[at] == values
