"""The sweep's progress line: objects done of the marked total, estimated bytes, rate and ETA."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark import Accumulator

Progress = Callable[[str], None]
#: Seconds between two progress lines.
PROGRESS_INTERVAL_S = 10.0


class ProgressMeter:
    """Prints ``done/total objects (~bytes), rate, ETA`` every :data:`PROGRESS_INTERVAL_S` seconds
    from the driver, while the sweep job runs.

    ``done`` is the tasks' accumulator: Spark merges a task's additions when the task ends, so
    the count moves task by task. Bytes are estimated from the mark's average object size
    (lakeFS's ``deleted/`` has no sizes).
    """

    def __init__(
        self,
        say: Progress,
        repository: str,
        total: int | None,
        total_bytes: int | None,
        done: Accumulator[int],
    ) -> None:
        self.say, self.repository, self.total, self.total_bytes, self.done = (
            say, repository, total, total_bytes, done,
        )  # fmt: skip
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sweep-progress", daemon=True)

    def __enter__(self) -> ProgressMeter:
        self.started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.finished = time.monotonic()

    def elapsed(self) -> float:
        return getattr(self, "finished", time.monotonic()) - self.started

    def _run(self) -> None:
        while not self._stop.wait(PROGRESS_INTERVAL_S):
            self.say(self.line(int(self.done.value), self.elapsed()))

    def line(self, done: int, elapsed: float) -> str:
        rate = done / elapsed if elapsed > 0 else 0.0
        text = f"{self.repository}: sweep {done}/{self.total if self.total is not None else '?'} objects"
        if self.total and self.total_bytes is not None:
            text += f" (~{human_size(self.total_bytes * done / self.total)})"
        text += f", {rate:.0f} objects/s"
        if self.total is not None and rate > 0:
            text += f", ETA {max(0.0, (self.total - done) / rate):.0f}s"
        return text


def human_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
