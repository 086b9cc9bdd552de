"""A data file's candidate part: routed rows in, CANDIDATE_SCHEMA's plain columns out."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lakefs_gc.inventory.delivery import INVENTORY_SCHEMA
from lakefs_gc.inventory.mapping import CANDIDATE_SCHEMA, ROUTED_SCHEMA, NamespaceRoute, route_rows
from lakefs_gc.spark.ingest.inventory.parts import CandidatePartWriter

SNAP = datetime(2026, 11, 20, tzinfo=timezone.utc)
T = datetime(2026, 11, 1, tzinfo=timezone.utc)
ROUTES = [NamespaceRoute("alpha", "bkt", "a/"), NamespaceRoute("beta", "bkt", "b/")]


def inventory(keys: list[str]) -> pa.Table:
    n = len(keys)
    return pa.table(
        {
            "bucket": ["bkt"] * n,
            "key": keys,
            "size": list(range(n)),
            "last_modified": [T] * n,
            "etag": [f"{i:032x}" for i in range(n)],
            "encryption": ["SSE-S3"] * n,
            "is_latest": [True] * n,
            "is_delete_marker": [False] * n,
        },
        schema=INVENTORY_SCHEMA,
    )


def test_routed_dictionaries_are_read_back_as_plain_columns_across_row_groups(
    tmp_path: Path, monkeypatch
) -> None:
    """Routed batches of two repositories, in row groups smaller than a batch, so each row group
    holds both repositories' dictionaries: the part has every row, counted per repository, and a
    reader sees CANDIDATE_SCHEMA (strings and timestamps), never the dictionaries it was given."""
    monkeypatch.setattr(CandidatePartWriter, "ROW_GROUP_ROWS", 5)
    keys = [f"{ns}/data/s/{i:03d}" for i in range(12) for ns in ("a", "b")] + ["a/_lakefs/x", "c/data/s/1"]
    routed = [
        route_rows(inventory(keys[i : i + 7]), ROUTES, delivery_id="manifest-1", snapshot_time=SNAP)
        for i in range(0, len(keys), 7)
    ]
    assert all(r.schema == ROUTED_SCHEMA for r in routed)
    path = tmp_path / "part.parquet"
    writer = CandidatePartWriter(pafs.LocalFileSystem(), str(path))
    for batch in routed:
        writer.write(batch)
    assert writer.close() == str(path)

    assert writer.counts == {"alpha": 12, "beta": 12}
    part = pq.ParquetFile(path)
    assert part.metadata.num_row_groups > 1
    back = part.read()
    assert back.schema == CANDIDATE_SCHEMA
    expected = pa.concat_tables(routed).cast(CANDIDATE_SCHEMA)
    assert sorted(back.to_pylist(), key=str) == sorted(expected.to_pylist(), key=str)
    assert set(back.column("delivery_id").to_pylist()) == {"manifest-1"}
    assert set(back.column("snapshot_time").to_pylist()) == {SNAP}
    for group in range(part.metadata.num_row_groups):
        column = part.metadata.row_group(group).column(CANDIDATE_SCHEMA.get_field_index("repository"))
        assert "RLE_DICTIONARY" in column.encodings


def test_plain_candidate_columns_are_accepted_too(tmp_path: Path) -> None:
    """A caller with CANDIDATE_SCHEMA rows (plain strings) gets the same part and counts."""
    routed = route_rows(inventory(["a/data/s/1", "b/data/s/2"]), ROUTES, delivery_id="d", snapshot_time=SNAP)
    path = tmp_path / "part.parquet"
    writer = CandidatePartWriter(pafs.LocalFileSystem(), str(path))
    writer.write(routed.cast(CANDIDATE_SCHEMA))
    writer.close()
    assert writer.counts == {"alpha": 1, "beta": 1}
    assert pq.read_table(path).to_pylist() == routed.cast(CANDIDATE_SCHEMA).to_pylist()
