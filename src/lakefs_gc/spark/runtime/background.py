"""Spark jobs run from a driver thread of their own, cancelled as a whole when their owner closes.

A mark reads some of its inputs while lakeFS prepares the dump (the candidates, the range cache's
read-ahead). Each such reading runs on a :class:`BackgroundJobs` thread: its Spark jobs carry a
job group of their own, so closing cancels exactly them, and the owner asks :meth:`open` before
it keeps or records anything (a closed owner's mark has ended: what it kept would leak).

The owner holds its :class:`BackgroundJobs` before the thread runs (:meth:`BackgroundJobs.start`
is a step of its own): the thread's first lines may ask the owner's jobs whether it is still
open. A thread started by the constructor could run them before the owner had assigned what the
constructor returned; under load in the test run it did, and the range cache's read-ahead died
of an ``AttributeError`` (the mark then read everything itself).

Each reading's jobs run in a fair-scheduler pool of their own, ``lakefs-gc-<name>``
(``spark/runtime/fairscheduler.xml``; the session sets ``spark.scheduler.mode=FAIR``), every
other job in the default pool. Under Spark's default FIFO order a job's tasks start only once
every task of the jobs submitted before it has started: the range cache's read-ahead, one task
per job in a cycle, waited behind each stage of the candidates' reading (dozens of tasks), and
the mark then waited for it after lakeFS's dump. In pools, each reading takes the next free core
in turn (bench/README.md, "5M objects: the readings during the dump in pools of their own
(2026-12-02)").
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: how long closing waits for a cancelled reading's thread to end
CLOSE_WAIT_SECONDS = 60.0
_GROUPS = itertools.count(1)


class BackgroundJobs:
    """``run`` on a thread named ``lakefs-gc <name>``, from :meth:`start` on; its Spark jobs in one group."""

    def __init__(self, spark: SparkSession, run: Callable[[], None], *, name: str) -> None:
        from pyspark import InheritableThread

        self.spark, self.name, self._run = spark, name, run
        #: the fair scheduler's pool its jobs run in (module docstring)
        self.pool = f"lakefs-gc-{name.replace(' ', '-')}"
        self.group = f"{self.pool}-{next(_GROUPS)}"
        #: guards ``closed`` and whatever the owner keeps on its thread
        self.lock = threading.Lock()
        self.closed = False
        self._thread = InheritableThread(target=self._body, name=f"lakefs-gc {name}", daemon=True)

    def start(self) -> None:
        """Start the thread; the owner calls it once it holds this object (module docstring)."""
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def open(self) -> bool:
        """Whether the owner still waits for the reading (not closed)."""
        with self.lock:
            return not self.closed

    def close(self) -> None:
        """Cancel the jobs still running, and wait for the thread (at most ``CLOSE_WAIT_SECONDS``)."""
        with self.lock:
            self.closed = True
            running = self._thread.is_alive()
        if running:
            self.spark.sparkContext.cancelJobGroup(self.group)
            self._thread.join(CLOSE_WAIT_SECONDS)

    def _body(self) -> None:
        self.spark.sparkContext.setJobGroup(self.group, f"lakefs-gc: {self.name}", True)
        self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", self.pool)
        self._run()
