"""A progress line for Spark work that would otherwise be silent for minutes.

A phase of a mark can run for a long time without a line of its own: a first cycle's range
cache reads every retained metarange and range (22 minutes at the bottom-line repository,
bench/README.md), and the classification of 26M candidates takes minutes. An operator
watching the log cannot tell that from a hang. :class:`SparkHeartbeat` wraps a job's progress
function: whenever ``quiet_s`` pass without a line, it says which of Spark's stages are running
and how many of their tasks are done (from the driver's status tracker), so that the log never
goes silent for longer while Spark works.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: seconds without a progress line after which the heartbeat says what Spark is doing
QUIET_S = 60.0
#: stages named in one line at most (the others are counted)
STAGES_SHOWN = 3
#: the heartbeat's thread, which says its lines (a caller that sorts lines by thread tells them apart)
THREAD_NAME = "lakefs-gc heartbeat"


class SparkHeartbeat:
    """``with SparkHeartbeat(spark, say, label) as say:``: the ``say`` to pass on, which the
    heartbeat watches; its own lines start with ``label``."""

    def __init__(
        self,
        spark: SparkSession,
        say: Callable[[str], None],
        label: str,
        *,
        quiet_s: float = QUIET_S,
    ) -> None:
        self._spark, self._say, self._label, self._quiet_s = spark, say, label, quiet_s
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)

    def say(self, message: str) -> None:
        self._last = time.monotonic()
        self._say(message)

    def __enter__(self) -> Callable[[str], None]:
        self._last = time.monotonic()
        self._thread.start()
        return self.say

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(min(5.0, self._quiet_s / 4)):
            quiet = time.monotonic() - self._last
            if quiet < self._quiet_s:
                continue
            try:
                line = self.line(quiet)
            except Exception as e:  # a status the tracker cannot give is not the job's failure
                line = f"{self._label}: still working, {quiet:.0f} s since the last line ({e})"
            if not self._stop.is_set():
                self.say(line)

    def line(self, quiet: float) -> str:
        """What Spark is running now: each active stage's name and its tasks done."""
        tracker = self._spark.sparkContext.statusTracker()
        stages = [s for s in map(tracker.getStageInfo, sorted(tracker.getActiveStageIds())) if s is not None]
        text = f"{self._label}: still working, {quiet:.0f} s since the last line"
        if not stages:
            return text + " (no Spark stage running: the driver is working)"
        shown = ", ".join(_stage(s) for s in stages[:STAGES_SHOWN])
        more = f" and {len(stages) - STAGES_SHOWN} more" if len(stages) > STAGES_SHOWN else ""
        return f"{text}; Spark stage{'s' if len(stages) > 1 else ''} {shown}{more}"


def _stage(info: Any) -> str:
    """``12 (collect at levels.py:76): 30/400 tasks done, 2 running``."""
    name = str(info.name)
    where, _, place = name.partition(" at ")
    short = f"{where} at {place.rsplit('/', 1)[-1]}" if place else name
    done, total, running = info.numCompletedTasks, info.numTasks, info.numActiveTasks
    return f"{info.stageId} ({short}): {done}/{total} tasks done, {running} running"
