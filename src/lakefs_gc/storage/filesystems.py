"""``pyarrow.fs`` filesystems for storage locations (reading exports, ranges and listings).

Backends are constructed lazily and only from explicit options: nothing here reads the process
environment itself (pyarrow's own default credential chains still apply when no credentials are
given, which is what operators on cloud machines expect).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from lakefs_gc.errors import StorageError
from lakefs_gc.storage.locations import StorageLocation

if TYPE_CHECKING:
    import pyarrow.fs as pafs


class S3Options(BaseModel):
    """How to reach S3 or an S3-compatible store (MinIO, moto)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    endpoint_url: str | None = Field(
        default=None, description="Custom endpoint such as http://127.0.0.1:9000; None for AWS."
    )
    region: str | None = Field(default=None, description="Bucket region; None lets pyarrow resolve it.")
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None
    session_token: SecretStr | None = None
    force_path_style: bool = Field(
        default=True,
        description="Path-style addressing, the Scala client's default; needed by most S3-compatible stores.",
    )
    anonymous: bool = False


class AzureOptions(BaseModel):
    """How to reach Azure Blob Storage (or Azurite)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    account_key: SecretStr | None = Field(default=None, description="Shared key; None = default credential.")
    sas_token: SecretStr | None = None
    client_id: str | None = None
    client_secret: SecretStr | None = None
    tenant_id: str | None = None
    blob_endpoint: str | None = Field(
        default=None,
        description="Override of the blob service, e.g. http://127.0.0.1:10000 for Azurite.",
    )


class StorageOptions(BaseModel):
    """Everything needed to open any location of a repository."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    s3: S3Options = S3Options()
    azure: AzureOptions = AzureOptions()
    local_root: str | None = Field(
        default=None,
        description="lakeFS blockstore.local.path; required to resolve local:// namespaces.",
    )


def filesystem_for(location: StorageLocation, options: StorageOptions) -> tuple[pafs.FileSystem, str]:
    """A filesystem able to read ``location`` and the path of ``location`` inside it."""
    if location.kind == "local":
        import pyarrow.fs as pafs

        return pafs.LocalFileSystem(), location.fs_path
    if location.kind == "s3":
        return _s3_filesystem(options.s3), location.fs_path
    if location.kind == "azure":
        return _azure_filesystem(location, options.azure), location.fs_path
    raise StorageError(f"storage kind {location.kind!r} is not supported yet ({location})")


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None


def _s3_filesystem(options: S3Options) -> pafs.FileSystem:
    import pyarrow.fs as pafs

    kwargs: dict[str, object] = {
        "region": options.region,
        "force_virtual_addressing": not options.force_path_style,
        "anonymous": options.anonymous,
    }
    if options.endpoint_url:
        parts = urlsplit(options.endpoint_url)
        kwargs["endpoint_override"] = parts.netloc or parts.path
        kwargs["scheme"] = parts.scheme or "https"
    if options.access_key_id:
        kwargs["access_key"] = options.access_key_id
        kwargs["secret_key"] = _secret(options.secret_access_key)
        kwargs["session_token"] = _secret(options.session_token)
    try:
        return pafs.S3FileSystem(**kwargs)
    except (ValueError, OSError) as e:
        raise StorageError(f"cannot configure S3 access: {e}") from e


def _azure_filesystem(location: StorageLocation, options: AzureOptions) -> pafs.FileSystem:
    import pyarrow.fs as pafs

    if not location.account:
        raise StorageError(f"Azure location {location} does not name a storage account")
    kwargs: dict[str, object] = {
        "account_key": _secret(options.account_key),
        "sas_token": _secret(options.sas_token),
        "client_id": options.client_id,
        "client_secret": _secret(options.client_secret),
        "tenant_id": options.tenant_id,
    }
    if options.blob_endpoint:
        parts = urlsplit(options.blob_endpoint)
        for service in ("blob", "dfs"):
            kwargs[f"{service}_storage_authority"] = parts.netloc
            kwargs[f"{service}_storage_scheme"] = parts.scheme or "https"
    try:
        return pafs.AzureFileSystem(location.account, **{k: v for k, v in kwargs.items() if v is not None})
    except (ValueError, OSError) as e:
        raise StorageError(f"cannot configure Azure access for account {location.account}: {e}") from e
