"""Benchmark: SSTable decoding speed of lakefs-gc beside RocksDB's ``sst_dump`` (numbers, not a test).

Decodes lakeFS's real two-level range ``56569996.sst`` and a generated ~20 MiB range (lakeFS's
maximum range size) with our reader, and scans the same files with ``sst_dump --command=scan``
in the same run. Prints wall and CPU seconds, entries per CPU second and the ratio of CPU
seconds to sst_dump's (CPU seconds stay comparable on a shared machine). Three readers: every
field of every entry; address and type through the general decoders; and the mark's path
(``committed_addresses_of_range``: the addresses-only fast path of ``sstable/addresses.py`` plus
the namespace normalisation). Aim for the mark's path: within 1.5x of sst_dump.

    python bench/sstable_read.py [--fixtures DIR] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from lakefs_gc.lakefs.ranges import committed_addresses_of_range
from lakefs_gc.sstable import (
    AddressType,
    Entry,
    SSTableReader,
    iter_range_addresses,
    iter_range_entries,
    write_range,
)


def default_fixtures() -> Path:
    env = os.environ.get("LAKEFS_GC_FIXTURES")
    return Path(env) if env else Path(__file__).resolve().parents[1] / "tests" / "fixtures"


def generate_range(directory: Path, target_bytes: int = 20 << 20) -> Path:
    """A lakeFS-like range: sharded object paths, RELATIVE addresses, metadata-free entries."""

    def entries() -> object:
        i = 0
        while True:
            yield (
                f"tables/events/date=2026-{i // 400_000 % 12 + 1:02d}/part-{i:09d}.parquet".encode(),
                Entry(
                    address=f"data/gqv3epl4fd2o8m3men70/ce8co454fd2o{i:08d}",
                    address_type=AddressType.RELATIVE,
                    size=1000 + i,
                    etag=f"{i:032x}",
                    last_modified_ns=1_700_000_000_000_000_000 + i * 1_000_000,
                    content_type="application/octet-stream",
                ),
            )
            i += 1

    # about 70 bytes per entry on disk after prefix compression and Snappy
    n = target_bytes // 70
    gen = entries()
    info = write_range(directory, (next(gen) for _ in range(n)))  # type: ignore[call-overload]
    return directory / info.id


def _cpu() -> float:
    """CPU seconds of this process and its waited-for children (sst_dump runs as a child)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def time_it(fn: Callable[[], int], repeat: int) -> tuple[int, float, float]:
    """Best-of-``repeat`` wall and CPU seconds. The ratios use CPU seconds: they stay comparable
    when other jobs share the machine (wall time then measures the queue for a core)."""
    best, best_cpu = float("inf"), float("inf")
    count = 0
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), _cpu()
        count = fn()
        best = min(best, time.perf_counter() - start)
        best_cpu = min(best_cpu, _cpu() - start_cpu)
    return count, best, best_cpu


def ours_full(path: Path) -> Callable[[], int]:
    return lambda: sum(1 for _ in iter_range_entries(SSTableReader(path)))


def ours_addresses(path: Path) -> Callable[[], int]:
    return lambda: sum(1 for _ in iter_range_addresses(SSTableReader(path)))


def ours_mark(path: Path, entries: int) -> Callable[[], int]:
    """The mark's path: the addresses-only fast path plus the namespace normalisation.

    Counted in entries decoded (the namespace drops some addresses, e.g. 56569996.sst's imports).
    """

    def run() -> int:
        for _ in committed_addresses_of_range(SSTableReader(path), "s3://bucket/ns/"):
            pass
        return entries

    return run


def sst_dump(path: Path, sst_dump_bin: str, command: str, entries: int) -> Callable[[], int]:
    """``scan --output_hex`` prints every entry in hex (the historical reference; about 6 bytes
    of output per byte of entry); ``check`` iterates every entry and verifies the checksums
    without printing them: RocksDB's decoding cost alone."""
    extra = ["--output_hex"] if command == "scan" else []

    def run() -> int:
        with tempfile.TemporaryDirectory() as tmp:
            link = Path(tmp) / "t.sst"  # sst_dump insists on the .sst suffix
            link.symlink_to(path)
            out = subprocess.run(
                [sst_dump_bin, f"--file={link}", f"--command={command}", *extra],
                check=True,
                capture_output=True,
            ).stdout
        return out.count(b" seq:") if command == "scan" else entries

    return run


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fixtures", type=Path, default=default_fixtures())
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sst_dump_bin = shutil.which("sst_dump")
    with tempfile.TemporaryDirectory() as tmp:
        generated = generate_range(Path(tmp))
        files = {
            "56569996.sst (lakeFS, two-level)": args.fixtures / "lakefs-sstable" / "56569996.sst",
            f"generated range ({generated.stat().st_size / 2**20:.1f} MiB)": generated,
        }
        print(f"{'file':<34} {'reader':<30} {'entries':>8} {'wall s':>8} {'CPU s':>8} {'entries/CPU s':>10} "
              f"{'/ scan':>7} {'/ check':>8}")  # fmt: skip
        for label, path in files.items():
            bench_file(label, path, sst_dump_bin, args.repeat)
        if not sst_dump_bin:
            print("sst_dump not found (apt-get install rocksdb-tools): no ratio", file=sys.stderr)
    return 0


def bench_file(label: str, path: Path, sst_dump_bin: str | None, repeat: int) -> None:
    """One line per reader: best-of-``repeat`` time and its ratio to both sst_dump commands."""
    entries = sum(1 for _ in SSTableReader(path))
    runs: list[tuple[str, Callable[[], int]]] = []
    if sst_dump_bin:
        runs.append(("sst_dump --command=scan (hex)", sst_dump(path, sst_dump_bin, "scan", entries)))
        runs.append(("sst_dump --command=check", sst_dump(path, sst_dump_bin, "check", entries)))
    runs += [
        ("lakefs-gc entries", ours_full(path)),
        ("lakefs-gc addresses (general)", ours_addresses(path)),
        ("lakefs-gc mark's addresses", ours_mark(path, entries)),
    ]
    base: dict[str, float] = {}
    for name, fn in runs:
        count, wall, seconds = time_it(fn, repeat)
        if name.startswith("sst_dump"):
            base[name.split("=")[1][:5]] = seconds
        ratios = [f"{seconds / base[k]:.2f}x" if k in base else "" for k in ("scan ", "check")]
        print(f"{label[:34]:<34} {name:<30} {count:>8} {wall:>8.3f} {seconds:>8.3f} "
              f"{count / seconds:>10,.0f} {ratios[0]:>7} {ratios[1]:>8}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
