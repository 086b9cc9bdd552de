"""A sweep killed with SIGKILL at random points and started again: every marked object deleted once.

``lakefs-gc sweep`` runs as a subprocess (Python driver, its JVM and Python workers in one process
group) against moto behind a hook that delays every ``DeleteObjects`` and counts the keys each one
asks for. It is killed three times (after its first ``swept/`` parts, mid-way, late), then run to
the end. Between two runs the test reads which addresses ``swept/`` confirms: no run may ask S3 for
one of them again. At the end every garbage object is gone, every live one is there, ``swept/``
holds each marked address exactly once, and the summary's counts are the truth.

The reading rule itself (unreadable parts, newest failure, confirmed wins) is checked on local parts.
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
import yaml
from pyspark.sql import SparkSession

from lakefs_gc.spark.report import swept
from lakefs_gc.spark.report.layout import SWEPT, ReportDir
from lakefs_gc.spark.sweep import resume as sweep_resume
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_storage_namespace
from tests.support.gc_env import GcEnv, gc_env
from tests.support.object_stores import s3_client, s3_options
from tests.support.s3_marks import seed_s3_mark
from tests.support.servers import MotoServer
from tests.support.throttling import S3SlowDown, moto_behind

#: a minute or more of work (``-m 'not slow'`` leaves it out of a quick run)
pytestmark = pytest.mark.slow

REPO = "resumed"
MARK_ID = "g4uk6erfnfus73frbnqr"
GARBAGE = [f"data/g{i % 17:02d}/garbage-{i:05d}" for i in range(30_000)]
LIVE = [f"data/g{i % 17:02d}/live-{i:05d}" for i in range(500)]
#: The sweep in the subprocess writes a swept/ part after every DeleteObjects (1000 keys) or 0.5 s.
SWEEP = (
    "import sys; from lakefs_gc.spark.sweep import partition; partition.FLUSH_OUTCOMES = 1000; "
    "partition.FLUSH_INTERVAL_S = 0.5; from lakefs_gc.cli.main import main; sys.exit(main(sys.argv[1:]))"
)


class KeyCounter(S3SlowDown):
    """Throttles nothing; counts every key a ``DeleteObjects`` asks for (after ``latency_s``)."""

    def __init__(self, app: Any, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.keys: Counter[str] = Counter()

    def _decide(self, keys: list[str]) -> tuple[bool, set[str]]:
        with self._lock:
            self.keys.update(keys)
        return super()._decide(keys)

    def counted(self) -> Counter[str]:
        """A copy of the counts, taken under the lock: a killed sweep's requests still in flight
        count on the server's threads while the test reads."""
        with self._lock:
            return Counter(self.keys)


@contextmanager
def counting_moto_server(latency_s: float) -> Iterator[tuple[MotoServer, KeyCounter]]:
    with moto_behind(lambda app: KeyCounter(app, latency_s=latency_s), name="counting-moto") as served:
        yield served


@pytest.fixture
def counted() -> Iterator[tuple[MotoServer, KeyCounter]]:
    """0.4 s per DeleteObjects: 4 tasks of ~8 requests each, a few seconds of deleting per run."""
    with counting_moto_server(latency_s=0.4) as server:
        yield server


@pytest.fixture
def counted_env(tmp_path: Path, moto: MotoServer, counted: tuple[MotoServer, KeyCounter]) -> Iterator[GcEnv]:
    front, _ = counted
    config = tmp_path / "gc.yaml"
    keys = {"access_key_id": moto.access_key_id, "secret_access_key": moto.secret_access_key}
    # the sweep's driver-side guards are not what this test is about
    gc = {"revalidate": False, "max_delete_fraction": 1.0}
    config.write_text(yaml.safe_dump({"storage": {"s3": keys}, "gc": gc}))
    extra = ["--config", str(config), "--s3-endpoint", front.endpoint_url, "--s3-region", moto.region]
    yield from gc_env(tmp_path, StorageOptions(s3=s3_options(moto)), ("s3",), extra)


def seed(env: GcEnv, moto: MotoServer, bucket: str) -> str:
    now = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
    return seed_s3_mark(
        env, moto, bucket, repo=REPO, mark_id=MARK_ID, garbage=GARBAGE, live=LIVE, size=1,
        start_time=now, cutoff_time=now, num_listed_objects=len(GARBAGE) + len(LIVE),
    )  # fmt: skip


class Sweeper:
    def __init__(self, env: GcEnv, moto: MotoServer, bucket: str, prefix: str) -> None:
        self.client = s3_client(moto)
        self.bucket = bucket
        self.report = f"{prefix}_lakefs/retention/gc/unified/{MARK_ID}/"
        self.argv = [
            sys.executable, "-c", SWEEP, "sweep", "--repo", REPO, "--mark-id", MARK_ID, "--output", "json",
            "--parallelism", "4", "--sweep-concurrency", "1", *env.args(),
        ]  # fmt: skip
        self._read: dict[str, pa.Table | None] = {}  # parts are written whole, once: read each once

    def start(self) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )

    def complete(self) -> tuple[dict[str, Any], str]:
        proc = self.start()
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        [line] = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
        return line, err

    def kill_when(self, condition: Callable[[], bool], rng: random.Random) -> None:
        proc = self.start()
        deadline = time.monotonic() + 300
        while not condition():
            if proc.poll() is not None:
                _, err = proc.communicate()
                pytest.fail(f"sweep ended (exit {proc.returncode}) before the kill point:\n{err[-3000:]}")
            assert time.monotonic() < deadline, "kill point never reached"
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.4))  # anywhere within the next request or flush
        os.killpg(proc.pid, signal.SIGKILL)  # the driver: Python, its JVM and its Python workers
        proc.communicate()

    def parts(self) -> dict[str, pa.Table | None]:
        """Every swept/ part: its rows, or None if it is not a readable parquet file."""
        tables: dict[str, pa.Table | None] = {}
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.report + "swept/"
        )
        for page in pages:
            for item in page.get("Contents", []):
                name = item["Key"].rsplit("/", 1)[-1]
                if name.startswith(("_", ".")):
                    continue
                if name not in self._read:
                    body = self.client.get_object(Bucket=self.bucket, Key=item["Key"])["Body"].read()
                    try:
                        self._read[name] = pq.read_table(io.BytesIO(body))
                    except pa.ArrowInvalid:
                        self._read[name] = None
                tables[name] = self._read[name]
        return tables

    def confirmed(self) -> set[str]:
        return {
            r["address"]
            for t in self.parts().values()
            if t is not None
            for r in t.to_pylist()
            if r["outcome"] in ("deleted", "missing")
        }

    def confirmed_at_least(self, n: int) -> Callable[[], bool]:
        return lambda: len(self.confirmed()) >= n

    def summary(self) -> dict[str, Any]:
        body = self.client.get_object(Bucket=self.bucket, Key=self.report + "summary.json")["Body"].read()
        return dict(json.loads(body))


def test_a_sweep_killed_three_times_finishes_without_repeating_confirmed_batches(
    counted_env: GcEnv, counted: tuple[MotoServer, KeyCounter], moto: MotoServer, s3_bucket: str
) -> None:
    _, hook = counted
    prefix = seed(counted_env, moto, s3_bucket)
    sweeper = Sweeper(counted_env, moto, s3_bucket, prefix)
    rng = random.Random(int(os.environ.get("LAKEFS_GC_TEST_SEED", "0")) or None)
    asked: list[Counter[str]] = []  # the keys each run asked S3 to delete
    confirmed_before: list[set[str]] = []

    def run(action: Callable[[], Any]) -> Any:
        confirmed_before.append(sweeper.confirmed())
        before = hook.counted()
        result = action()
        asked.append(Counter({k[len(prefix) :]: n for k, n in (hook.counted() - before).items()}))
        return result

    for point in (1, len(GARBAGE) * 2 // 5, len(GARBAGE) * 3 // 4):  # first parts, mid-way, late
        run(lambda point=point: sweeper.kill_when(sweeper.confirmed_at_least(point), rng))
    result, err = run(sweeper.complete)

    # no run asked for an object an earlier run had confirmed; only unconfirmed ones were asked again
    for i, (keys, confirmed) in enumerate(zip(asked, confirmed_before, strict=True)):
        assert not set(keys) & confirmed, (
            f"run {i} deleted {len(set(keys) & confirmed)} confirmed objects again"
        )
    assert len(confirmed_before[-1]) >= len(GARBAGE) * 3 // 4
    assert set().union(*asked) == set(GARBAGE)
    assert set(asked[-1]) == set(GARBAGE) - confirmed_before[-1]  # (a retried request asks its keys again)
    assert f"resuming: {len(confirmed_before[-1])} objects confirmed by earlier runs" in err

    # every garbage object gone, every live one there
    listed = (
        s3_client(moto).get_paginator("list_objects_v2").paginate(Bucket=s3_bucket, Prefix=prefix + "data/")
    )
    assert {o["Key"][len(prefix) :] for page in listed for o in page.get("Contents", [])} == set(LIVE)

    # swept/ complete: every part readable, each marked address exactly once
    parts = sweeper.parts()
    assert all(t is not None for t in parts.values()), [n for n, t in parts.items() if t is None]
    rows = [r for t in parts.values() if t is not None for r in t.to_pylist()]
    assert sorted(r["address"] for r in rows) == sorted(GARBAGE)
    assert {(r["outcome"], r["error"]) for r in rows} == {("deleted", None)}  # S3: absent keys say Deleted
    assert sweeper.client.head_object(Bucket=s3_bucket, Key=sweeper.report + "swept/_SUCCESS")

    # the counts are the truth, over all runs
    assert (result["deleted"], result["missing"], result["failed"]) == (len(GARBAGE), 0, 0)
    sweep = sweeper.summary()["sweep"]
    assert (sweep["deleted"], sweep["missing"], sweep["failed"]) == (len(GARBAGE), 0, 0)
    with_repeats = sum(sum(keys.values()) for keys in asked) - len(GARBAGE)
    print(f"\n{len(asked)} runs, {with_repeats} asked again (unconfirmed or retried), {len(parts)} parts")


# ---- the reading rule, on local parts -------------------------------------------------------------


@pytest.fixture
def local_report(tmp_path: Path) -> ReportDir:
    namespace = parse_storage_namespace("local://ns", local_root=str(tmp_path))
    return ReportDir(namespace, "m1", StorageOptions(local_root=str(tmp_path)))


def write(
    report: ReportDir, tag: str, seq: int, rows: list[tuple[str, str, str | None]], *, failed: bool
) -> str:
    fs, base = report.filesystem()
    path = swept.swept_part_path(base, 0, tag, seq, failed=failed)
    columns = {
        "address": [r[0] for r in rows],
        "outcome": [r[1] for r in rows],
        "error": [r[2] for r in rows],
    }
    swept.write_part(fs, path, columns)
    return path


def test_reading_rule_and_resume_on_local_parts(local_report: ReportDir, spark: SparkSession) -> None:
    first = swept.run_tag(datetime(2026, 1, 1, tzinfo=timezone.utc))
    second = swept.run_tag(datetime(2026, 1, 2, tzinfo=timezone.utc))
    write(local_report, first, 0, [("a", "deleted", None), ("d", "missing", None)], failed=False)
    write(local_report, first, 1, [("b", "failed", "x"), ("c", "failed", "x")], failed=True)
    write(local_report, second, 0, [("c", "missing", None)], failed=False)
    write(local_report, second, 1, [("b", "failed", "y"), ("e", "failed", "y")], failed=True)
    fs, base = local_report.filesystem()
    cut = Path(base) / SWEPT / f"part-00001-{second}-c002.snappy.parquet"  # a write cut short
    cut.write_bytes(b"PAR1\x00\x00")
    (Path(base) / SWEPT / "_SUCCESS").write_bytes(b"")
    assert not list((Path(base) / SWEPT).glob(".*"))  # no temporary file left behind

    paths = sorted(str(p) for p in (Path(base) / SWEPT).iterdir() if not p.name.startswith("_"))
    table = swept.effective_swept(fs, paths)
    assert sorted(table.to_pylist(), key=lambda r: r["address"]) == [
        {"address": "a", "outcome": "deleted", "error": None},
        {"address": "b", "outcome": "failed", "error": "y"},  # the newest failure
        {"address": "c", "outcome": "missing", "error": None},  # confirmed wins over a failure
        {"address": "d", "outcome": "missing", "error": None},
        {"address": "e", "outcome": "failed", "error": "y"},
    ]

    resume = sweep_resume.confirmed(spark, local_report, parallelism=2, say=lambda _: None)
    assert (resume.deleted, resume.missing) == (1, 2)
    assert not cut.exists() and not (Path(base) / SWEPT / "_SUCCESS").exists()
    marked = spark.createDataFrame([(x,) for x in "abcdef"], "address string")
    assert sorted(r["address"] for r in resume.pending(marked).collect()) == ["b", "e", "f"]
    assert resume.totals({"deleted": 2, "missing": 0, "failed": 1}) == {
        "deleted": 3,
        "missing": 2,
        "failed": 1,
    }

    write(local_report, resume.tag, 0, [("b", "deleted", None), ("f", "deleted", None)], failed=False)
    write(local_report, resume.tag, 1, [("e", "failed", "z")], failed=True)
    resume.finish()  # earlier runs' failures are superseded: each address once
    rows = [r for p in sweep_resume_parts(local_report) for r in pq.read_table(p).to_pylist()]
    assert sorted((r["address"], r["outcome"]) for r in rows) == [
        ("a", "deleted"), ("b", "deleted"), ("c", "missing"),
        ("d", "missing"), ("e", "failed"), ("f", "deleted"),
    ]  # fmt: skip
    assert (Path(base) / SWEPT / "_SUCCESS").exists()
    assert isinstance(fs, pafs.LocalFileSystem)


def sweep_resume_parts(report: ReportDir) -> list[str]:
    _, base = report.filesystem()
    return sorted(str(p) for p in (Path(base) / SWEPT).iterdir() if not p.name.startswith(("_", ".")))


class RetriedTask:
    """What ``TaskContext.get()`` answers in a sweep task run again in a stage re-run (its executor
    was lost with its shuffle output)."""

    def partitionId(self) -> int:
        return 0

    def attemptNumber(self) -> int:
        return 0  # a stage re-run counts again from 0

    def taskAttemptId(self) -> int:
        return 7


class Done:
    """The progress accumulator, as a task sees it."""

    value = 0

    def add(self, n: int) -> None:
        self.value += n


def test_a_retried_task_keeps_what_its_lost_attempt_recorded(
    local_report: ReportDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attempt 0 flushed a part (``a`` deleted) and a failure (``b``) before its executor died; attempt 1
    asks the store only for the rest and counts the lost attempt's outcomes: each address once."""
    from pyspark import TaskContext

    from lakefs_gc.gc.params import SweepParams
    from lakefs_gc.spark.sweep.partition import SweepPartition
    from lakefs_gc.storage.deleting import StoreDeleters

    tag = swept.run_tag()
    write(local_report, tag, 0, [("data/g0/a", "deleted", None)], failed=False)
    write(local_report, tag, 1, [("data/g0/b", "failed", "x")], failed=True)
    write(local_report, swept.run_tag(datetime(2026, 1, 1, tzinfo=timezone.utc)), 0,
          [("data/g0/c", "failed", "an earlier run's")], failed=True)  # fmt: skip
    ns = tmp_path / "ns" / "data" / "g0"
    ns.mkdir(parents=True)
    for name in "ac":
        (ns / name).write_bytes(b"x")  # (a was deleted by attempt 0; left here to show it is not asked)
    params = SweepParams(
        repository=REPO, revalidate=False, max_mark_age=timedelta(days=1), max_delete_fraction=1.0,
        prepare_commits_timeout=timedelta(minutes=1), concurrency=1, max_retries=0,
    )  # fmt: skip
    deleters = StoreDeleters(local_report.namespace, local_report.options)
    body = SweepPartition(local_report, tag, params, deleters, 1, Done())
    monkeypatch.setattr(TaskContext, "get", classmethod(lambda cls: RetriedTask()))

    [row] = body(iter([pa.RecordBatch.from_pydict({"address": ["data/g0/a", "data/g0/b", "data/g0/c"]})]))

    assert {c: row.column(c)[0].as_py() for c in ("deleted", "missing", "failed")} == {
        "deleted": 2, "missing": 0, "failed": 1,
    }  # fmt: skip
    assert body.done.value == 3
    assert (ns / "a").exists() and not (ns / "c").exists()
    this_run = [p for p in sweep_resume_parts(local_report) if tag in p]
    rows = sorted((r["address"], r["outcome"]) for p in this_run for r in pq.read_table(p).to_pylist())
    assert rows == [("data/g0/a", "deleted"), ("data/g0/b", "failed"), ("data/g0/c", "deleted")]
