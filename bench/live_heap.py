"""The live heap of a running service's driver JVM: forced full collections, sampled over time.

Numbers, not a test. ``lakefs_gc_jvm_heap_after_gc_bytes`` is what survived each pool's *last*
collection, and G1 collects its old generation only when the heap fills to its occupancy threshold,
so that gauge climbs between old-generation collections however flat the live data is. This
script asks the JVM for the truth instead: every ``--every`` seconds ``jcmd <pid> GC.run`` (a full,
stop-the-world collection, ~0.1-0.5 s on a 1 GiB heap) and then ``GC.heap_info``, whose "used" is
then the live heap. Run it beside ``bench/soak.py`` (it perturbs the service a little: one full
collection per sample), then read the slope it prints.

    python bench/live_heap.py --minutes 32 --every 60 --json live-heap.json
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from soak import slope  # a sibling script (bench/ is on sys.path): the soak's slopes, computed alike

#: "garbage-first heap   total 1048576K, used 123456K [0x..." (G1; other collectors print alike)
HEAP = re.compile(r"heap\s+total\s+(\d+)K,\s+used\s+(\d+)K")


def service_jvm() -> int:
    """The pid of the driver JVM whose parent is a ``lakefs_gc serve`` process."""
    out = subprocess.run(["ps", "-eo", "pid,ppid,args"], capture_output=True, text=True, check=True).stdout
    rows = [line.split(None, 2) for line in out.splitlines()[1:] if line.strip()]
    serves = {pid for pid, _, args in rows if "lakefs_gc serve" in args}
    jvms = [int(pid) for pid, ppid, args in rows if ppid in serves and "SparkSubmit" in args]
    if len(jvms) != 1:
        sys.exit(f"expected one driver JVM under `lakefs_gc serve`, found {jvms}: give --pid")
    return jvms[0]


def sample(jcmd: str, pid: int) -> dict[str, float]:
    started = time.monotonic()
    subprocess.run([jcmd, str(pid), "GC.run"], capture_output=True, text=True, check=True, timeout=120)
    gc_s = time.monotonic() - started
    info = subprocess.run([jcmd, str(pid), "GC.heap_info"], capture_output=True, text=True, check=True).stdout
    match = HEAP.search(info)
    if match is None:
        raise SystemExit(f"cannot read the heap from jcmd GC.heap_info:\n{info}")
    total_k, used_k = (int(g) for g in match.groups())
    return {"live_heap_mb": used_k / 1024, "heap_committed_mb": total_k / 1024, "gc_run_s": gc_s}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pid", type=int, help="the driver JVM (default: the one under `lakefs_gc serve`)")
    p.add_argument("--minutes", type=float, default=30, help="how long to sample")
    p.add_argument("--every", type=float, default=60, help="seconds between samples")
    p.add_argument("--warmup", type=float, default=10, help="minutes left out of the slope")
    p.add_argument("--json", type=Path, help="write the samples here")
    args = p.parse_args(argv)
    jcmd = shutil.which("jcmd")
    if jcmd is None:
        sys.exit("jcmd not found: it comes with the JDK (not a JRE); put its bin/ on PATH")
    pid = args.pid or service_jvm()
    start, rows = time.monotonic(), []
    print(f"sampling the live heap of JVM {pid} every {args.every:.0f} s, {args.minutes:.0f} min", flush=True)
    while time.monotonic() - start < args.minutes * 60:
        t = time.monotonic() - start
        try:
            row: dict[str, Any] = {"t_s": round(t), **sample(jcmd, pid)}
        except subprocess.CalledProcessError as e:  # the service ended
            print(f"jcmd failed ({e.returncode}): {e.stderr.strip()}; stopping", flush=True)
            break
        rows.append(row)
        print(json.dumps(row), flush=True)
        time.sleep(max(0.0, args.every - (time.monotonic() - start - t)))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    after = [r for r in rows if r["t_s"] >= args.warmup * 60]
    if after:
        times, values = [r["t_s"] for r in after], [r["live_heap_mb"] for r in after]
        print(
            f"live heap after minute {args.warmup:.0f}: {min(values):.1f}-{max(values):.1f} MiB, "
            f"slope {slope(times, values):+.2f}% per 10 minutes ({len(after)} samples)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
