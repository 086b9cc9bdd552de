"""Spark checkpoints after a kill: what Spark itself does not clean up."""

from __future__ import annotations

from pathlib import Path


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
