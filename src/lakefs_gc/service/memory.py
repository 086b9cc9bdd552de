"""The driver's memory over months: glibc's arenas kept small, and, for finding what grows, the
Python heap by allocation site (``GET /debug/memory``).

**Native heap.** A 32-minute soak at 50 writes/s showed the driver's resident memory growing
(236 to 276 MiB) while the traced Python heap stayed near 60 MiB and changed by about 1 MiB: the
growth was in glibc malloc's per-thread arenas (64 MiB-aligned mappings, 180 MiB of them, from
``/proc/<pid>/smaps``). So ``serve`` limits the arenas before any thread starts
(:func:`~lakefs_gc.spark.runtime.memory.limit_malloc_arenas`) and gives freed pages back after
every cycle tick (:func:`~lakefs_gc.spark.runtime.memory.release_free_memory`), as every mark
does after its retention cross-check. Both live in :mod:`lakefs_gc.spark.runtime.memory`, which
says why, beside the driver's choice of Arrow allocator.

A service that runs for months must not grow, and when its resident memory does, the metrics
(``lakefs_gc_driver_rss_bytes``) say that it grows, not what. Python's ``tracemalloc`` says what:
the allocation sites holding the most memory, and, compared with the previous request, which
grew. Tracing costs CPU and memory, so it is off unless the service is started with
``--trace-memory FRAMES`` (1 frame is enough for a site list). Not Python's own
``PYTHONTRACEMALLOC``: the environment reaches Spark's Python workers too, which then start too
slowly to connect back to the JVM, and a query dies.
"""

from __future__ import annotations

import threading
import tracemalloc

#: allocation sites listed per section
TOP = 25
#: where tracemalloc's own bookkeeping and the import machinery allocate: not the service's
_IGNORED = (tracemalloc.__file__, "<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")


def start_tracing(frames: int) -> None:
    """Trace this process's Python allocations, ``frames`` frames per site (the driver only)."""
    tracemalloc.start(max(1, frames))


class HeapSites:
    """Snapshots of the traced heap; each report is compared with the one before it."""

    def __init__(self, top: int = TOP) -> None:
        self.top = top
        self._last: tracemalloc.Snapshot | None = None
        self._lock = threading.Lock()  # the status server answers on several threads

    def report(self) -> tuple[int, str]:
        """(HTTP status, plain-text report)."""
        if not tracemalloc.is_tracing():
            return 404, (
                "Python heap tracing is off: start lakefs-gc serve with --trace-memory 1 to list the "
                "driver's allocation sites here.\n"
            )
        with self._lock:
            snapshot = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(False, pattern) for pattern in _IGNORED]
            )
            current, peak = tracemalloc.get_traced_memory()
            lines = [f"traced Python heap: {current / 2**20:.1f} MiB now, {peak / 2**20:.1f} MiB at peak", ""]
            lines += [f"largest {self.top} allocation sites:"]
            lines += [f"  {stat}" for stat in snapshot.statistics("lineno")[: self.top]]
            if self._last is not None:
                lines += ["", f"largest {self.top} changes since the previous report:"]
                lines += [f"  {diff}" for diff in snapshot.compare_to(self._last, "lineno")[: self.top]]
            self._last = snapshot
        return 200, "\n".join(lines) + "\n"
