"""Sweeping through a store that throttles: moto behind a hook answering 503 SlowDown for a share of the
DeleteObjects requests and per-key SlowDown for a share of the keys (tests.support.throttling).

The sweep must slow down (its adaptive limit drops), finish, lose nothing and count right: every marked
object ends ``deleted`` exactly once in ``swept/``, nothing live is touched, and the summary's counts equal
both the truth and what the hook saw (one DeleteObjects per attempt the sweep counts: no hidden SDK retries).
"""

from __future__ import annotations

import io
import json
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from lakefs_gc.spark.sweep import progress as sweep_progress
from lakefs_gc.storage.filesystems import StorageOptions
from tests.support.gc_env import GcEnv, gc_env, run_cli
from tests.support.object_stores import s3_client, s3_options
from tests.support.s3_marks import seed_s3_mark
from tests.support.servers import MotoServer
from tests.support.throttling import S3SlowDown, throttled_moto_server

pytestmark = pytest.mark.usefixtures("spark")

REPO = "throttled"
MARK_ID = "g4uk6erfnfus73frbnqg"
#: 4 tasks of 4 DeleteObjects each: the requests in flight of a task matter
GARBAGE = [f"data/g{i % 13:02d}/garbage-{i:05d}" for i in range(16_000)]
LIVE = [f"data/g{i % 13:02d}/live-{i:05d}" for i in range(500)]
SIZE = 7


@pytest.fixture
def throttled(moto: MotoServer) -> Iterator[tuple[MotoServer, S3SlowDown]]:
    """30% of DeleteObjects answered 503 SlowDown, 10% of the keys of the rest SlowDown; no key more than
    4 times (so 4+ retries must finish); 20 ms per DeleteObjects, as a stand-in for S3's latency."""
    with throttled_moto_server(
        request_share=0.3, key_share=0.1, max_per_key=4, latency_s=0.02, seed=7
    ) as server:
        yield server


@pytest.fixture
def throttled_env(
    tmp_path: Path, moto: MotoServer, throttled: tuple[MotoServer, S3SlowDown]
) -> Iterator[GcEnv]:
    """The test server stores through moto directly; the GC's S3 traffic goes through the hook."""
    front, _ = throttled
    config = tmp_path / "gc.yaml"
    keys = {"access_key_id": moto.access_key_id, "secret_access_key": moto.secret_access_key}
    config.write_text(yaml.safe_dump({"storage": {"s3": keys}}))
    extra = ["--config", str(config), "--s3-endpoint", front.endpoint_url, "--s3-region", moto.region]
    yield from gc_env(tmp_path, StorageOptions(s3=s3_options(moto)), ("s3",), extra)


def seed(env: GcEnv, moto: MotoServer, bucket: str) -> str:
    """A repository on ``bucket``, its garbage and live objects, a mark (lakeFS's layout) of the garbage."""
    return seed_s3_mark(
        env, moto, bucket, repo=REPO, mark_id=MARK_ID, garbage=GARBAGE, live=LIVE, size=SIZE,
        start_time="2025-11-10T10:34:37.245361091Z", cutoff_time="2025-11-10T04:34:37.243Z",
    )  # fmt: skip


def listing(moto: MotoServer, bucket: str, prefix: str) -> set[str]:
    pages = s3_client(moto).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "data/")
    return {o["Key"][len(prefix) :] for page in pages for o in page.get("Contents", [])}


def swept_rows(moto: MotoServer, bucket: str, prefix: str) -> list[dict[str, Any]]:
    client = s3_client(moto)
    report = f"{prefix}_lakefs/retention/gc/unified/{MARK_ID}/swept/"
    rows: list[dict[str, Any]] = []
    for item in client.list_objects_v2(Bucket=bucket, Prefix=report).get("Contents", []):
        if item["Key"].endswith(".parquet"):
            body = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            rows += pq.read_table(io.BytesIO(body)).to_pylist()
    return rows


def summary_of(moto: MotoServer, bucket: str, prefix: str) -> dict[str, Any]:
    key = f"{prefix}_lakefs/retention/gc/unified/{MARK_ID}/summary.json"
    body = s3_client(moto).get_object(Bucket=bucket, Key=key)["Body"].read()
    return dict(json.loads(body))


def run_sweep(env: GcEnv, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, dict[str, Any], str]:
    started = time.monotonic()
    code, lines, err = run_cli(
        capsys, "sweep", "--repo", REPO, "--mark-id", MARK_ID, "--output", "json", "--parallelism", "4",
        "--sweep-concurrency", "4", *flags, *env.args(),
        # the repository has no GC rules and the mark no num_listed_objects: throttling alone here
        "--no-revalidate", "--max-mark-age", "3650d", "--force",
    )  # fmt: skip
    # what throttling costs, in the log (shown with `-o log_cli=true`), not in the suite's output
    logging.getLogger(__name__).info(
        "sweep %s: %.2fs, %s", " ".join(flags), time.monotonic() - started, lines[-1:]
    )
    assert lines, err
    return code, lines[0], err


def test_a_throttled_sweep_slows_down_finishes_and_counts_right(
    throttled_env: GcEnv,
    throttled: tuple[MotoServer, S3SlowDown],
    moto: MotoServer,
    s3_bucket: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, hook = throttled
    prefix = seed(throttled_env, moto, s3_bucket)
    monkeypatch.setattr(sweep_progress, "PROGRESS_INTERVAL_S", 0.2)

    code, result, err = run_sweep(throttled_env, capsys)

    assert code == 0, err
    assert (result["deleted"], result["missing"], result["failed"]) == (len(GARBAGE), 0, 0)
    assert listing(moto, s3_bucket, prefix) == set(LIVE)  # every garbage object gone, every live one there
    rows = swept_rows(moto, s3_bucket, prefix)
    assert sorted(r["address"] for r in rows) == sorted(GARBAGE)  # each exactly once
    assert {(r["outcome"], r["error"]) for r in rows} == {("deleted", None)}

    counts = hook.counts
    assert counts.throttled_requests > 0 and counts.throttled_keys > 0, counts
    summary = summary_of(moto, s3_bucket, prefix)
    assert list(summary)[:6] == ["run_id", "success", "first_slice", "start_time", "cutoff_time",
                                 "num_deleted_objects"]  # fmt: skip
    pace = summary["sweep"]
    assert (pace["deleted"], pace["missing"], pace["failed"]) == (len(GARBAGE), 0, 0)
    # every DeleteObjects the hook saw is one the sweep counted: botocore retried nothing behind its back
    assert pace["requests"] == counts.requests
    assert pace["throttled"] == counts.throttled_answers == result["throttled"]
    assert pace["retries"] == counts.throttled_answers  # one retry per throttled answer: nothing else failed
    assert pace["concurrency_decreases"] > 0 and pace["lowest_concurrency"] < 4
    assert re.search(rf"sweep \d+/{len(GARBAGE)} objects \(~[\d.]+ \w+\), \d+ objects/s", err), err


def test_keys_throttled_past_the_budget_fail_and_are_never_lost(
    throttled_env: GcEnv,
    throttled: tuple[MotoServer, S3SlowDown],
    moto: MotoServer,
    s3_bucket: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, hook = throttled
    hook.max_per_key = None
    prefix = seed(throttled_env, moto, s3_bucket)

    code, result, err = run_sweep(throttled_env, capsys, "--sweep-max-retries", "0")

    assert code == 9, err  # some deletions failed (partial)
    rows = swept_rows(moto, s3_bucket, prefix)
    assert sorted(r["address"] for r in rows) == sorted(GARBAGE)
    failed = {r["address"] for r in rows if r["outcome"] == "failed"}
    deleted = {r["address"] for r in rows if r["outcome"] == "deleted"}
    assert failed and deleted and failed | deleted == set(GARBAGE)
    assert all("SlowDown" in r["error"] and "after 0 retries" in r["error"] for r in rows if r["error"])
    assert (result["deleted"], result["failed"]) == (len(deleted), len(failed))
    assert listing(moto, s3_bucket, prefix) == set(LIVE) | failed  # a failed key's object is still there

    hook.request_share = hook.key_share = 0.0  # the store calms down: the same mark finishes the job
    code, result, err = run_sweep(throttled_env, capsys)
    assert code == 0, err
    assert (result["deleted"], result["failed"]) == (len(GARBAGE), 0)  # S3 says Deleted for absent keys
    assert listing(moto, s3_bucket, prefix) == set(LIVE)


def test_max_deletes_per_second_is_a_ceiling(
    throttled_env: GcEnv,
    throttled: tuple[MotoServer, S3SlowDown],
    moto: MotoServer,
    s3_bucket: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, hook = throttled
    hook.request_share = hook.key_share = 0.0
    prefix = seed(throttled_env, moto, s3_bucket)
    started = time.monotonic()
    code, result, err = run_sweep(throttled_env, capsys, "--max-deletes-per-second", "2000")
    elapsed = time.monotonic() - started
    assert code == 0, err
    assert result["deleted"] == len(GARBAGE) and listing(moto, s3_bucket, prefix) == set(LIVE)
    # 4 tasks of 4000 objects at 500/s each (2000/s over 4 tasks): the first request goes at once, the
    # second within the 1 s burst, the third and fourth wait for the 2 s of the one before: 5 s at least
    assert elapsed >= 5.0
