"""The synthesizer's table writing: blocks a rewrite reuses, lakeFS's range splits, entry encoding.

A rewrite must give exactly the table a fresh encoding of the same records gives (so range ids
stay content addresses); tables must read back with our reader and RocksDB's ``sst_dump``; a
commit must keep untouched ranges by id and split the rest where lakeFS would.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from lakefs_gc.sstable import AddressType, Entry, SSTableReader, iter_metarange
from lakefs_gc.sstable.catalog import encode_entry
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.testing.blockstore import NamespaceStore
from lakefs_gc.testing.synth.blocks import Change, encode, rewrite
from lakefs_gc.testing.synth.objects import Objects, XidMaker, xid
from lakefs_gc.testing.synth.tablefile import assemble, read_blocks
from lakefs_gc.testing.synth.tables import RangeSplit, Tables, Tree, commit_tree
from lakefs_gc.testing.trees import _fnv1a, encode_value
from tests.support.rocksdb import SstDump


def _key(rng: random.Random) -> bytes:
    return f"t{rng.randint(0, 9)}/p{rng.randint(0, 10**6):07d}".encode()


def test_a_rewrite_gives_the_blocks_of_a_fresh_encoding() -> None:
    rng = random.Random(5)
    for _trial in range(20):
        current = {_key(rng): (rng.randbytes(rng.randint(5, 200)), rng.random() < 0.01) for _ in range(2000)}
        blocks = list(encode((k, v, s) for k, (v, s) in sorted(current.items())))
        for _round in range(4):
            changes: dict[bytes, tuple[bytes | None, bool]] = {}
            for _ in range(rng.randint(0, 60)):
                if current and rng.random() < 0.4:
                    changes[rng.choice(sorted(current))] = (None, False)
                else:
                    changes[_key(rng)] = (rng.randbytes(30), rng.random() < 0.01)
            ordered: list[Change] = [(k, v, s) for k, (v, s) in sorted(changes.items())]
            new = list(rewrite(blocks, ordered))
            reused = sum(1 for b in new if any(b is old for old in blocks))
            for k, (v, s) in changes.items():
                if v is None:
                    current.pop(k, None)
                else:
                    current[k] = (v, s)
            fresh = list(encode((k, v, s) for k, (v, s) in sorted(current.items())))
            assert [b.payload for b in new] == [b.payload for b in fresh]
            assert len(changes) > 10 or not new or reused >= len(new) - 2 * len(changes) - 2
            blocks = new


def test_assembled_tables_read_back(tmp_path: Path, sst_dump: SstDump) -> None:
    records = [(f"tables/t{i // 500:04d}/part-{i:08d}.parquet".encode(), b"v" * (i % 300), False)
               for i in range(20_000)]  # fmt: skip
    blocks = list(encode(records))
    table = assemble(blocks, {"type": "ranges"})
    reader = SSTableReader(table.data, name="synthetic")
    assert list(reader) == [(k, v) for k, v, _ in records]
    assert reader.two_level_index and reader.user_properties()["count"] == "20000"
    assert (table.min_key, table.max_key, table.count) == (records[0][0], records[-1][0], 20_000)
    path = tmp_path / table.id
    path.write_bytes(table.data)
    assert sst_dump(path) == [(k, v) for k, v, _ in records]  # RocksDB's own reader agrees
    again = read_blocks(table.data, "synthetic", split_key=False)
    assert [b.payload for b in again] == [b.payload for b in blocks]
    assert assemble(again, {"type": "ranges"}).id == table.id


def test_range_splits_are_lakefs_fnv1a() -> None:
    split = RangeSplit(50, 1 << 20)
    keys = [f"tables/t0001/part-{i}".encode() for i in range(2000)]
    assert split.flags(keys) == [_fnv1a(k) % 50 == 0 for k in keys] == [split.splits_after(k) for k in keys]


@pytest.mark.parametrize("cache_bytes", [1 << 30, 0], ids=["cached", "read-back"])
def test_commits_keep_untouched_ranges_and_split_as_lakefs(tmp_path: Path, cache_bytes: int) -> None:
    store = NamespaceStore("local://r", StorageOptions(local_root=str(tmp_path)))
    tables, split = Tables(store, RangeSplit(40, 1 << 20), cache_bytes), RangeSplit(40, 1 << 20)
    rng, tree, model = random.Random(2), Tree(), {}
    for _commit in range(40):
        changes: dict[bytes, bytes | None] = {}
        for _ in range(rng.randint(1, 60)):
            key = rng.choice(sorted(model)) if model and rng.random() < 0.3 else _key(rng)
            changes[key] = None if key in model else rng.randbytes(20)
        keys = sorted(changes)
        before = {r.id: r for r in tree.ranges}
        tree = commit_tree(
            tables, tree, [(k, changes[k], f) for k, f in zip(keys, split.flags(keys), strict=True)]
        )
        model.update(changes)
        model = {k: v for k, v in model.items() if v is not None}
        with SSTableReader(str(tmp_path / "r/_lakefs" / tree.metarange_id)) as metarange:
            listed = list(iter_metarange(metarange))
        assert [r[1] for r in listed] == [r.id for r in tree.ranges]
        records: list[tuple[bytes, bytes]] = []
        for r in tree.ranges:
            with SSTableReader(str(tmp_path / "r/_lakefs" / r.id)) as table:
                rows = list(table)
            assert (rows[0][0], rows[-1][0], len(rows)) == (r.min_key, r.max_key, r.count)
            assert not any(split.splits_after(k) for k, _ in rows[:-1]), "a split key always ends its range"
            if r.id in before:
                assert not any(r.min_key <= k <= r.max_key for k in keys), "a kept range had no change"
            records += rows
        assert records == sorted(model.items())
    assert len(tree.ranges) > 5


def test_entries_are_lakefs_entries(tmp_path: Path) -> None:
    store = NamespaceStore("local://r", StorageOptions(local_root=str(tmp_path)))
    objects = Objects(store, seed=3, slice_objects=4, object_size=16, physical=True)
    first = objects.create(10, 1_700_000_000)
    values = objects.entries(first, 10, 1_700_000_000, graveler=True)
    bare = objects.entries(first, 10, 1_700_000_000, graveler=False)
    for seq, value, raw in zip(range(first, first + 10), values, bare, strict=True):
        address = objects.address(seq, 1_700_000_000)
        entry = Entry(address, AddressType.RELATIVE, 16, objects.etag(address), 1_700_000_000 * 10**9,
                      "application/octet-stream")  # fmt: skip
        assert value == encode_value(entry) and raw == encode_entry(entry)
        assert (tmp_path / "r" / address).read_bytes() == objects.content(address)
    assert len(objects.slices) == 3
    maker = XidMaker(b"\x01\x02\x03")
    rng = random.Random(1)
    for _ in range(1000):
        seconds, tail = rng.randrange(2**32), rng.randrange(2**40)
        assert maker(seconds, tail) == xid(seconds, b"\x01\x02\x03", tail)
