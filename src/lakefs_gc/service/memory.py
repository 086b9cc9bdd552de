"""The driver's memory over months: glibc's arenas kept small, and, for finding what grows, the
Python heap by allocation site (``GET /debug/memory``).

**Native heap.** A 32-minute soak at 50 writes/s showed the driver's resident memory growing
(236 to 276 MiB) while the traced Python heap stayed near 60 MiB and changed by about 1 MiB: the
growth was in glibc malloc's per-thread arenas (64 MiB-aligned mappings, 180 MiB of them, from
``/proc/<pid>/smaps``). The driver allocates from many threads (py4j runs each Spark callback,
every micro-batch of the GC cycles among them, on a thread of its own; the queue sources and the
status server have theirs), glibc gives threads up to 8 arenas per core, and memory freed in an
arena is returned to the system only from the arena's top. So ``serve`` limits the arenas to
:data:`MALLOC_ARENAS` before any thread starts (:func:`limit_malloc_arenas`) and gives freed
pages back after every cycle tick (:func:`release_free_memory`, ``malloc_trim``). Both are glibc
calls made through ``ctypes``, and do nothing where there is no glibc (musl, macOS).

A service that runs for months must not grow, and when its resident memory does, the metrics
(``lakefs_gc_driver_rss_bytes``) say that it grows, not what. Python's ``tracemalloc`` says what:
the allocation sites holding the most memory, and, compared with the previous request, which
grew. Tracing costs CPU and memory, so it is off unless the service is started with
``--trace-memory FRAMES`` (1 frame is enough for a site list). Not Python's own
``PYTHONTRACEMALLOC``: the environment reaches Spark's Python workers too, which then start too
slowly to connect back to the JVM, and a query dies.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading
import tracemalloc
from functools import cache
from typing import Any

#: allocation sites listed per section
TOP = 25
#: glibc malloc arenas the driver may use (glibc's default: 8 per core)
MALLOC_ARENAS = 2
#: ``mallopt``'s parameter number for the arena limit (glibc's malloc.h)
_M_ARENA_MAX = -8
#: where tracemalloc's own bookkeeping and the import machinery allocate: not the service's
_IGNORED = (tracemalloc.__file__, "<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")


@cache
def _glibc() -> Any | None:
    """The C library if it is glibc (it has ``malloc_trim``), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """At most ``arenas`` glibc malloc arenas from now on (call before threads start); False
    without glibc."""
    libc = _glibc()
    return bool(libc is not None and libc.mallopt(_M_ARENA_MAX, max(1, arenas)) == 1)


def release_free_memory() -> bool:
    """Give the free pages of every glibc arena back to the system; True if any was released."""
    libc = _glibc()
    return bool(libc is not None and libc.malloc_trim(0) == 1)


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
