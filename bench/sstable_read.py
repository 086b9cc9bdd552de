"""Benchmark: SSTable decoding speed of lakefs-gc beside RocksDB's ``sst_dump`` (numbers, not a test).

Decodes lakeFS's real two-level range ``56569996.sst`` and a generated ~20 MiB range (lakeFS's
maximum range size) with our reader, and scans the same files with ``sst_dump --command=scan``
in the same run. Prints entries/second for each and the ratio (aim: within 8x of sst_dump).

    python bench/sstable_read.py [--fixtures DIR] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

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
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "fixtures"


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


def time_it(fn: Callable[[], int], repeat: int) -> tuple[int, float]:
    best = float("inf")
    count = 0
    for _ in range(repeat):
        start = time.perf_counter()
        count = fn()
        best = min(best, time.perf_counter() - start)
    return count, best


def ours_full(path: Path) -> Callable[[], int]:
    return lambda: sum(1 for _ in iter_range_entries(SSTableReader(path)))


def ours_addresses(path: Path) -> Callable[[], int]:
    return lambda: sum(1 for _ in iter_range_addresses(SSTableReader(path)))


def sst_dump(path: Path, sst_dump_bin: str) -> Callable[[], int]:
    def run() -> int:
        with tempfile.TemporaryDirectory() as tmp:
            link = Path(tmp) / "t.sst"  # sst_dump insists on the .sst suffix
            link.symlink_to(path)
            out = subprocess.run(
                [sst_dump_bin, f"--file={link}", "--command=scan", "--output_hex"],
                check=True,
                capture_output=True,
            ).stdout
        return out.count(b" seq:")

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
        print(
            f"{'file':<40} {'reader':<28} {'entries':>9} {'seconds':>8} {'entries/s':>11} {'vs sst_dump':>11}"
        )
        for label, path in files.items():
            base_rate = None
            runs: list[tuple[str, Callable[[], int]]] = []
            if sst_dump_bin:
                runs.append(("sst_dump --command=scan", sst_dump(path, sst_dump_bin)))
            runs += [
                ("lakefs-gc entries", ours_full(path)),
                ("lakefs-gc addresses only", ours_addresses(path)),
            ]
            for name, fn in runs:
                count, seconds = time_it(fn, args.repeat)
                rate = count / seconds
                if name.startswith("sst_dump"):
                    base_rate = rate
                ratio = (
                    f"{base_rate / rate:.2f}x slower" if base_rate and not name.startswith("sst_dump") else ""
                )
                print(f"{label:<40} {name:<28} {count:>9} {seconds:>8.3f} {rate:>11,.0f} {ratio:>11}")
        if not sst_dump_bin:
            print("sst_dump not found (apt-get install rocksdb-tools): no ratio", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
