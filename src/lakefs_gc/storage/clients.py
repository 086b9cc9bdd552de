"""SDK clients for the object-store operations pyarrow does not offer: bulk deletes (and copies).

``boto3`` and ``azure-storage-blob`` are imported lazily, so importing this module costs nothing
on a Spark driver that never deletes. Both clients are built only from explicit options; where
none are given, the SDKs' own default chains apply (boto3's region and credential chain), as
they do for pyarrow in :mod:`lakefs_gc.storage.filesystems`.

Service principals are served by :class:`ClientSecretCredential`, a minimal OAuth2
client-credentials ``TokenCredential``, because ``azure-identity`` is not a dependency (it would
pull MSAL and its own HTTP stack onto every executor for one POST request).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from pydantic import SecretStr

from lakefs_gc.errors import StorageError
from lakefs_gc.storage.filesystems import (
    AzureOptions,
    S3Options,
    azure_account_url,
    parse_connection_string,
)
from lakefs_gc.storage.locations import StorageLocation

#: botocore retries: standard mode (throttling and transient errors, exponential backoff with jitter).
S3_RETRIES = {"mode": "standard", "max_attempts": 10}
#: The sweep's deletes: no botocore retries. The deleter retries throttled and transient failures
#: itself (:mod:`lakefs_gc.storage.deleters`), so that every SlowDown reaches its adaptive
#: concurrency limit (botocore would retry it unseen, up to 10 times per request) and the two
#: retry loops do not multiply. (botocore's ``max_attempts`` counts retries, ``total_max_attempts``
#: attempts: ``max_attempts=1`` would still retry once.)
S3_DELETE_RETRIES = {"mode": "standard", "total_max_attempts": 1}
#: Used only when neither the options nor boto3's chain (env, ~/.aws/config) name a region.
S3_FALLBACK_REGION = "us-east-1"
AZURE_AUTHORITY_HOST = "https://login.microsoftonline.com"
AZURE_STORAGE_SCOPE = "https://storage.azure.com/.default"
#: A cached token is renewed this many seconds before it expires.
TOKEN_REFRESH_MARGIN_S = 300


def s3_client(options: S3Options, *, retries: dict[str, Any] | None = None) -> Any:
    """A boto3 S3 client for ``options`` (one per task or thread: each gets its own boto3 session,
    because the default session is not safe to share while clients are being created).
    ``retries``: botocore's retry configuration, default :data:`S3_RETRIES`."""
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError

    session = boto3.session.Session()
    config = Config(
        retries=retries or S3_RETRIES,
        s3={"addressing_style": "path" if options.force_path_style else "auto"},
        signature_version=UNSIGNED if options.anonymous else None,
    )
    kwargs: dict[str, Any] = {}
    if options.access_key_id and not options.anonymous:
        kwargs["aws_access_key_id"] = options.access_key_id
        kwargs["aws_secret_access_key"] = _secret(options.secret_access_key)
        kwargs["aws_session_token"] = _secret(options.session_token)
    try:
        return session.client(
            "s3",
            endpoint_url=options.endpoint_url,
            region_name=options.region or session.region_name or S3_FALLBACK_REGION,
            config=config,
            **kwargs,
        )
    except (BotoCoreError, ValueError) as e:
        raise StorageError(f"cannot configure S3 access: {e}") from e


def azure_container_client(
    location: StorageLocation, options: AzureOptions, *, retry_total: int | None = None
) -> Any:
    """An ``azure.storage.blob.ContainerClient`` for ``location``'s container.

    Credentials in the order of :class:`AzureOptions`: connection string, account key, SAS token,
    service principal, else anonymous. The account URL is :func:`azure_account_url`, the same
    account pyarrow reaches. ``retry_total``: the SDK's retries (default: its own, 3 with backoff
    from 15 s); the sweep passes 0 and retries itself, see :data:`S3_DELETE_RETRIES`.
    """
    from azure.storage.blob import ContainerClient

    url = azure_account_url(location, options)
    credential = _azure_credential(location, options)
    extra: dict[str, Any] = {} if retry_total is None else {"retry_total": retry_total}
    try:
        return ContainerClient(url, location.container, credential=credential, **extra)
    except ValueError as e:
        raise StorageError(f"cannot configure Azure access for {location}: {e}") from e


def _azure_credential(location: StorageLocation, options: AzureOptions) -> Any:
    account = location.account
    connection = parse_connection_string(_secret(options.connection_string) or "")
    if connection.account_key:
        return {"account_name": account, "account_key": connection.account_key}
    if connection.sas_token:
        return connection.sas_token
    if options.account_key is not None:
        return {"account_name": account, "account_key": _secret(options.account_key)}
    if options.sas_token is not None:
        return _secret(options.sas_token)
    principal = (options.client_id, options.client_secret, options.tenant_id)
    if all(p is not None for p in principal):
        assert options.client_id and options.client_secret and options.tenant_id
        return ClientSecretCredential(
            options.tenant_id, options.client_id, options.client_secret.get_secret_value()
        )
    if any(p is not None for p in principal):
        raise StorageError("Azure service principal needs all of client_id, client_secret and tenant_id")
    return None


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None


class ClientSecretCredential:
    """An ``azure.core.credentials.TokenCredential`` for a service principal with a client secret.

    OAuth2 client-credentials flow against ``<authority_host>/<tenant>/oauth2/v2.0/token``. Tokens
    are cached per scope set until :data:`TOKEN_REFRESH_MARGIN_S` before they expire, and the cache
    is shared by the threads of one client. Failures raise what azure-core expects of a credential:
    ``ClientAuthenticationError`` when Entra ID refuses (never quoting the secret),
    ``ServiceRequestError`` when it cannot be reached (the storage pipeline retries those).
    """

    def __init__(
        self,
        tenant_id: str,
        client_id: str,
        client_secret: str,
        *,
        authority_host: str = AZURE_AUTHORITY_HOST,
        timeout_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.tenant_id = tenant_id
        self.client_id = client_id
        self._secret = client_secret
        quoted_tenant = urllib.parse.quote(tenant_id, safe="")
        self.token_url = f"{authority_host.rstrip('/')}/{quoted_tenant}/oauth2/v2.0/token"
        self._timeout_s = timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, Any] = {}  # scope -> AccessToken

    def __repr__(self) -> str:
        return f"ClientSecretCredential(tenant_id={self.tenant_id!r}, client_id={self.client_id!r})"

    def get_token(
        self,
        *scopes: str,
        claims: str | None = None,
        tenant_id: str | None = None,
        enable_cae: bool = False,
        **kwargs: Any,
    ) -> Any:
        """An ``AccessToken`` for ``scopes`` (default: Azure Storage), from the cache if still fresh."""
        scope = " ".join(scopes) or AZURE_STORAGE_SCOPE
        with self._lock:
            cached = self._cache.get(scope)
            if cached is not None and cached.expires_on - TOKEN_REFRESH_MARGIN_S > self._clock():
                return cached
            token = self._request(scope)
            self._cache[scope] = token
            return token

    def close(self) -> None:
        """Nothing to release (one urllib request per token); part of the credential protocol."""

    def _request(self, scope: str) -> Any:
        from azure.core.credentials import AccessToken
        from azure.core.exceptions import ClientAuthenticationError, ServiceRequestError

        form = urllib.parse.urlencode(
            {
                "grant_type": "client_credentials",
                "client_id": self.client_id,
                "client_secret": self._secret,
                "scope": scope,
            }
        ).encode()
        request = urllib.request.Request(self.token_url, data=form, method="POST")
        request.add_header("Content-Type", "application/x-www-form-urlencoded")
        request.add_header("Accept", "application/json")
        now = self._clock()
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as e:
            raise ClientAuthenticationError(
                f"Entra ID refused client {self.client_id} in tenant {self.tenant_id}: "
                f"HTTP {e.code} {_aad_error(e)}"
            ) from None  # the chained error would carry the request, with the secret in it
        except (urllib.error.URLError, OSError) as e:
            raise ServiceRequestError(f"cannot reach {self.token_url}: {e}") from e
        except ValueError as e:
            raise ClientAuthenticationError(f"{self.token_url} answered with invalid JSON: {e}") from e
        try:
            return AccessToken(str(body["access_token"]), int(now + float(body["expires_in"])))
        except (KeyError, TypeError, ValueError) as e:
            raise ClientAuthenticationError(f"{self.token_url} answered without a usable token: {e}") from e


def _aad_error(error: urllib.error.HTTPError) -> str:
    """``error: error_description`` from an Entra ID error body, or the HTTP reason."""
    try:
        body = json.loads(error.read())
        return f"{body.get('error', '')}: {body.get('error_description', '')}".strip(": ")
    except (ValueError, OSError, AttributeError):
        return str(error.reason)
