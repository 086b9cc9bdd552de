"""The service state on any store, and its lease: one ``serve`` per state location.

Fast, without Spark: the lease and the state's files are plain ``pyarrow.fs`` reads and writes,
on a local directory and on moto S3. The Spark side (spools, tables, range cache and cycle
records on S3, read by executors on other machines) is tested on a standalone cluster in
``tests/cluster``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from lakefs_gc.errors import ExitCode, StateInUseError
from lakefs_gc.events.spool import Spool
from lakefs_gc.service.lease import LEASE, StateLease
from lakefs_gc.service.records import BatchRecord, CycleRecords
from lakefs_gc.service.settings import ServiceSettings
from lakefs_gc.service.state import ServiceState
from lakefs_gc.spark.ingest.inventory.stream import delivery_log_location
from lakefs_gc.spark.runtime.checkpoint import STREAM_ID, clear_interrupted_writes, stream_id
from lakefs_gc.storage.checkpoints import CheckpointRoot
from lakefs_gc.storage.directories import StoreDirectory
from lakefs_gc.storage.filesystems import StorageOptions
from tests.support.object_stores import MotoServer, s3_options

TTL = timedelta(minutes=2)
LAKEFS = {"endpoint": "http://127.0.0.1:9", "access_key_id": "k", "secret_access_key": "s"}


def settings(**service: str) -> ServiceSettings:
    return ServiceSettings.model_validate({"lakefs": LAKEFS, "service": service})


def lease(directory: StoreDirectory, **kwargs: object) -> StateLease:
    return StateLease(directory, TTL, settle=0.05, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(params=["local", "s3"])
def state(request: pytest.FixtureRequest, tmp_path: Path) -> StoreDirectory:
    if request.param == "local":
        return StoreDirectory.of(tmp_path / "state")
    moto: MotoServer = request.getfixturevalue("moto")
    bucket = request.getfixturevalue("s3_bucket")
    return StoreDirectory.of(f"s3://{bucket}/gc-state", StorageOptions(s3=s3_options(moto)))


def test_a_second_service_is_refused_naming_the_owner(state: StoreDirectory) -> None:
    first, second = lease(state), lease(state)
    first.acquire()
    with pytest.raises(StateInUseError) as refused:
        second.acquire()
    message = str(refused.value)
    assert f"pid {first.pid}" in message and first.host in message and str(state) in message
    assert refused.value.exit_code == ExitCode.STATE_IN_USE == 13
    first.release()
    assert state.read(LEASE) is None
    second.acquire()  # released: free
    second.release()


def test_an_expired_lease_or_a_dead_local_owner_is_free(state: StoreDirectory) -> None:
    past = lease(state, now=lambda: datetime.now(timezone.utc) - 2 * TTL)
    past.acquire()  # written two TTLs ago: expired now
    lease(state).acquire()
    body = json.loads(state.read(LEASE) or b"")
    body.update(pid=2**22 + 17, token="dead", expires=(datetime.now(timezone.utc) + TTL).isoformat())
    state.write(LEASE, json.dumps(body).encode())  # a process of this host that no longer runs
    lease(state).acquire()
    body.update(host="another-machine", token="alive")
    state.write(LEASE, json.dumps(body).encode())  # another machine: valid until it expires
    with pytest.raises(StateInUseError, match="host another-machine"):
        lease(state).acquire()


def test_a_renewal_finds_a_takeover(state: StoreDirectory) -> None:
    mine = lease(state)
    mine.acquire()
    body = json.loads(state.read(LEASE) or b"")
    state.write(LEASE, json.dumps({**body, "token": "other", "host": "intruder"}).encode())
    with pytest.raises(StateInUseError, match="taken over by host intruder"):
        mine.renew()


def test_spools_and_cycle_records_live_in_the_state(state: StoreDirectory) -> None:
    spool = Spool(state.sub("events/q/spool"))
    spool.write(1, [], datetime.now(timezone.utc))
    spool.write(2, [], datetime.now(timezone.utc))
    assert spool.sequences() == [1, 2] and spool.read(2) == []
    spool.delete(1)
    assert spool.sequences() == [2]
    records = CycleRecords(state.sub("cycles/r/batches"))
    records.save(BatchRecord(7, "2026-01-01T00:00:00+00:00"))
    assert CycleRecords(state.sub("cycles/r/batches")).batches[7].started.startswith("2026")


def test_checkpoints_stay_on_the_driver(tmp_path: Path) -> None:
    local = ServiceState.of(settings(state=str(tmp_path)))
    assert local.checkpoint("events/q").local_path == tmp_path / "events/q/checkpoint"  # the layout of before
    remote = ServiceState.of(settings(state="s3://b/gc", checkpoints=str(tmp_path / "c")))
    assert remote.directory.uri() == "s3://b/gc" and remote.checkpoint("inventory").spark == str(
        tmp_path / "c/inventory/checkpoint"
    )
    default = ServiceState.of(settings(state="s3://b/gc")).checkpoints.local_path
    assert default is not None and default.is_relative_to(Path.home())


@pytest.mark.parametrize(
    "uri",
    ["file:///var/lib/gc/ck", "s3a://bucket/gc/ck", "abfss://ck@acct.dfs.core.windows.net/gc"],
)
def test_checkpoints_may_be_a_hadoop_uri_given_to_spark_as_it_is(uri: str) -> None:
    where = ServiceState.of(settings(state="s3://b/gc", checkpoints=uri))
    assert where.checkpoint("cycles/r").spark == f"{uri}/cycles/r/checkpoint"


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("s3://bucket/ck", "give s3a://bucket/prefix, which needs the hadoop-aws connector jars"),
        ("s3n://bucket/ck", "s3a://"),
        ("https://acct.blob.core.windows.net/c/ck", "abfss://<container>@<account>.dfs.core.windows.net"),
        ("hdfs://namenode/ck", "expected a local directory, file://, s3a:// or abfss://"),
        ("file://otherhost/ck", "remote host"),
    ],
)
def test_checkpoints_on_what_spark_or_we_cannot_open_are_refused(uri: str, says: str) -> None:
    with pytest.raises(ValueError, match="checkpoints") as refused:
        settings(state="s3://b/gc", checkpoints=uri)
    assert uri in str(refused.value) and says in str(refused.value)


@pytest.mark.parametrize("scheme", ["file", "s3a"])
def test_our_files_beside_spark_checkpoints(
    scheme: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The stream id, the delivery log and the interrupted-write cleanup beside Spark's logs: a
    ``file://`` checkpoint as a local directory, an ``s3a://`` one as ``s3://``."""
    if scheme == "file":
        options, uri, files_uri = StorageOptions(), tmp_path.as_uri(), str(tmp_path)
    else:
        bucket = request.getfixturevalue("s3_bucket")
        options = StorageOptions(s3=s3_options(request.getfixturevalue("moto")))
        uri, files_uri = f"s3a://{bucket}/ck", f"s3://{bucket}/ck"
    root = CheckpointRoot.of(uri, options).sub("events/q/checkpoint")
    assert root.spark == f"{uri}/events/q/checkpoint"  # as given, for Spark
    files = StoreDirectory.of(f"{files_uri}/events/q/checkpoint", options)
    files.write("offsets/.0.4b1d.tmp", b"half")
    files.write("offsets/0", b"v1")
    assert clear_interrupted_writes(root) == root
    assert files.names("offsets") == ["0"]
    first = stream_id(root)
    assert stream_id(root) == first and files.read(STREAM_ID) == f"{first}\n".encode()
    assert delivery_log_location(root).uri == f"{uri}/events/q/checkpoint/lakefs-gc-deliveries"


def test_serve_exits_13_before_spark_starts(tmp_path: Path) -> None:
    state = StoreDirectory.of(tmp_path / "state")
    holder = lease(state)
    holder.acquire()
    config = tmp_path / "gc.yaml"
    config.write_text(
        json.dumps({"lakefs": LAKEFS, "service": {"state": str(tmp_path / "state")}, "repositories": ["r"]})
    )
    run = subprocess.run(
        [sys.executable, "-m", "lakefs_gc", "serve", "--config", str(config)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == ExitCode.STATE_IN_USE, run.stderr
    assert f"pid {holder.pid}" in run.stderr and "in use" in run.stderr
