"""Spark checkpoints: what Spark itself does not clean up after a kill, and the id a checkpoint
gives the records its query writes.

Both streaming sinks (:mod:`lakefs_gc.spark.ingest.inventory.table`,
:mod:`lakefs_gc.spark.ingest.events.table`) name their per-batch records with the checkpoint's
:func:`stream_id`, so that a new checkpoint (a reset, another query) never takes an old one's
records for its own batches, and a replayed batch of the same checkpoint finds its record.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from lakefs_gc.storage.writes import replace_local_file

#: the file inside a checkpoint holding its stream id (named for the inventory ingest, which had it first)
STREAM_ID = "lakefs-gc-ingest-id"


def clear_interrupted_writes(checkpoint: Path) -> Path:
    """Delete what a killed process left of Spark's atomic checkpoint writes; returns ``checkpoint``.

    Spark writes each offset and commit log entry to a hidden ``.<batch>.<uuid>.tmp`` and renames
    it. Killed in between, the temp file stays; in a checkpoint without a logged batch yet, Spark
    then refuses to start (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``), and the query could
    never run again. The rename never happened: the file is not part of the checkpoint.
    """
    for log in ("offsets", "commits"):
        directory = checkpoint / log
        if directory.is_dir():
            for path in directory.iterdir():
                if path.name.startswith(".") and path.name.endswith((".tmp", ".tmp.crc")):
                    path.unlink(missing_ok=True)
    return checkpoint


def stream_id(checkpoint: Path) -> str:
    """This checkpoint's id, created on first use (written whole: a kill never leaves half an id)."""
    path = checkpoint / STREAM_ID
    if not path.exists():
        replace_local_file(path, (uuid.uuid4().hex[:16] + "\n").encode())
    return path.read_text().strip()
