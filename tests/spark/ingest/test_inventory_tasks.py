"""How the inventory source spreads a micro-batch's data files over tasks (``group_files``)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakefs_gc.inventory.delivery import DataFile, Delivery
from lakefs_gc.inventory.delivery_log import LogEntry
from lakefs_gc.spark.ingest.inventory.source import (
    TASK_BYTES,
    FileGroup,
    FilePartition,
    entry_partitions,
    group_files,
)

MiB = 1024 * 1024


def entry(seq: int, sizes: list[int | None]) -> LogEntry:
    files = tuple(DataFile(f"d{seq}/f{i}.parquet", "parquet", size) for i, size in enumerate(sizes))
    delivery = Delivery(
        f"d{seq}/manifest.json", "s3", f"d{seq}/manifest.json", datetime(2026, 12, 1, tzinfo=timezone.utc),
        "bkt", ("bucket", "key"), files,
    )  # fmt: skip
    return LogEntry(seq, delivery.id, delivery)


def size(f: FilePartition) -> int | None:
    assert f.entry.delivery is not None and f.file_index is not None
    return f.entry.delivery.files[f.file_index].size


def files_of(*entries: LogEntry) -> list[FilePartition]:
    return [part for e in entries for part in entry_partitions(e)]


def named(groups: list[FileGroup]) -> list[list[str]]:
    return [[f"{f.entry.seq}:{f.file_index}" for f in g.files] for g in groups]


def test_a_delivery_of_equal_files_is_one_group_per_slot() -> None:
    groups = group_files(files_of(entry(0, [50 * MiB] * 10)), tasks=2)
    assert sorted(map(len, named(groups))) == [5, 5]


def test_large_deliveries_get_more_groups_than_slots_none_above_the_task_bytes() -> None:
    groups = group_files(files_of(entry(0, [64 * MiB] * 40)), tasks=2)
    assert len(groups) == 40 * 64 * MiB // TASK_BYTES  # 10 groups of 4 files
    assert all(sum(size(f) or 0 for f in g.files) <= TASK_BYTES for g in groups)


def test_never_more_groups_than_files_and_none_without_tasks() -> None:
    files = files_of(entry(0, [MiB] * 3))
    assert len(group_files(files, tasks=8)) == 3
    assert [g.files for g in group_files(files, tasks=None)] == [(f,) for f in files]  # as they come


def test_sizes_balance_the_groups_and_unknown_sizes_count() -> None:
    groups = group_files(files_of(entry(0, [100 * MiB, 60 * MiB, 40 * MiB, None, None])), tasks=2)
    loads = sorted(sum(size(f) or TASK_BYTES // 8 for f in g.files) for g in groups)
    assert loads == [132 * MiB, 132 * MiB]  # 100 + 32 | 60 + 40 + 32 (None: an eighth of TASK_BYTES)


def test_rejected_and_empty_deliveries_keep_their_status_rows() -> None:
    rejected = LogEntry(1, "d1/manifest.json", None, "bad checksum")
    groups = group_files(files_of(entry(0, [MiB] * 4), rejected, entry(2, [])), tasks=2)
    assert sorted(x for g in named(groups) for x in g) == ["0:0", "0:1", "0:2", "0:3", "1:None", "2:None"]


@given(
    st.lists(st.lists(st.one_of(st.none(), st.integers(0, 600 * MiB)), max_size=12), min_size=1, max_size=4),
    st.integers(1, 16),
)
def test_every_file_is_in_exactly_one_group_in_order(sizes: list[list[int | None]], tasks: int) -> None:
    files = files_of(*(entry(seq, s) for seq, s in enumerate(sizes)))
    groups = group_files(files, tasks)
    flat = [f for g in groups for f in g.files]
    assert sorted(flat, key=files.index) == files and len(flat) == len(files)
    assert len(groups) <= len(files)
    for g in groups:  # within a group, the files in their delivery order
        assert list(g.files) == sorted(g.files, key=files.index)


@pytest.mark.parametrize("tasks", [1, 3])
def test_groups_are_at_least_the_slots_when_there_are_files_enough(tasks: int) -> None:
    assert len(group_files(files_of(entry(0, [MiB] * 7)), tasks)) == tasks
