"""Least privilege: deploy/aws/iam-policy.json is parliament clean, allows every storage call
lakefs-gc makes and little else; deploy/azure/role-definition.json grants the matching data
actions.

The coverage test runs the product against moto behind a recorder (tests/deploy/recording.py):
the service (SQS notifications, an S3 Inventory delivery, a mark and its sweep) and the batch mark
and sweep (a listing, and a mark from the inventory), on a repository with garbage of every kind
and a legacy root object. Every (action, resource, condition keys) the product's requests need is
evaluated against the policy, its placeholder names replaced by the test's bucket, inventory and
queue. Calls of the test harness (buckets, fixtures, lakeFS's own writes) go to another port and
are not recorded.
"""

from __future__ import annotations

import json
import time
import uuid
import warnings
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import parliament
import pytest
from pyspark.sql import SparkSession

from lakefs_gc.service.app import GcService
from tests.deploy.iam import evaluate
from tests.deploy.recording import Call, StorageCalls
from tests.service.conftest import S3World, Served
from tests.service.histories import (
    MIN_AGE_S,
    History,
    Marks,
    deleted_branch,
    expired_commits,
    orphan,
    running,
    service_settings,
    staging,
    wait_for,
)
from tests.service.test_serve_s3 import deliver
from tests.support.jobs import mark, sweep
from tests.support.throttling import moto_behind

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "deploy" / "aws" / "iam-policy.json"
ROLE = ROOT / "deploy" / "azure" / "role-definition.json"
REPO = "iam-s3"
#: the policy's placeholders
DATA, INVENTORY, INVENTORY_PREFIX = "example-lakefs-data", "example-inventory", "daily"
QUEUE = "arn:aws:sqs:us-east-1:111122223333:lakefs-gc-events"


def test_iam_policy_has_no_parliament_findings() -> None:
    with warnings.catch_warnings():  # parliament imports pkg_resources
        warnings.simplefilter("ignore")
        policy = parliament.analyze_policy_string(POLICY.read_text(), include_community_auditors=True)
    assert [(f.issue, f.detail, f.location) for f in policy.findings] == []


def _allowed(policy: dict[str, Any], action: str, resource: str, **context: str) -> bool:
    return evaluate(policy, action, resource, context).allowed


def test_iam_policy_allows_nothing_beyond_its_purpose() -> None:
    p = json.loads(POLICY.read_text())
    ns = f"arn:aws:s3:::{DATA}/repos/analytics"
    root_guid = "0123456789abcdef0123456789abcdef"
    # what it is for
    assert _allowed(p, "s3:ListBucket", f"arn:aws:s3:::{DATA}", **{"s3:prefix": "repos/analytics/"})
    assert _allowed(p, "s3:GetObject", f"{ns}/_lakefs/3f2a9c")
    assert _allowed(p, "s3:PutObject", f"{ns}/_lakefs/retention/gc/unified/m1/summary.json")
    assert _allowed(p, "s3:DeleteObject", f"{ns}/data/gq3/ce8co")
    assert _allowed(p, "s3:DeleteObject", f"{ns}/{root_guid}")
    assert _allowed(p, "s3:GetObject", f"arn:aws:s3:::{INVENTORY}/{INVENTORY_PREFIX}/b/c/manifest.json")
    assert _allowed(p, "sqs:ReceiveMessage", QUEUE) and _allowed(p, "sqs:DeleteMessage", QUEUE)
    # and not more
    assert not _allowed(p, "s3:ListBucket", f"arn:aws:s3:::{DATA}", **{"s3:prefix": ""})
    assert not _allowed(p, "s3:ListBucket", f"arn:aws:s3:::{DATA}")
    assert not _allowed(p, "s3:GetObject", f"{ns}/data/gq3/ce8co")  # the data itself is never read
    assert not _allowed(p, "s3:PutObject", f"{ns}/data/gq3/ce8co")
    assert not _allowed(p, "s3:PutObject", f"{ns}/_lakefs/3f2a9c")
    assert not _allowed(p, "s3:DeleteObject", f"{ns}/_lakefs/3f2a9c")
    assert not _allowed(p, "s3:DeleteObject", f"{ns}/_lakefs/retention/gc/unified/m1/summary.json")
    # 32 characters after a '/' look like a root GUID to IAM: the Deny keeps _lakefs/ out anyway
    assert not _allowed(p, "s3:DeleteObject", f"{ns}/_lakefs/0123456789abcdef01234567")
    assert not _allowed(p, "s3:DeleteObject", f"{ns}/dummy")
    assert not _allowed(p, "s3:DeleteObject", f"arn:aws:s3:::{DATA}/elsewhere/x")
    assert not _allowed(p, "s3:DeleteObject", f"arn:aws:s3:::{INVENTORY}/{INVENTORY_PREFIX}/m.json")
    assert not _allowed(p, "s3:DeleteObjectVersion", f"{ns}/data/gq3/ce8co")
    assert not _allowed(p, "s3:DeleteBucket", f"arn:aws:s3:::{DATA}")
    assert not _allowed(p, "sqs:SendMessage", QUEUE)
    assert not _allowed(p, "sqs:ReceiveMessage", QUEUE.replace("lakefs-gc-events", "other"))


#: each IAM action of the policy and the Azure data action that grants the same on Azure
_BLOBS = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs"
_MESSAGES = "Microsoft.Storage/storageAccounts/queueServices/queues/messages"
AZURE_EQUIVALENT = {
    "s3:ListBucket": f"{_BLOBS}/read",
    "s3:GetObject": f"{_BLOBS}/read",
    "s3:PutObject": f"{_BLOBS}/write",
    "s3:AbortMultipartUpload": f"{_BLOBS}/write",
    "s3:DeleteObject": f"{_BLOBS}/delete",
    "sqs:ReceiveMessage": f"{_MESSAGES}/process/action",  # receive and delete (Get Messages)
    "sqs:DeleteMessage": f"{_MESSAGES}/process/action",
    "sqs:GetQueueAttributes": f"{_MESSAGES}/process/action",
}
EVENT_GRID_RECEIVE = "Microsoft.EventGrid/events/receive/action"  # Event Grid namespace subscriptions


def test_azure_role_definition_grants_the_matching_data_actions() -> None:
    role = json.loads(ROLE.read_text())
    assert set(role) == {"Name", "IsCustom", "Description", "Actions", "NotActions", "DataActions",
                         "NotDataActions", "AssignableScopes"}  # fmt: skip
    assert role["IsCustom"] is True and role["Actions"] == [] and role["AssignableScopes"]
    actions = {a for s in json.loads(POLICY.read_text())["Statement"] for a in _list(s["Action"])}
    assert actions <= set(AZURE_EQUIVALENT), actions - set(AZURE_EQUIVALENT)
    expected = {AZURE_EQUIVALENT[a] for a in actions} | {EVENT_GRID_RECEIVE}
    assert sorted(role["DataActions"]) == sorted(expected)
    assert not any("*" in a for a in role["DataActions"])
    condition = (ROLE.parent / "role-assignment-condition.txt").read_text()
    assert condition.count("(") == condition.count(")")
    for path in ("repos/*/data/*", "repos/*/_lakefs/retention/gc/unified/*", "*/_lakefs/*"):
        assert f"'{path}'" in condition


def _list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else value


# ---- every call the product makes is allowed -----------------------------------------------------


def policy_for(world: S3World, queue_arn: str) -> dict[str, Any]:
    """The policy with its placeholder names replaced by the test's bucket, inventory and queue."""
    bucket, _, prefix = world.inventory.removeprefix("s3://").partition("/")
    text = POLICY.read_text()
    for placeholder, real in [
        (f"arn:aws:s3:::{INVENTORY}/{INVENTORY_PREFIX}/", f"arn:aws:s3:::{bucket}/{prefix}/"),
        (f'"{INVENTORY_PREFIX}/*"', f'"{prefix}/*"'),
        (f"arn:aws:s3:::{INVENTORY}", f"arn:aws:s3:::{bucket}"),
        (f"arn:aws:s3:::{DATA}", f"arn:aws:s3:::{world.bucket}"),
        (QUEUE, queue_arn),
    ]:  # fmt: skip
        assert placeholder in text, placeholder
        text = text.replace(placeholder, real)
    policy: dict[str, Any] = json.loads(text)
    return policy


def _queue_arn(world: S3World) -> str:
    attributes = world.sqs.get_queue_attributes(QueueUrl=world.queue_url, AttributeNames=["QueueArn"])
    return str(attributes["Attributes"]["QueueArn"])


@pytest.mark.slow
def test_every_storage_call_of_the_product_is_allowed(
    spark: SparkSession, s3_world: S3World, s3_served: Served, tmp_path: Path
) -> None:
    world, served = s3_world, s3_served
    h = History(served.lakefs, REPO, world.namespace(REPO)).create()
    expired_commits(h)
    deleted_branch(h)
    staging(h)
    legacy = f"repos/{REPO}/{uuid.uuid4().hex}"  # a pre-data/ object at the namespace root
    world.s3.put_object(Bucket=world.bucket, Key=legacy, Body=b"legacy")
    deliver(world, served, REPO, snapshot_time=datetime.now(timezone.utc) - timedelta(minutes=1))
    # moto_behind's hook type is bound to its throttling hook; any WSGI middleware works
    with moto_behind(StorageCalls, name="recording-moto") as (proxy, recorder):  # type: ignore[type-var]
        storage = {**served.storage, "s3": {**served.storage["s3"], "endpoint_url": proxy.endpoint_url}}
        settings = service_settings(
            served.connection, tmp_path / "state", [REPO], storage=storage,
            events={"s3": {**world.queue(), "endpoint_url": proxy.endpoint_url}}, inventory=world.inventory,
        )  # fmt: skip
        _serve_one_cycle(spark, settings)
        late = orphan(h, "late/b")
        h.garbage(late, "orphaned after the service's cycle: the batch run collects it")
        time.sleep(MIN_AGE_S + 1)
        listed = mark(spark, settings, REPO)  # candidates from a listing
        sweep(spark, settings, REPO, listed.mark_id)
        from_inventory = settings.model_copy(
            update={"gc": settings.gc.model_copy(update={"inventory": world.inventory})}
        )
        assert mark(spark, from_inventory, REPO).success
    assert recorder.unknown == []
    assert h.problems(world.keys(REPO)) == []
    assert legacy.removeprefix(f"repos/{REPO}/") not in world.keys(REPO)
    _check_calls(recorder.calls, policy_for(world, _queue_arn(world)), world, legacy)


def _serve_one_cycle(spark: SparkSession, settings: Any) -> None:
    service = GcService(settings, spark)
    marks = Marks(service, REPO)
    with running(service):
        wait_for(lambda: marks.swept(), "a swept mark", service)
        service.request_stop()
        assert service.wait() == 0


def _check_calls(calls: list[Call], policy: dict[str, Any], world: S3World, legacy: str) -> None:
    denied = sorted(
        {c.describe() for c in calls if not evaluate(policy, c.action, c.resource, dict(c.context)).allowed}
    )
    assert denied == [], "calls the IAM policy does not allow:\n" + "\n".join(denied)
    actions = {c.action for c in calls}
    assert actions >= {"s3:ListBucket", "s3:GetObject", "s3:PutObject", "s3:DeleteObject",
                       "sqs:ReceiveMessage", "sqs:DeleteMessage"}, actions  # fmt: skip
    deleted = {c.resource for c in calls if c.action == "s3:DeleteObject"}
    data = f"arn:aws:s3:::{world.bucket}/repos/{REPO}/data/"
    assert f"arn:aws:s3:::{world.bucket}/{legacy}" in deleted and any(d.startswith(data) for d in deleted)
    inventory_bucket = world.inventory.removeprefix("s3://").split("/")[0]
    assert any(c.resource.startswith(f"arn:aws:s3:::{inventory_bucket}/") for c in calls)
