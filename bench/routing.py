"""Benchmark: routing an inventory's rows to many repositories' namespaces (numbers, not a test).

One S3 Inventory usually lists a whole bucket, and one bucket often holds many repositories'
storage namespaces (``s3://bucket/repos/<name>/``). ``route_rows`` gives each configured
repository the rows under its prefix; this measures its CPU per 1M rows (65,536-row batches,
as a Parquet data file gives them) as the number of repositories grows, with every row a
candidate of one of them, the keys ascending as S3 lists them, and once more shuffled (the path
for rows whose order is unknown). In-process, one core, the best of ``--repeat``.

    python bench/routing.py [--rows N] [--repositories 1,3,20,100] [--repeat 3]

Results: bench/README.md, "`routing.py`: an inventory that feeds many repositories (2026-12-08)".
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa

from lakefs_gc.inventory.delivery import INVENTORY_SCHEMA
from lakefs_gc.inventory.mapping import NamespaceRoute, route_rows

SNAPSHOT = datetime(2026, 11, 20, 6, 0, tzinfo=timezone.utc)
BATCH_ROWS = 65_536


def inventory(rows: int, repositories: int) -> pa.Table:
    """``rows`` lakeFS-shaped data keys spread evenly over ``repositories`` namespaces, sorted."""
    per = rows // repositories
    keys = sorted(
        f"repos/r{r:03d}/data/g{i // 1000:018d}/ce8co450002q7h{i:06d}"
        for r in range(repositories)
        for i in range(per)
    )
    n = len(keys)
    return pa.table(
        {
            "bucket": pa.array(["bench-bucket"] * n),
            "key": pa.array(keys),
            "size": pa.array(np.arange(n)),
            "last_modified": pa.array(
                np.full(n, int(SNAPSHOT.timestamp() * 1e6)), pa.timestamp("us", tz="UTC")
            ),
            "etag": pa.nulls(n, pa.string()),
            "encryption": pa.nulls(n, pa.string()),
        },
        schema=INVENTORY_SCHEMA,
    )


def cpu_ms_per_million(table: pa.Table, routes: list[NamespaceRoute], repeat: int) -> tuple[float, int]:
    """The best CPU milliseconds per 1M rows over ``repeat`` routings of ``table``, and the candidates."""
    batches = table.to_batches(max_chunksize=BATCH_ROWS)
    best, candidates = float("inf"), 0
    for _ in range(repeat):
        start = time.process_time()
        candidates = sum(
            route_rows(b, routes, delivery_id="d", snapshot_time=SNAPSHOT).num_rows for b in batches
        )
        best = min(best, time.process_time() - start)
    return best * 1e3 * 1e6 / table.num_rows, candidates


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000, help="inventory rows (default 1M)")
    parser.add_argument(
        "--repositories", default="1,3,20,100", help="comma-separated repository counts (default 1,3,20,100)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="routings per measurement; the best is kept")
    args = parser.parse_args()
    batches = f"{BATCH_ROWS:,}-row batches"
    print(f"route_rows: {args.rows:,} rows in {batches}, CPU ms per 1M rows (best of {args.repeat})")
    print(f"{'repositories':>12} {'keys ascending':>15} {'keys shuffled':>14} {'candidates':>11}")
    rng = np.random.default_rng(1)
    for count in (int(c) for c in args.repositories.split(",")):
        table = inventory(args.rows, count)
        routes = [NamespaceRoute(f"r{r}", "bench-bucket", f"repos/r{r:03d}/") for r in range(count)]
        ordered, candidates = cpu_ms_per_million(table, routes, args.repeat)
        shuffled, again = cpu_ms_per_million(table.take(rng.permutation(table.num_rows)), routes, args.repeat)
        assert candidates == again == table.num_rows, (candidates, again, table.num_rows)
        print(f"{count:>12} {ordered:>15.0f} {shuffled:>14.0f} {candidates:>11,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
