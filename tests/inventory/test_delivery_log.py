"""The inventory source's delivery log: entries written whole, read back in order, and an entry's
write a kill interrupted (a hidden temporary file) neither read as an entry nor taken for a foreign
file that stops the stream."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from lakefs_gc.inventory.delivery import DataFile, Delivery, DiscoveryResult, InventoryError
from lakefs_gc.inventory.delivery_log import DeliveryLog


def _delivery(day: int) -> Delivery:
    manifest = f"inv/bucket/config/2026-11-{day:02d}T01-00Z/manifest.json"
    return Delivery(
        id=manifest,
        flavour="s3",
        manifest_path=manifest,
        snapshot_time=datetime(2026, 11, day, 1, tzinfo=UTC),
        source="bucket",
        columns=("Bucket", "Key", "Size", "LastModifiedDate"),
        files=(DataFile(f"inv/bucket/data/{day}.parquet", "parquet", 100, "0" * 32),),
    )


def test_entries_are_admitted_once_in_snapshot_order(tmp_path: Path) -> None:
    log = DeliveryLog(pafs.LocalFileSystem(), str(tmp_path / "log"))
    added = log.admit(DiscoveryResult(complete=[_delivery(3), _delivery(2)]))
    assert [e.id for e in added] == [_delivery(2).id, _delivery(3).id]
    assert log.admit(DiscoveryResult(complete=[_delivery(2), _delivery(3), _delivery(4)]))[0].seq == 2
    assert [e.delivery for e in log.entries()] == [_delivery(2), _delivery(3), _delivery(4)]
    assert sorted(p.name for p in (tmp_path / "log").iterdir()) == [
        "00000000.json", "00000001.json", "00000002.json"
    ]  # fmt: skip


def test_an_interrupted_entry_write_is_not_an_entry(tmp_path: Path) -> None:
    """A kill between ``write_whole``'s temporary file and its rename leaves ``.<entry>.tmp``: the
    log reads as before, and the entry is written again by the next admission."""
    log = DeliveryLog(pafs.LocalFileSystem(), str(tmp_path / "log"))
    log.admit(DiscoveryResult(complete=[_delivery(2)]))
    (tmp_path / "log" / ".00000001.json.tmp").write_bytes(b'{"seq": 1, "id": "torn')
    assert [e.id for e in log.entries()] == [_delivery(2).id]
    assert [e.seq for e in log.admit(DiscoveryResult(complete=[_delivery(3)]))] == [1]
    assert [e.delivery for e in log.entries()] == [_delivery(2), _delivery(3)]


def test_a_foreign_file_or_a_gap_is_an_error(tmp_path: Path) -> None:
    log = DeliveryLog(pafs.LocalFileSystem(), str(tmp_path / "log"))
    log.admit(DiscoveryResult(complete=[_delivery(2)]))
    (tmp_path / "log" / "00000002.json").write_bytes(b"{}")
    with pytest.raises(InventoryError, match="gaps or foreign files"):
        log.entries()
