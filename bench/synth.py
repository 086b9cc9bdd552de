"""Benchmark: ``lakefs-gc test-server synth`` at growing sizes (numbers, not a test).

Each size is one child process (``python -m lakefs_gc.cli.main test-server synth ...``) in a
fresh directory, so its peak RSS is its own (``wait4``'s rusage of that child alone). The shape
scales with the objects the way the bottom-line repository does (lakeFS's GC design: 20M
objects, 1K branches, 30K commits, 5M uncommitted, 1M garbage): a quarter of the objects staged,
a twentieth garbage, and commits and branches fixed unless given. ``--no-objects`` is the
default: no physical file, an S3 Inventory delivery (Parquet) describes the objects instead, the
way a 20M-object namespace is marked in production.

Printed per size: wall and CPU seconds (CPU seconds stay comparable while other jobs share the
machine), physical objects per CPU second, peak RSS, ranges and metadata bytes written, and the
disk the run left behind. Memory is flat when peak RSS does not grow with the objects.

    python bench/synth.py [--objects 50000,500000,1000000] [--commits 300] [--branches 30]
                          [--physical] [--workdir DIR] [--keep] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()


def run_synth(base: Path, objects: int, args: argparse.Namespace) -> dict[str, Any]:
    argv = [sys.executable, "-m", "lakefs_gc.cli.main", "test-server", "synth",
            "--storage-root", str(base / "root"), "--state", str(base / "state"),
            "--objects", str(objects), "--commits", str(args.commits), "--branches", str(args.branches),
            "--uncommitted", str(objects // 4), "--garbage", str(objects // 20), "--seed", "17"]  # fmt: skip
    if not args.physical:
        argv.append("--no-objects")
    src = str(HERE.parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert child.stdout is not None
    out = child.stdout.read()
    _pid, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"synth of {objects} objects failed: {out[-2000:]!r}")
    report = json.loads(out)
    disk = sum(p.stat().st_size for p in base.rglob("*") if p.is_file())
    return {
        "objects": objects,
        "physical_objects": report["physical_objects"],
        "garbage": report["garbage"],
        "commits": report["commits"],
        "ranges_written": report["ranges_written"],
        "metadata_mib": report["metadata_bytes"] / 2**20,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mib": usage.ru_maxrss / 1024,
        "disk_mib": disk / 2**20,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--objects", default="50000,500000,1000000", help="comma list of sizes")
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--branches", type=int, default=30)
    parser.add_argument("--physical", action="store_true", help="write the objects as files too")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/lakefs-gc-bench-synth"))
    parser.add_argument("--keep", action="store_true", help="keep each size's output")
    parser.add_argument("--json", type=Path, help="also write the numbers to this file")
    args = parser.parse_args()
    results = []
    print(f"{'objects':>10} {'physical':>10} {'commits':>7} {'ranges':>7} {'wall s':>8} {'CPU s':>8} "
          f"{'obj/CPU s':>10} {'peak RSS MiB':>12} {'disk MiB':>9}", flush=True)  # fmt: skip
    for objects in (int(n) for n in args.objects.split(",")):
        base = args.workdir / f"n{objects}"
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        r = run_synth(base, objects, args)
        results.append(r)
        print(f"{r['objects']:>10,} {r['physical_objects']:>10,} {r['commits']:>7,} "
              f"{r['ranges_written']:>7,} "
              f"{r['wall_s']:>8.1f} {r['cpu_s']:>8.1f} {r['physical_objects'] / r['cpu_s']:>10,.0f} "
              f"{r['peak_rss_mib']:>12.0f} {r['disk_mib']:>9.0f}", flush=True)  # fmt: skip
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
