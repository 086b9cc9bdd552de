"""One event table compaction in its own process, which a test kills with SIGKILL at a chosen step.

    python -m tests.support.compaction_driver TABLE REPOSITORY WATERMARK LISTED_JSON PAUSE FLAG

Runs :func:`~lakefs_gc.spark.ingest.events.compaction.compact_event_table` (the real code path, on
its own Spark session and JVM) with one watermark; ``LISTED_JSON`` holds the addresses the
repository's snapshot lists. ``PAUSE`` says where the process stops, so that the kill lands there
every time (a poll of the table alone would race the few milliseconds between the steps):

* ``manifest``: the new generation's files are written, its manifest is not (step 2 done, 3 not);
* ``retire``: the superseded generations' files and the first folded batch part are deleted, the
  other parts and every batch record are not (step 1 half-way).

At the pause it creates ``FLAG`` and sleeps; the test then kills the process group. The pause is
injected here, by wrapping the module's own functions: the production code carries no test hook.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lakefs_gc.spark.ingest.events import compaction
from lakefs_gc.spark.ingest.events.compaction import Watermark, compact_event_table
from lakefs_gc.spark.ingest.events.generations import GENERATIONS
from lakefs_gc.spark.ingest.events.table import EventTable
from lakefs_gc.spark.runtime.session import build_session
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_location


def _pause(flag: Path) -> None:
    flag.write_text("paused")
    while True:  # until killed
        time.sleep(60)


def _install_pause(step: str, flag: Path) -> None:
    if step == "manifest":

        def write_whole(*args: Any, **kwargs: Any) -> None:
            _pause(flag)

        compaction.write_whole = write_whole  # type: ignore[assignment]
    elif step == "retire":
        delete = compaction._delete

        def first_delete_then_pause(fs: Any, path: str) -> None:
            delete(fs, path)
            if f"/{GENERATIONS}/" not in path:  # a batch part
                _pause(flag)

        compaction._delete = first_delete_then_pause  # type: ignore[assignment]
    else:
        raise SystemExit(f"unknown pause step {step!r}")


def main(argv: list[str]) -> None:
    table_dir, repository, watermark, listed_json, step, flag = argv
    addresses = json.loads(Path(listed_json).read_text())
    spark = build_session(
        "compaction-driver", environ=os.environ, master="local[1]", conf={"spark.sql.shuffle.partitions": "2"}
    )

    def listed(spark: Any, parallelism: int) -> Any:
        return spark.createDataFrame(
            [(repository, a) for a in addresses], "repository string, address string"
        )

    table = EventTable(parse_location(table_dir), StorageOptions())
    _install_pause(step, Path(flag))
    compact_event_table(
        spark, table, [Watermark(repository, datetime.fromisoformat(watermark), listed)],
        lambda: datetime.now(timezone.utc), parallelism=2,
    )  # fmt: skip
    raise SystemExit(f"compaction ended without reaching the {step} pause")


if __name__ == "__main__":
    main(sys.argv[1:])
