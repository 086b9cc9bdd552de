"""Spark checkpoints: what Spark itself does not clean up after a kill, and the id a checkpoint
gives the records its query writes.

Both streaming sinks (:mod:`lakefs_gc.spark.ingest.inventory.table`,
:mod:`lakefs_gc.spark.ingest.events.table`) name their per-batch records with the checkpoint's
:func:`stream_id`, so that a new checkpoint (a reset, another query) never takes an old one's
records for its own batches, and a replayed batch of the same checkpoint finds its record.
"""

from __future__ import annotations

import os
import uuid

from lakefs_gc.storage.checkpoints import CheckpointRoot

#: the file inside a checkpoint holding its stream id (named for the inventory ingest, which had it first)
STREAM_ID = "lakefs-gc-ingest-id"


def clear_interrupted_writes(checkpoint: CheckpointRoot | str | os.PathLike[str]) -> CheckpointRoot:
    """Delete what a killed process left of Spark's atomic checkpoint writes; returns ``checkpoint``
    (a path or Hadoop URI, :class:`~lakefs_gc.storage.checkpoints.CheckpointRoot`).

    Spark writes each offset and commit log entry to a hidden ``.<batch>.<uuid>.tmp`` and renames
    it. Killed in between, the temp file stays; in a checkpoint without a logged batch yet, Spark
    then refuses to start (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``), and the query could
    never run again. The rename never happened: the file is not part of the checkpoint.
    """
    root = CheckpointRoot.of(checkpoint)
    for log in ("offsets", "commits"):
        for name in root.files.names(log):
            if name.startswith(".") and name.endswith((".tmp", ".tmp.crc")):
                root.files.delete(f"{log}/{name}")
    return root


def stream_id(checkpoint: CheckpointRoot) -> str:
    """This checkpoint's id, created on first use (written whole: a kill never leaves half an id)."""
    if not checkpoint.files.exists(STREAM_ID):
        checkpoint.files.write(STREAM_ID, (uuid.uuid4().hex[:16] + "\n").encode())
    return (checkpoint.files.read(STREAM_ID) or b"").decode().strip()
