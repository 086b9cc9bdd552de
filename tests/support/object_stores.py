"""Object-store fixtures: one moto server and one Azurite per test session, a fresh bucket/container per test.

Servers are session-scoped because starting Azurite costs about a second; tests stay independent by
each getting its own uniquely named bucket or container (named after the test, so a leftover is easy to
trace). Nothing is torn down per test: both servers keep data in memory and die with the session.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from pydantic import SecretStr

from lakefs_gc.storage.filesystems import AzureOptions, S3Options
from tests.support import servers
from tests.support.servers import AzuriteServer, MotoServer

if TYPE_CHECKING:
    from azure.storage.blob import BlobServiceClient


@pytest.fixture(scope="session")
def moto() -> Iterator[MotoServer]:
    """A moto server (S3, SQS, ...) on 127.0.0.1 and a free port."""
    with servers.moto_server() as server:
        yield server


@pytest.fixture(scope="session")
def azurite() -> Iterator[AzuriteServer]:
    """Azurite (Blob and Queue) on 127.0.0.1 and free ports; fails with `npm ci` advice if not installed."""
    with servers.azurite() as server:
        yield server


@pytest.fixture
def s3_bucket(moto: MotoServer, request: pytest.FixtureRequest) -> str:
    """The name of a new, empty bucket on the session's moto server."""
    name = unique_name(request)
    s3_client(moto).create_bucket(Bucket=name)
    return name


@pytest.fixture
def azure_container(azurite: AzuriteServer, request: pytest.FixtureRequest) -> str:
    """The name of a new, empty blob container on the session's Azurite."""
    name = unique_name(request)
    blob_service(azurite).create_container(name)
    return name


def s3_client(server: MotoServer) -> Any:
    """A boto3 S3 client for ``server`` (path-style, as moto on an IP address needs)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=server.endpoint_url,
        aws_access_key_id=server.access_key_id,
        aws_secret_access_key=server.secret_access_key,
        region_name=server.region,
        config=Config(s3={"addressing_style": "path"}),
    )


def s3_options(server: MotoServer) -> S3Options:
    """How lakefs-gc reaches ``server`` (with credentials: pyarrow's unsigned writes reach moto
    aws-chunked encoded and are stored with the chunk framing)."""
    return S3Options(
        endpoint_url=server.endpoint_url,
        region=server.region,
        access_key_id=server.access_key_id,
        secret_access_key=SecretStr(server.secret_access_key),
    )


def azure_options(server: AzuriteServer) -> AzureOptions:
    return AzureOptions(account_key=SecretStr(server.account_key), blob_endpoint=server.blob_endpoint)


def blob_service(server: AzuriteServer) -> BlobServiceClient:
    from azure.storage.blob import BlobServiceClient

    return BlobServiceClient.from_connection_string(server.connection_string)


def unique_name(request: pytest.FixtureRequest) -> str:
    """A valid S3 bucket *and* Azure container name: 3-63 of [a-z0-9-], no leading, trailing or double
    hyphen; the test's name plus 12 random hex digits."""
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.originalname.lower()).strip("-")[:40].strip("-")
    return f"{stem or 't'}-{uuid.uuid4().hex[:12]}"
