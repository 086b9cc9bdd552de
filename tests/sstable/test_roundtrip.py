"""Tables from our writer read back through our reader and through RocksDB's sst_dump."""

from __future__ import annotations

import io
import random
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakefs_gc.sstable import SSTableReader, TableWriter
from tests.support.rocksdb import SstDump

PREFIXES = [
    b"",
    b"a",
    b"data/",
    b"data/gqv3epl4fd2o8m3men70/",
    b"tables/events/date=2026-01-01/",
    b"\x00\xff",
]

keys_strategy = st.lists(
    st.tuples(st.sampled_from(PREFIXES), st.binary(min_size=0, max_size=40)).map(lambda t: t[0] + t[1]),
    unique=True,
    max_size=400,
).map(sorted)


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[tuple[bytes, bytes]], dict[str, int | bool]]:
    keys = draw(keys_strategy)
    values = draw(
        st.lists(
            st.one_of(st.binary(max_size=64), st.binary(min_size=1000, max_size=9000)),
            min_size=len(keys),
            max_size=len(keys),
        )
    )
    options: dict[str, int | bool] = {
        "block_size": draw(st.sampled_from([64, 512, 4096])),
        "index_block_size": draw(st.sampled_from([32, 256, 4096])),
        "restart_interval": draw(st.sampled_from([1, 2, 16])),
        "compress": draw(st.booleans()),
    }
    return list(zip(keys, values, strict=True)), options


def write_table(entries: list[tuple[bytes, bytes]], **options: int | bool) -> bytes:
    out = io.BytesIO()
    writer = TableWriter(out, **options)  # type: ignore[arg-type]
    for key, value in entries:
        writer.add(key, value)
    writer.finish({"type": b"test"})
    return out.getvalue()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
def test_writer_reader_round_trip(table: tuple[list[tuple[bytes, bytes]], dict[str, int | bool]]) -> None:
    entries, options = table
    data = write_table(entries, **options)
    with SSTableReader(data) as reader:
        assert list(reader) == entries
        assert reader.user_properties() == {"type": "test"}


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(tables())
def test_sst_dump_agrees_with_our_writer(
    sst_dump: SstDump, tmp_path: Path, table: tuple[list[tuple[bytes, bytes]], dict[str, int | bool]]
) -> None:
    entries, options = table
    path = tmp_path / "t.sst"
    path.write_bytes(write_table(entries, **options))
    assert sst_dump(path) == entries


def big_entries(seed: int, approx_bytes: int) -> list[tuple[bytes, bytes]]:
    """Shared-prefix keys, mixed compressible/incompressible values, one multi-MiB value."""
    rng = random.Random(seed)
    entries = []
    size = 0
    i = 0
    while size < approx_bytes:
        key = f"tables/t{i // 5000:03d}/date=2026-{i % 12 + 1:02d}/part-{i:08d}.parquet".encode()
        if i == 1234:
            value = rng.randbytes(3 << 20)
        elif i % 3:
            value = (b"data/gqv3epl4fd2o8m3men70/" + str(i).encode()) * rng.randint(1, 4)
        else:
            value = rng.randbytes(rng.randint(0, 300))
        entries.append((key, value))
        size += len(key) + len(value)
        i += 1
    entries.sort()
    return entries


def test_multi_mib_table_round_trip_and_sst_dump(sst_dump: SstDump, tmp_path: Path) -> None:
    entries = big_entries(7, 8 << 20)
    data = write_table(entries)
    path = tmp_path / "big.sst"
    path.write_bytes(data)
    with SSTableReader(path) as reader:
        assert reader.two_level_index  # 8 MiB of 4 KiB blocks outgrows one index block
        assert list(reader) == entries
    assert sst_dump(path) == entries


def test_empty_table(sst_dump: SstDump, tmp_path: Path) -> None:
    path = tmp_path / "empty.sst"
    path.write_bytes(write_table([]))
    with SSTableReader(path) as reader:
        assert list(reader) == []
        assert not reader.two_level_index
    assert sst_dump(path) == []


def test_keys_must_increase() -> None:
    import pytest

    writer = TableWriter(io.BytesIO())
    writer.add(b"b", b"1")
    with pytest.raises(ValueError, match="strictly increasing"):
        writer.add(b"a", b"2")
    with pytest.raises(ValueError, match="strictly increasing"):
        writer.add(b"b", b"2")
