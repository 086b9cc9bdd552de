"""storage/clients.py: boto3 and azure-storage-blob clients built from options, and the service-principal
credential (checked against a real HTTP server standing in for Entra ID, not a mock)."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from azure.core.exceptions import ClientAuthenticationError, ServiceRequestError
from pydantic import SecretStr

from lakefs_gc.errors import StorageError
from lakefs_gc.storage.clients import (
    AZURE_STORAGE_SCOPE,
    ClientSecretCredential,
    azure_container_client,
    s3_client,
)
from lakefs_gc.storage.filesystems import (
    AzureOptions,
    S3Options,
    StorageOptions,
    azure_account_url,
    filesystem_for,
    parse_connection_string,
)
from lakefs_gc.storage.locations import parse_location
from lakefs_gc.testing.blockstore import NamespaceStore
from tests.support.object_stores import azure_options, blob_service, s3_options
from tests.support.servers import AzuriteServer, MotoServer

# -- a real HTTP server answering with canned responses ------------------------------------------------


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Responder = Callable[[Request], tuple[int, dict[str, str], bytes]]


@dataclass
class Stub:
    url: str
    requests: list[Request] = field(default_factory=list)


@contextmanager
def stub_server(respond: Responder) -> Iterator[Stub]:
    """An HTTP server on 127.0.0.1:<free port> in a thread, answering every request with ``respond``."""
    stub = Stub(url="")

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            request = Request(self.command, self.path, dict(self.headers.items()), self.rfile.read(length))
            stub.requests.append(request)
            status, headers, body = respond(request)
            self.send_response(status)
            for name, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# -- S3 ---------------------------------------------------------------------------------------------------


@pytest.fixture
def no_aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """boto3's chain with nothing configured: no env variables, empty config and credentials files."""
    for name in (
        "AWS_DEFAULT_REGION",
        "AWS_REGION",
        "AWS_PROFILE",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    ):
        monkeypatch.delenv(name, raising=False)
    empty = tmp_path / "empty-aws-config"
    empty.write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return monkeypatch


def test_s3_region_options_then_boto3_chain_then_us_east_1(no_aws_environment: pytest.MonkeyPatch) -> None:
    assert s3_client(S3Options()).meta.region_name == "us-east-1"
    no_aws_environment.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    assert s3_client(S3Options()).meta.region_name == "eu-central-1"
    assert s3_client(S3Options(region="ap-south-1")).meta.region_name == "ap-south-1"


def test_s3_retries_and_addressing_style() -> None:
    client = s3_client(S3Options(region="us-east-1"))
    assert client.meta.config.retries["mode"] == "standard"
    assert client.meta.config.retries["total_max_attempts"] == 11  # botocore: max_attempts retries + 1
    assert client.meta.config.s3["addressing_style"] == "path"
    virtual = s3_client(S3Options(region="us-east-1", force_path_style=False))
    assert virtual.meta.config.s3["addressing_style"] == "auto"


def test_s3_static_keys_else_the_default_chain(no_aws_environment: pytest.MonkeyPatch) -> None:
    static = s3_client(
        S3Options(
            region="us-east-1",
            access_key_id="AKIDSTATIC",
            secret_access_key=SecretStr("static-secret"),
            session_token=SecretStr("static-token"),
        )
    )
    credentials = static._request_signer._credentials
    assert (credentials.access_key, credentials.secret_key, credentials.token) == (
        "AKIDSTATIC",
        "static-secret",
        "static-token",
    )
    no_aws_environment.setenv("AWS_ACCESS_KEY_ID", "AKIDFROMENV")
    no_aws_environment.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    chained = s3_client(S3Options(region="us-east-1"))
    assert chained._request_signer._credentials.access_key == "AKIDFROMENV"


def test_s3_anonymous_does_not_sign() -> None:
    from botocore import UNSIGNED

    client = s3_client(S3Options(region="us-east-1", anonymous=True, access_key_id="ignored"))
    assert client.meta.config.signature_version is UNSIGNED


def test_s3_client_talks_to_moto(moto: MotoServer, s3_bucket: str) -> None:
    options = s3_options(moto)
    client = s3_client(options)
    client.put_object(Bucket=s3_bucket, Key="a b/c#d?e", Body=b"x")
    listed = client.list_objects_v2(Bucket=s3_bucket)["Contents"]
    assert [o["Key"] for o in listed] == ["a b/c#d?e"]
    client.close()


# -- Azure ------------------------------------------------------------------------------------------------


def _azurite_location(server: AzuriteServer, container: str) -> str:
    return f"https://{server.account_name}.blob.core.windows.net/{container}/repo"


def _roundtrip(client: object, name: str) -> bytes:
    client.upload_blob(name, b"payload", overwrite=True)  # type: ignore[attr-defined]
    data: bytes = client.download_blob(name).readall()  # type: ignore[attr-defined]
    return data


def test_azure_connection_string_reaches_azurite(azurite: AzuriteServer, azure_container: str) -> None:
    location = parse_location(_azurite_location(azurite, azure_container))
    options = AzureOptions(connection_string=SecretStr(azurite.connection_string))
    client = azure_container_client(location, options)
    assert client.url.startswith(azurite.blob_endpoint + "/")
    assert _roundtrip(client, "repo/via connection string#1") == b"payload"
    # pyarrow through the same connection string reads what the SDK wrote
    fs, path = filesystem_for(location.join("via connection string#1"), StorageOptions(azure=options))
    with fs.open_input_stream(path) as f:
        assert f.read() == b"payload"


def test_azure_account_key_and_sas_reach_azurite(azurite: AzuriteServer, azure_container: str) -> None:
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    location = parse_location(_azurite_location(azurite, azure_container))
    by_key = azure_container_client(
        location,
        azure_options(azurite),
    )
    assert _roundtrip(by_key, "repo/k") == b"payload"
    sas = generate_container_sas(
        azurite.account_name,
        azure_container,
        account_key=azurite.account_key,
        permission=ContainerSasPermissions(read=True, write=True, delete=True, list=True),
        expiry=datetime.now(timezone.utc) + timedelta(hours=1),
    )
    # blob_endpoint without the account: addressed path-style like pyarrow does
    host = azurite.blob_endpoint.rsplit("/", 1)[0]
    by_sas = azure_container_client(location, AzureOptions(sas_token=SecretStr(sas), blob_endpoint=host))
    assert _roundtrip(by_sas, "repo/s") == b"payload"
    assert sorted(
        b.name for b in blob_service(azurite).get_container_client(azure_container).list_blobs()
    ) == [
        "repo/k",
        "repo/s",
    ]


def test_namespace_store_uses_the_shared_clients(azurite: AzuriteServer, azure_container: str) -> None:
    options = StorageOptions(azure=AzureOptions(connection_string=SecretStr(azurite.connection_string)))
    store = NamespaceStore(_azurite_location(azurite, azure_container), options)
    store.put("data/s/x", b"1")
    store.delete("data/s/x")
    assert not store.exists("data/s/x")


KEY_CS = "AccountName=acct;AccountKey=a2V5;"
SAS_CS = "BlobEndpoint=https://acct.blob.core.windows.net;SharedAccessSignature=sv=1&sig=cs"
PRINCIPAL = {"client_id": "c", "client_secret": SecretStr("s"), "tenant_id": "t"}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"connection_string": SecretStr(KEY_CS), "sas_token": SecretStr("sig=sas")}, "key:a2V5"),
        ({"connection_string": SecretStr(SAS_CS), "account_key": SecretStr("a2V5")}, "sas:sig=cs"),
        ({"account_key": SecretStr("b3RoZXI="), "sas_token": SecretStr("sig=sas")}, "key:b3RoZXI="),
        ({"sas_token": SecretStr("sv=1&sig=sas"), **PRINCIPAL}, "sas:sig=sas"),
        (PRINCIPAL, "principal"),
        ({}, "anonymous"),
    ],
)
def test_azure_credential_precedence(fields: dict[str, object], expected: str) -> None:
    location = parse_location("https://acct.blob.core.windows.net/c/repo")
    client = azure_container_client(location, AzureOptions.model_validate(fields))
    credential = client.credential
    if expected.startswith("key:"):  # the SDK turns the shared key into its signing policy
        assert (credential.account_name, credential.account_key) == ("acct", expected[4:])
    elif expected.startswith("sas:"):  # SAS: kept as the URL's query, no credential object
        assert credential is None and expected[4:] in client.url
    elif expected == "principal":
        assert isinstance(credential, ClientSecretCredential)
        assert (credential.tenant_id, credential.client_id) == ("t", "c")
    else:
        assert credential is None and "?" not in client.url


def test_azure_partial_service_principal_is_refused() -> None:
    with pytest.raises(StorageError, match="client_id, client_secret and tenant_id"):
        azure_container_client(
            parse_location("https://acct.blob.core.windows.net/c/r"),
            AzureOptions(client_id="c", tenant_id="t"),
        )


def test_connection_string_for_another_account_is_refused() -> None:
    options = AzureOptions(connection_string=SecretStr("AccountName=other;AccountKey=c2VjcmV0;"))
    location = parse_location("https://acct.blob.core.windows.net/c/r")
    for build in (lambda: azure_container_client(location, options),
                  lambda: filesystem_for(location, StorageOptions(azure=options))):  # fmt: skip
        with pytest.raises(StorageError, match="'other'") as raised:
            build()
        assert "c2VjcmV0" not in str(raised.value)


def test_parse_connection_string() -> None:
    parsed = parse_connection_string(
        "DefaultEndpointsProtocol=https; AccountName=acct ;accountkey=a2V5==;"
        "EndpointSuffix=core.chinacloudapi.cn"
    )
    assert (parsed.account_name, parsed.account_key, parsed.blob_endpoint) == (
        "acct",
        "a2V5==",
        "https://acct.blob.core.chinacloudapi.cn",
    )
    assert "a2V5" not in repr(parsed)
    dev = parse_connection_string("UseDevelopmentStorage=true")
    assert (dev.account_name, dev.blob_endpoint) == (
        "devstoreaccount1",
        "http://127.0.0.1:10000/devstoreaccount1",
    )
    with pytest.raises(StorageError, match="malformed") as raised:
        parse_connection_string("AccountName=acct;secretgarbage")
    assert "secretgarbage" not in str(raised.value)


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        (None, "https://acct.blob.core.windows.net"),
        ("http://127.0.0.1:10000", "http://127.0.0.1:10000/acct"),
        ("http://127.0.0.1:10000/acct/", "http://127.0.0.1:10000/acct"),
        ("https://acct.privatelink.blob.core.windows.net", "https://acct.privatelink.blob.core.windows.net"),
    ],
)
def test_azure_account_url(endpoint: str | None, url: str) -> None:
    location = parse_location("https://acct.blob.core.windows.net/c/r")
    assert azure_account_url(location, AzureOptions(blob_endpoint=endpoint)) == url


def test_azure_endpoint_of_another_account_is_refused() -> None:
    location = parse_location("https://acct.blob.core.windows.net/c/r")
    with pytest.raises(StorageError, match="another account"):
        azure_account_url(location, AzureOptions(blob_endpoint="http://127.0.0.1:10000/other"))


def test_pyarrow_gets_the_account_prefixed_authority_for_real_azure_endpoints() -> None:
    """pyarrow prepends the account only to an authority starting with '.', so a real endpoint
    ``https://acct.blob...`` must become ``.blob...`` (else pyarrow would go path-style to acct/acct)."""
    options = AzureOptions(
        connection_string=SecretStr("AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net")
    )
    fs, _ = filesystem_for(
        parse_location("https://acct.blob.core.windows.net/c/r"), StorageOptions(azure=options)
    )
    assert isinstance(fs, pafs.AzureFileSystem)
    assert fs.__reduce__()[1][0]["blob_storage_authority"] == ".blob.core.windows.net"


# -- the service-principal credential ---------------------------------------------------------------------


def _token_endpoint(expires_in: int = 3600) -> tuple[Responder, list[str]]:
    issued: list[str] = []

    def respond(request: Request) -> tuple[int, dict[str, str], bytes]:
        form = urllib.parse.parse_qs(request.body.decode())
        if form.get("client_secret") != ["s3cr3t"]:
            body = {"error": "invalid_client", "error_description": "AADSTS7000215: Invalid client secret."}
            return 401, {"Content-Type": "application/json"}, json.dumps(body).encode()
        issued.append(f"token-{len(issued) + 1}")
        body = {"token_type": "Bearer", "expires_in": expires_in, "access_token": issued[-1]}
        return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()

    return respond, issued


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def test_client_credentials_flow_and_cache() -> None:
    respond, _ = _token_endpoint(expires_in=3600)
    clock = Clock()
    with stub_server(respond) as stub:
        credential = ClientSecretCredential(
            "my-tenant", "my-client", "s3cr3t", authority_host=stub.url, clock=clock
        )
        token = credential.get_token(AZURE_STORAGE_SCOPE)
        assert (token.token, token.expires_on) == ("token-1", int(clock.now) + 3600)
        (request,) = stub.requests
        assert (request.method, request.path) == ("POST", "/my-tenant/oauth2/v2.0/token")
        assert urllib.parse.parse_qs(request.body.decode()) == {
            "grant_type": ["client_credentials"],
            "client_id": ["my-client"],
            "client_secret": ["s3cr3t"],
            "scope": [AZURE_STORAGE_SCOPE],
        }
        clock.now += 3600 - 301  # still more than 5 minutes left: cached
        assert credential.get_token(AZURE_STORAGE_SCOPE).token == "token-1"
        assert credential.get_token().token == "token-1"  # no scope = Azure Storage
        assert len(stub.requests) == 1
        clock.now += 2  # within 5 minutes of expiry: renewed
        assert credential.get_token(AZURE_STORAGE_SCOPE).token == "token-2"
        assert len(stub.requests) == 2


def test_azure_core_bearer_policy_sends_the_token() -> None:
    """The credential satisfies azure-core's TokenCredential protocol as the storage pipeline uses it."""
    from azure.core import PipelineClient
    from azure.core.pipeline.policies import BearerTokenCredentialPolicy
    from azure.core.rest import HttpRequest

    token_endpoint, _ = _token_endpoint()

    def respond(request: Request) -> tuple[int, dict[str, str], bytes]:
        return token_endpoint(request) if "/oauth2/" in request.path else (200, {}, b"ok")

    with stub_server(respond) as stub:
        credential = ClientSecretCredential("t", "c", "s3cr3t", authority_host=stub.url)
        policy = BearerTokenCredentialPolicy(credential, AZURE_STORAGE_SCOPE)
        with PipelineClient(stub.url, policies=[policy]) as client:
            for _ in range(2):
                response = client.send_request(HttpRequest("GET", f"{stub.url}/blob"), enforce_https=False)
                assert response.status_code == 200
    token, *calls = stub.requests
    assert token.path == "/t/oauth2/v2.0/token"
    assert [r.headers["Authorization"] for r in calls] == ["Bearer token-1", "Bearer token-1"]


def test_service_principal_needs_https() -> None:
    """azure-storage-blob refuses token credentials on http endpoints (so not on a plain Azurite)."""
    options = AzureOptions(
        client_id="c", client_secret=SecretStr("s"), tenant_id="t", blob_endpoint="http://127.0.0.1:10000"
    )
    with pytest.raises(StorageError, match="only supported with HTTPS"):
        azure_container_client(parse_location("https://acct.blob.core.windows.net/c/r"), options)


def test_refused_client_is_an_authentication_error_without_the_secret() -> None:
    respond, _ = _token_endpoint()
    with stub_server(respond) as stub:
        credential = ClientSecretCredential("t", "c", "wrong-secret", authority_host=stub.url)
        with pytest.raises(ClientAuthenticationError, match="AADSTS7000215") as raised:
            credential.get_token(AZURE_STORAGE_SCOPE)
    assert "wrong-secret" not in str(raised.value)
    assert "wrong-secret" not in repr(credential)


def test_unreachable_authority_is_a_service_request_error() -> None:
    with stub_server(lambda r: (200, {}, b"")) as stub:
        url = stub.url  # the port is free again once the server has stopped
    credential = ClientSecretCredential("t", "c", "s", authority_host=url, timeout_s=5)
    with pytest.raises(ServiceRequestError):
        credential.get_token(AZURE_STORAGE_SCOPE)


def test_tenant_is_quoted_into_the_path() -> None:
    credential = ClientSecretCredential("../evil?x=1", "c", "s", authority_host="https://login.example/")
    assert credential.token_url == "https://login.example/..%2Fevil%3Fx%3D1/oauth2/v2.0/token"
