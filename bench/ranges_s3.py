"""Benchmark: decoding lakeFS's ranges from S3, in place or fetched whole (numbers, not a test).

The SSTable decoder reads one data block at a time (lakeFS's are a few KiB). Reading a table in
place on an object store (``SSTableReader`` over ``fs.open_input_file``, what the mark did until
2026-12-01) makes each block read a ranged GET; the mark's ``open_sstable`` now fetches the table
whole first (``storage.reads.fetched_file``: one download, then local reads). Both ways decode
the same two tables from a moto S3 server (a child process, as ``bench/mark.py`` runs it):
lakeFS's real two-level range ``56569996.sst`` (1.7 MiB) and a generated ~20 MiB range (lakeFS's
default maximum range size), with ``committed_addresses_of_range`` (the mark's path), at each
``--read-latency-ms`` moto adds before answering a GET or HEAD (S3's time to a first byte is
tens of milliseconds). Prints wall seconds, the GETs moto answered and the addresses decoded
(the same both ways).

    python bench/ranges_s3.py [--read-latency-ms 0,20] [--in-place-limit-s 120]

In place at 20 ms, the 20 MiB range would take minutes: ``--in-place-limit-s`` skips an in-place
read whose estimate (requests at 0 ms x latency) is above it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from mark import S3_KEYS, moto, say
from sstable_read import default_fixtures, generate_range

BUCKET = "ranges"


def upload(endpoint: str, files: dict[str, Path]) -> Any:
    """Put ``files`` into moto's bucket; the pyarrow filesystem to read them with."""
    import boto3

    from lakefs_gc.storage.filesystems import S3Options, StorageOptions, filesystem_for
    from lakefs_gc.storage.locations import parse_location

    client = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=S3_KEYS["access_key_id"],
        aws_secret_access_key=S3_KEYS["secret_access_key"], region_name=S3_KEYS["region"],
    )  # fmt: skip
    client.create_bucket(Bucket=BUCKET)
    for key, path in files.items():
        client.upload_file(str(path), BUCKET, key)
    options = StorageOptions(s3=S3Options(endpoint_url=endpoint, **S3_KEYS))
    return filesystem_for(parse_location(f"s3://{BUCKET}"), options)[0]


def in_place(fs: Any, key: str) -> int:
    from lakefs_gc.lakefs.ranges import committed_addresses_of_range
    from lakefs_gc.sstable import SSTableReader

    with fs.open_input_file(f"{BUCKET}/{key}") as source, SSTableReader(source, name=key) as table:
        return sum(1 for _ in committed_addresses_of_range(table, f"s3://{BUCKET}/repo"))


def fetched(fs: Any, key: str) -> int:
    from lakefs_gc.lakefs.ranges import committed_addresses_of_range, open_sstable
    from lakefs_gc.storage.locations import parse_location

    with open_sstable(fs, parse_location(f"s3://{BUCKET}/{key}"), f"{BUCKET}/{key}") as table:
        return sum(1 for _ in committed_addresses_of_range(table, f"s3://{BUCKET}/repo"))


def measured(server: Any, fn: Callable[[], int]) -> dict[str, Any]:
    before = server.request({"op": "gets"})
    start = time.perf_counter()
    addresses = fn()
    seconds = time.perf_counter() - start
    after = server.request({"op": "gets"})
    return {"seconds": round(seconds, 3), "addresses": addresses,
            "requests": after["requests"] - before["requests"]}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--read-latency-ms", default="0,20", help="comma list of moto's delay per GET/HEAD")
    parser.add_argument("--in-place-limit-s", type=float, default=120.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lakefs-gc-bench-ranges-") as tmp:
        files = {"lakefs-56569996.sst": default_fixtures() / "lakefs-sstable" / "56569996.sst",
                 "generated-20MiB.sst": generate_range(Path(tmp))}  # fmt: skip
        requests_at_zero: dict[str, int] = {}
        rows = []
        for latency in (int(v) for v in args.read_latency_ms.split(",")):
            with moto(0, read_latency_ms=latency) as server:
                fs = upload(server.info["endpoint"], files)
                for key, path in files.items():
                    row: dict[str, Any] = {
                        "latency_ms": latency,
                        "table": key,
                        "mib": path.stat().st_size / 2**20,
                    }
                    estimate = requests_at_zero.get(key, 0) * latency / 1000
                    if estimate <= args.in_place_limit_s:
                        say(f"{key} at {latency} ms: in place")
                        row["in_place"] = measured(server, partial(in_place, fs, key))
                        requests_at_zero.setdefault(key, row["in_place"]["requests"])
                    else:
                        row["in_place"] = {"estimate_s": round(estimate)}
                    say(f"{key} at {latency} ms: fetched whole")
                    row["fetched"] = measured(server, partial(fetched, fs, key))
                    rows.append(row)
    print_report(rows)
    return 0


def print_report(rows: list[dict[str, Any]]) -> None:
    w = sys.stdout.write
    w(f"\nlakeFS ranges decoded from moto S3 ({os.cpu_count()} CPUs): in place, or fetched whole first\n")
    w(f"  {'table':<22} {'MiB':>5} {'latency':>8} {'in place s':>11} {'GETs':>9} "
      f"{'fetched s':>10} {'GETs':>9} {'addresses':>10} {'speed-up':>9}\n")  # fmt: skip
    for r in rows:
        a, b = r["in_place"], r["fetched"]
        if "seconds" in a:
            same = "" if a["addresses"] == b["addresses"] else " DIFFERENT ADDRESSES"
            left = f"{a['seconds']:>11.2f} {a['requests']:>9,}"
            ratio = f"{a['seconds'] / max(b['seconds'], 1e-6):>8.0f}x{same}"
        else:
            left, ratio = f"{'~' + str(a['estimate_s']):>11} {'(skipped)':>9}", f"{'':>9}"
        w(f"  {r['table']:<22} {r['mib']:>5.1f} {r['latency_ms']:>6} ms {left} "
          f"{b['seconds']:>10.2f} {b['requests']:>9,} {b['addresses']:>10,} {ratio}\n")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
