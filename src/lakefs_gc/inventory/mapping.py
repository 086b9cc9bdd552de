"""From inventory rows to per-repository candidates.

One inventory usually covers a whole bucket (or storage account) and therefore many repositories'
storage namespaces. Each row is routed to the namespace whose key prefix it starts with (the
longest, should namespaces nest), and its key becomes a namespace-relative ``address``. Rows
outside every configured namespace, under ``_lakefs/``, directly under ``data/`` or otherwise not
deletable are dropped here (docs/invariants.md, invariant 3), exactly as the listing drops them.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakefs_gc.gc.addresses import DATA_OBJECT_PATTERN, SCHEME_PATTERN, SEGMENT_PATTERN
from lakefs_gc.gc.twins import MD5_ETAG_ENCRYPTION
from lakefs_gc.storage.locations import StorageLocation

CANDIDATE_SCHEMA = pa.schema(
    [
        ("repository", pa.string()),
        ("address", pa.string()),
        ("size", pa.int64()),
        ("last_modified", pa.timestamp("us", tz="UTC")),
        ("etag", pa.string()),
        ("delivery_id", pa.string()),
        ("snapshot_time", pa.timestamp("us", tz="UTC")),
        # S3's EncryptionStatus (null: not delivered, or Azure), which with the ETag proves the
        # bytes' MD5 (content_md5s); parts ingested before it have no such column (read as null)
        ("encryption", pa.string()),
    ]
)

#: the candidate columns that hold one value per route and delivery
CONSTANT_COLUMNS = ("repository", "delivery_id", "snapshot_time")

#: what :func:`route_rows` gives: CANDIDATE_SCHEMA with :data:`CONSTANT_COLUMNS` dictionary-encoded.
#: Each is then one value and a zero index per row, where a plain column copied the value into every
#: row (a delivery id is a whole manifest path: 16 ms per 700,000 rows for the repository's name
#: alone), and a part's writer stores them as the dictionaries they already are instead of hashing
#: every row to find one. Readers of a part see plain columns either way. Measured in bench/README.md,
#: "`inventory.py`: the constant columns as dictionaries (2026-12-01)".
ROUTED_SCHEMA = pa.schema(
    [
        f.with_type(pa.dictionary(pa.int32(), f.type)) if f.name in CONSTANT_COLUMNS else f
        for f in CANDIDATE_SCHEMA
    ]
)


@dataclass(frozen=True)
class NamespaceRoute:
    """A repository's storage namespace as an inventory sees it: a bucket/container and key prefix."""

    repository: str
    container: str
    prefix: str  # "" for a namespace at the bucket root, else ending in "/"

    @classmethod
    def of(cls, repository: str, namespace: StorageLocation) -> NamespaceRoute:
        key = namespace.key.strip("/")
        return cls(repository, namespace.container, key + "/" if key else "")


def route_rows(
    rows: pa.Table | pa.RecordBatch,
    routes: Sequence[NamespaceRoute],
    *,
    delivery_id: str,
    snapshot_time: datetime,
) -> pa.Table:
    """``rows`` (INVENTORY_SCHEMA) as candidates (ROUTED_SCHEMA) of the routed repositories.

    Vectorised: a handful of Arrow kernels per route, no Python per row (an inventory has
    millions of rows per data file). Each route claims its rows (:func:`_claims`: the longest
    prefix wins); the namespace prefix is then cut off by bytes (it is whole UTF-8 characters,
    matched byte-wise): a code-point slice would decode every key. A route's deletable rows are
    taken as slices where they are a few runs (:func:`_select`): an inventory lists keys in order,
    so its ``_lakefs/`` rows are one run or a few.
    """
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
    parts: list[pa.Table] = []
    for route, routed in _claims(table.select(_CARRIED), table.column("bucket"), routes):
        addresses = _strip_prefix(routed.column("key"), route.prefix)
        routed = routed.set_column(0, "key", addresses)
        routed = _select(routed, deletable_keys(addresses))
        if routed.num_rows:
            parts.append(_candidates(routed, route, delivery_id, snapshot_time))
    return pa.concat_tables(parts) if parts else ROUTED_SCHEMA.empty_table()


def _claims(
    carried: pa.Table, buckets: pa.ChunkedArray, routes: Sequence[NamespaceRoute]
) -> Iterator[tuple[NamespaceRoute, pa.Table]]:
    """Each route with the rows it claims (none: not yielded): the rows of its container whose
    key starts with its prefix, the longest prefix first, a row claimed once.

    An S3 inventory lists one bucket, its keys in ascending order. Such rows are claimed by
    ranges (:func:`_claims_by_range`): one check that the keys ascend (3 ms per 1M keys), then
    a binary search per route, where a test of every key per route cost a pass over all of them
    for each repository the inventory feeds (12 ms per 1M keys each): routing 1M rows to 100
    repositories took 476 CPU ms, now 78, and to 3, 78 then 61 (bench/README.md,
    "`routing.py`: an inventory that feeds many repositories (2026-12-08)"). Any other rows (several
    containers, keys out of order, a null bucket or key) are claimed by masks
    (:func:`_claims_by_mask`).
    """
    ranked = sorted(routes, key=lambda r: len(r.prefix), reverse=True)
    if not ranked or carried.num_rows == 0:
        return
    keys = carried.column("key")
    container = _one_container(buckets)
    if container is not None and _ascending(keys):
        yield from _claims_by_range(carried, [r for r in ranked if r.container == container])
    else:
        yield from _claims_by_mask(carried, buckets, ranked, container)


def _claims_by_range(
    carried: pa.Table, ranked: list[NamespaceRoute]
) -> Iterator[tuple[NamespaceRoute, pa.Table]]:
    """:func:`_claims` of rows of one container whose keys ascend (byte order, no nulls): the
    keys starting with a prefix are one range of rows, less the ranges of longer prefixes
    nested in it."""
    keys = carried.column("key")
    taken: list[tuple[int, int]] = []
    for route in ranked:
        span = _prefix_range(keys, route.prefix)
        runs = [carried.slice(a, b - a) for a, b in _uncovered(span, taken)]
        taken.append(span)
        if runs:
            yield route, pa.concat_tables(runs)


def _claims_by_mask(
    carried: pa.Table, buckets: pa.ChunkedArray, ranked: list[NamespaceRoute], every_row_in: str | None
) -> Iterator[tuple[NamespaceRoute, pa.Table]]:
    """:func:`_claims` of any rows, by a mask per route. The bucket test runs once per
    container, and not at all for ``every_row_in``, the container :func:`_one_container`
    already found every row in (None: none such)."""
    keys = carried.column("key")
    # a container's rows; None: every row (no mask needed)
    containers: dict[str, pa.ChunkedArray | None] = {} if every_row_in is None else {every_row_in: None}
    unclaimed: pa.ChunkedArray | None = None  # None: no route has claimed any row yet
    for route in ranked:
        if route.container not in containers:
            containers[route.container] = _in_container(buckets, route.container)
        mine = containers[route.container]
        if route.prefix:
            prefixed = pc.starts_with(keys, route.prefix)
            mine = prefixed if mine is None else pc.and_(mine, prefixed)
        elif mine is None:
            mine = pc.is_valid(keys)
        mine = pc.fill_null(mine, False)  # a row without bucket or key belongs to no namespace
        if unclaimed is not None:
            mine = pc.and_(mine, unclaimed)
        unclaimed = pc.invert(mine) if unclaimed is None else pc.and_not(unclaimed, mine)
        routed = _select(carried, mine)
        if routed.num_rows:
            yield route, routed


def _one_container(buckets: pa.ChunkedArray) -> str | None:
    """The container every row is in, if they are all in one (and none lacks one)."""
    if buckets.null_count or len(buckets) == 0:
        return None
    first = buckets[0].as_py()
    return first if pc.all(pc.equal(buckets, first)).as_py() else None


def _ascending(keys: pa.ChunkedArray) -> bool:
    """Whether ``keys`` has no null and each key is at least the one before it, in byte order
    (Arrow's order of strings; a Python ``str``'s code-point order is the same for UTF-8)."""
    n = len(keys)
    if keys.null_count:
        return False
    return n < 2 or bool(pc.all(pc.less_equal(keys.slice(0, n - 1), keys.slice(1))).as_py())


def _prefix_range(keys: pa.ChunkedArray, prefix: str) -> tuple[int, int]:
    """The rows ``[start, stop)`` of ascending ``keys`` that start with ``prefix``: those not
    less than it, up to the first that does not start with it (a key not less than the prefix
    that does not start with it is greater than every key that does). Two comparisons settle
    a batch that holds none (most of them, where an inventory feeds many repositories)."""
    n = len(keys)
    if not prefix:
        return 0, n

    def key(i: int) -> str:
        text: str = keys[i].as_py()
        return text

    first, last = key(0), key(n - 1)
    if last < prefix or (first > prefix and not first.startswith(prefix)):
        return 0, 0  # every key before the prefix's, or after: a batch of another namespace's rows
    start = bisect.bisect_left(range(n), prefix, key=key)
    stop = bisect.bisect_left(range(start, n), True, key=lambda i: not key(i).startswith(prefix))
    return start, start + stop


def _uncovered(span: tuple[int, int], taken: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The non-empty parts of ``span`` that no range of ``taken`` covers, in order."""
    start, stop = span
    free = []
    for a, b in sorted(taken):
        if b <= start or a >= stop:
            continue
        if a > start:
            free.append((start, a))
        start = max(start, b)
    if start < stop:
        free.append((start, stop))
    return free


#: the inventory columns a candidate carries (``key`` first: it becomes the address)
_CARRIED = ["key", "size", "last_modified", "etag", "encryption"]
#: at most this many runs of rows are taken as slices; more are filtered (one copy of each column)
_MAX_RUNS = 16


def _select(table: pa.Table, mask: pa.ChunkedArray | pa.Array) -> pa.Table:
    """The rows of ``table`` where ``mask`` (no nulls) is true: slices of it, no copy, where they
    are at most :data:`_MAX_RUNS` runs, else a filtered copy of every column."""
    chunks = mask.chunks if isinstance(mask, pa.ChunkedArray) else [mask]
    flags = np.concatenate([c.to_numpy(zero_copy_only=False) for c in chunks] or [np.zeros(0, np.bool_)])
    if flags.all():
        return table
    # run boundaries: where a flag differs from the one before (a False before the first row)
    edges = np.flatnonzero(np.diff(flags, prepend=False, append=False))
    if len(edges) > 2 * _MAX_RUNS:
        return table.filter(mask)
    runs = [table.slice(int(a), int(b - a)) for a, b in zip(edges[0::2], edges[1::2], strict=True)]
    return pa.concat_tables(runs) if runs else table.slice(0, 0)


def _in_container(buckets: pa.ChunkedArray, container: str) -> pa.ChunkedArray | None:
    """Which rows are in ``container``; None when all of them are."""
    mine = pc.fill_null(pc.equal(buckets, container), False)
    return None if pc.all(mine).as_py() else mine


def _strip_prefix(keys: pa.ChunkedArray, prefix: str) -> pa.ChunkedArray:
    """``keys``, each starting with ``prefix`` (byte-wise), without it: a byte slice, which stays
    valid UTF-8 because the prefix is whole characters. (``binary_slice`` is given an explicit
    stop: pyarrow 26 fails with "Negative buffer resize" without one.)"""
    if not prefix:
        return keys
    start = len(prefix.encode())
    chunks = [pc.binary_slice(c.view(pa.binary()), start, 2**31 - 1).view(pa.string()) for c in keys.chunks]
    return pa.chunked_array(chunks, pa.string())


def _candidates(
    routed: pa.Table, route: NamespaceRoute, delivery_id: str, snapshot_time: datetime
) -> pa.Table:
    """The route's deletable rows (:data:`_CARRIED`, ``key`` already the address) as candidates."""
    zeros = pa.array(np.zeros(routed.num_rows, np.int32))

    def constant(name: str, value: object) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(zeros, pa.array([value], CANDIDATE_SCHEMA.field(name).type))

    return pa.table(
        {
            "repository": constant("repository", route.repository),
            "address": routed.column("key"),
            "size": routed.column("size"),
            "last_modified": routed.column("last_modified"),
            "etag": routed.column("etag"),
            "delivery_id": constant("delivery_id", delivery_id),
            "snapshot_time": constant("snapshot_time", snapshot_time),
            "encryption": routed.column("encryption"),
        },
        schema=ROUTED_SCHEMA,
    )


def content_md5s(
    etags: pa.ChunkedArray | pa.Array, encryptions: pa.ChunkedArray | pa.Array
) -> pa.ChunkedArray:
    """:func:`lakefs_gc.gc.twins.content_md5` of S3 inventory rows, vectorised: the ETag trimmed and
    lower-cased where it is 32 hex digits and the row's EncryptionStatus proves it is the MD5 of
    the bytes (``MD5_ETAG_ENCRYPTION``), else null."""
    trimmed = pc.utf8_lower(pc.utf8_trim(etags, ' "'))
    proven = pc.and_(
        pc.is_in(encryptions, value_set=pa.array(sorted(MD5_ETAG_ENCRYPTION), pa.string())),
        pc.match_substring_regex(trimmed, "^[0-9a-f]{32}$"),
    )
    out = pc.if_else(pc.fill_null(proven, False), trimmed, pa.scalar(None, pa.string()))
    return out if isinstance(out, pa.ChunkedArray) else pa.chunked_array([out], pa.string())


# ---- deletable_key, vectorised -----------------------------------------------------------------

#: data/<slice>/<object>, or deeper (sharded layouts); never data/<file>
_DATA_KEY = rf"^{DATA_OBJECT_PATTERN}$"
#: a legacy object at the namespace root
_ROOT_KEY = rf"^{SEGMENT_PATTERN}$"
#: root-level names that are lakeFS's own
_NOT_ROOT_OBJECTS = ("dummy", "_lakefs")
_SLASH = ord("/")


def deletable_keys(keys: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """:func:`~lakefs_gc.gc.addresses.deletable_key` of every key (a null key: False), vectorised.

    The same rule (invariant 3): a key is deletable when it is ``data/<segment>/<segment>[/...]``,
    or a single segment at the namespace root that is neither ``dummy`` nor ``_lakefs`` and does
    not begin like a URI (``s3:``); a segment is anything without ``/`` except ``""``, ``.`` and
    ``..``. Every other shape (``_lakefs/...``, ``data/<file>``, other directories, absolute
    paths, empty segments) is not. ``tests/inventory/test_mapping.py`` checks it against
    :func:`deletable_key` exhaustively on short keys of the tricky characters and on random text.

    Most keys are decided by byte tests on the whole column at once (numpy over Arrow's buffers:
    RE2 costs about 150 ns a key, 1.4 CPU s per 10M inventory rows): a key that starts with
    ``data/``, has no ``/`` followed by ``/`` or ``.`` and does not end in ``/`` has only
    segments that begin with neither, so it is deletable exactly when a ``/`` follows ``data/``.
    The keys this cannot decide (those with ``/.``, ``//`` or a trailing ``/``, and keys with no
    ``/`` at all) go through the patterns.
    """
    if isinstance(keys, pa.ChunkedArray):
        return pa.chunked_array([_deletable(chunk) for chunk in keys.chunks], pa.bool_())
    return _deletable(keys)


def _deletable(keys: pa.Array) -> pa.Array:
    if keys.type != pa.string() or len(keys) == 0:
        return _deletable_by_pattern(keys)
    data_prefix = pc.fill_null(pc.starts_with(keys, "data/"), False).to_numpy(zero_copy_only=False)
    has_slash, unsure = _slash_shape(keys, data_prefix)
    valid = keys.is_valid().to_numpy(zero_copy_only=False)
    out = data_prefix & has_slash & ~unsure
    ask = valid & ((data_prefix & unsure) | (~data_prefix & ~has_slash))
    if ask.any():
        rows = np.flatnonzero(ask)
        out[rows] = _deletable_by_pattern(keys.take(pa.array(rows))).to_numpy(zero_copy_only=False)
    return pa.array(out & valid, pa.bool_())


def _slash_shape(keys: pa.Array, data_prefix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per key: is there a ``/`` (after ``data/`` for the keys that start with it), and is there a
    ``/`` followed by ``/`` or ``.`` or ending the key (conservatively: may flag a few more).

    Both from the positions of the ``/`` bytes, found in one pass over the keys' bytes: what
    follows is a few array operations per key and per ``/`` (three a key in lakeFS's layout), where
    a byte-wise test of each question cost a pass over every byte and an array as large."""
    n = len(keys)
    offsets = np.frombuffer(keys.buffers()[1], np.int32, n + 1, keys.offset * 4).astype(np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    data = np.frombuffer(keys.buffers()[2], np.uint8, hi - lo, lo) if hi > lo else np.zeros(0, np.uint8)
    starts, ends = offsets[:-1] - lo, offsets[1:] - lo
    slashes = np.flatnonzero(data == _SLASH)
    # the first "/" at or after each key's start (after "data/" if it has it), if before its end
    first = np.where(data_prefix, starts + len("data/"), starts)
    bounded = np.append(slashes, len(data))  # one position past the end: "no further slash"
    has_slash = bounded[np.searchsorted(slashes, first)] < ends
    # "/" then "/" or ".": (byte | 1) == "/" matches both "." (46) and "/" (47); a "/" that is the
    # last byte is followed by nothing (and ends its key: unsure below anyway)
    inside = slashes[slashes + 1 < len(data)]
    odd = inside[(data[inside + 1] | 1) == _SLASH]
    unsure = np.zeros(n, np.bool_)
    if len(odd):
        unsure[np.searchsorted(ends, odd, side="right")] = True  # the key holding that "/"
    nonempty = ends > starts
    unsure[nonempty] |= data[ends[nonempty] - 1] == _SLASH
    return has_slash, unsure


def _deletable_by_pattern(keys: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The rule as RE2 patterns: exact for any key, and the reference for the byte tests."""
    ok = pc.fill_null(pc.match_substring_regex(keys, _DATA_KEY), False)
    root = pc.fill_null(pc.less(pc.find_substring(keys, "/"), 0), False)
    if not pc.any(root).as_py():  # the usual case: every key is in a directory
        return ok
    root = pc.and_(root, pc.match_substring_regex(keys, _ROOT_KEY))
    root = pc.and_not(root, pc.match_substring_regex(keys, SCHEME_PATTERN))
    for name in _NOT_ROOT_OBJECTS:
        root = pc.and_not(root, pc.equal(keys, name))
    return pc.or_(ok, pc.fill_null(root, False))
