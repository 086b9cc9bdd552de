"""A repository on a moto bucket with many objects, and a mark of its garbage in lakeFS's layout.

Objects go straight into this process's moto backend (10K puts/s, no HTTP); the mark's
``deleted/`` parts and ``summary.json`` are written through S3, as lakeFS's GC writes them.
"""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq

from tests.support.gc_env import GcEnv
from tests.support.object_stores import s3_client
from tests.support.servers import MotoServer


def seed_s3_mark(
    env: GcEnv,
    moto: MotoServer,
    bucket: str,
    *,
    repo: str,
    mark_id: str,
    garbage: list[str],
    live: list[str],
    size: int,
    start_time: str,
    cutoff_time: str,
    num_listed_objects: int | None = None,
) -> str:
    """Create ``repo`` under ``repos/<repo>/`` of ``bucket``, its objects and the mark; return the prefix."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    prefix = f"repos/{repo}/"
    env.lakefs.create_repo(repo, f"s3://{bucket}/{prefix.rstrip('/')}")
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
    for key in garbage + live:
        backend.put_object(bucket, prefix + key, b"x" * size)
    report = f"{prefix}_lakefs/retention/gc/unified/{mark_id}/"
    client = s3_client(moto)
    for part in range(3):
        out = io.BytesIO()
        pq.write_table(pa.table({"address": garbage[part::3]}), out)
        client.put_object(
            Bucket=bucket, Key=f"{report}deleted/part-{part:05d}.snappy.parquet", Body=out.getvalue()
        )
    summary = {
        "run_id": mark_id, "success": True, "first_slice": "g5adr8f5pvec73cpia80",
        "start_time": start_time, "cutoff_time": cutoff_time,
        "num_deleted_objects": len(garbage), "num_deleted_bytes": size * len(garbage),
    }  # fmt: skip
    if num_listed_objects is not None:
        summary["num_listed_objects"] = num_listed_objects
    client.put_object(Bucket=bucket, Key=f"{report}summary.json", Body=json.dumps(summary).encode())
    return prefix
