"""The driver's native memory: what its glibc arenas and its Arrow pool keep once freed.

A driver's resident memory is its live objects plus what its allocators keep after a free. Two
of those allocators keep a lot for a process that does what a GC driver does (short bursts of
work, then minutes of waiting on Spark):

* **glibc malloc** gives each thread that allocates an arena of its own (up to 8 per core) and
  returns an arena's free pages to the system only from its top. The driver allocates from many
  threads (py4j runs each Spark callback on one of its own; the queue sources, the status server
  and the progress heartbeat have theirs). :func:`limit_malloc_arenas` (before any thread starts)
  and :func:`release_free_memory` (``malloc_trim``, after a mark's retention cross-check and every
  cycle tick) keep that in check.
* **pyarrow's default pool** (mimalloc on Linux) keeps the segments a burst of Arrow work freed.
  The driver's Arrow work is small: the task lists it hands to Spark as Arrow tables
  (:func:`~lakefs_gc.spark.runtime.frames.local_frame`), the few rows it collects, its reports.
  Handing Spark the 10,762 metarange ids of lakeFS's bottom-line repository as one task list left
  about 10 MiB in mimalloc's segments (bench/README.md, "20M objects: the driver's Arrow buffers
  from the C library (2026-11-30)"). :func:`use_system_arrow_pool` makes the driver allocate
  Arrow buffers from the C library instead, which returns a large block when it is freed; the
  executors' Python workers, where the Arrow work is, keep the default pool.

The glibc calls go through ``ctypes`` and do nothing without glibc (musl, macOS).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from functools import cache
from typing import Any

#: glibc malloc arenas the driver may use (glibc's default: 8 per core)
MALLOC_ARENAS = 2
#: ``mallopt``'s parameter number for the arena limit (glibc's malloc.h)
_M_ARENA_MAX = -8


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


def use_system_arrow_pool() -> None:
    """Allocate this process's Arrow buffers from the C library (the driver's; see above)."""
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())


def release_free_memory() -> bool:
    """Give the free pages of every glibc arena back to the system (the driver's Arrow buffers
    among them, once :func:`use_system_arrow_pool` ran); True if any was released."""
    libc = _glibc()
    return bool(libc is not None and libc.malloc_trim(0) == 1)
