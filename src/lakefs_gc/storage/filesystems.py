"""``pyarrow.fs`` filesystems for storage locations (reading exports, ranges and listings).

Backends are constructed lazily and only from explicit options: nothing here reads the process
environment itself (pyarrow's own default credential chains still apply when no credentials are
given, which is what operators on cloud machines expect).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from lakefs_gc.errors import StorageError
from lakefs_gc.storage.locations import StorageLocation

if TYPE_CHECKING:
    import pyarrow.fs as pafs

#: Azurite's well-known development account, what ``UseDevelopmentStorage=true`` means (public).
_DEV_ACCOUNT = "devstoreaccount1"
_DEV_ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


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
    """How to reach Azure Blob Storage (or Azurite).

    Credentials are tried in this order, the first one given wins: ``connection_string`` (its
    ``AccountKey`` or ``SharedAccessSignature``), ``account_key``, ``sas_token``, the service principal
    (``client_id`` + ``client_secret`` + ``tenant_id``); with none of them the object-store clients go
    anonymous and pyarrow uses its default credential chain.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    connection_string: SecretStr | None = Field(
        default=None,
        description=(
            "An Azure Storage connection string (AccountName, AccountKey or SharedAccessSignature, "
            "BlobEndpoint or DefaultEndpointsProtocol/EndpointSuffix, or UseDevelopmentStorage=true). "
            "Secret because it usually carries the account key. Its AccountName must be the account "
            "the storage namespace names; an explicit blob_endpoint overrides its endpoint."
        ),
    )
    account_key: SecretStr | None = Field(default=None, description="Shared key; None = default credential.")
    sas_token: SecretStr | None = None
    client_id: str | None = None
    client_secret: SecretStr | None = None
    tenant_id: str | None = None
    blob_endpoint: str | None = Field(
        default=None,
        description=(
            "Override of the blob service, e.g. http://127.0.0.1:10000 for Azurite. Without a path, and "
            "unless the host starts with '<account>.', the account is addressed path-style "
            "(http://host:port/<account>), as pyarrow does."
        ),
    )


@dataclass(frozen=True)
class AzureConnectionString:
    """The parts of an Azure Storage connection string that lakefs-gc uses."""

    account_name: str | None = None
    account_key: str | None = None
    sas_token: str | None = None
    blob_endpoint: str | None = None

    def __repr__(self) -> str:  # never print the key or the SAS
        return (
            f"AzureConnectionString(account_name={self.account_name!r}, blob_endpoint={self.blob_endpoint!r})"
        )


def parse_connection_string(value: str) -> AzureConnectionString:
    """Parse ``Key=Value;...`` (keys case-insensitive; values may contain ``=``, as base64 keys do).

    Errors never quote the string: it usually contains the account key.
    """
    settings: dict[str, str] = {}
    for part in value.split(";"):
        if not part.strip():
            continue
        name, sep, setting = part.partition("=")
        if not sep or not name.strip():
            raise StorageError("the Azure connection string is malformed (expected Key=Value;...)")
        settings[name.strip().lower()] = setting.strip()
    if settings.get("usedevelopmentstorage", "").lower() == "true":
        return AzureConnectionString(
            account_name=_DEV_ACCOUNT,
            account_key=_DEV_ACCOUNT_KEY,
            blob_endpoint=f"http://127.0.0.1:10000/{_DEV_ACCOUNT}",
        )
    account = settings.get("accountname") or None
    endpoint = settings.get("blobendpoint") or None
    if endpoint is None and account is not None:
        protocol = settings.get("defaultendpointsprotocol") or "https"
        suffix = settings.get("endpointsuffix") or "core.windows.net"
        endpoint = f"{protocol}://{account}.blob.{suffix}"
    return AzureConnectionString(
        account_name=account,
        account_key=settings.get("accountkey") or None,
        sas_token=settings.get("sharedaccesssignature") or None,
        blob_endpoint=endpoint,
    )


def azure_account_url(location: StorageLocation, options: AzureOptions) -> str:
    """The blob service URL of ``location``'s account: ``blob_endpoint``, else the connection string's
    endpoint, else ``https://<account>.blob.core.windows.net``.

    An endpoint without a path whose host does not start with ``<account>.`` gets ``/<account>``
    appended (path-style, as Azurite serves accounts), which is exactly where pyarrow's
    ``blob_storage_authority`` points too, so both clients always reach the same account.
    """
    account = _azure_account(location, options)
    connection = _connection(options)
    endpoint = options.blob_endpoint or (connection.blob_endpoint if connection else None)
    if not endpoint:
        return f"https://{account}.blob.core.windows.net"
    parts = urlsplit(endpoint)
    if not parts.netloc:
        raise StorageError(f"Azure blob endpoint {endpoint!r} is not a URL (expected scheme://host[:port])")
    path = parts.path.rstrip("/")
    if path and path != "/" + account:
        raise StorageError(
            f"Azure blob endpoint {endpoint!r} names another account than {location} ({account!r})"
        )
    if not path and not parts.netloc.lower().startswith(account.lower() + "."):
        path = "/" + account
    return f"{parts.scheme or 'https'}://{parts.netloc}{path}"


def _connection(options: AzureOptions) -> AzureConnectionString | None:
    return (
        parse_connection_string(_secret(options.connection_string) or "")
        if options.connection_string
        else None
    )


def _azure_account(location: StorageLocation, options: AzureOptions) -> str:
    """The location's account; a connection string for another account is refused, because it would
    point reads and deletes at a different account than the namespace names."""
    if not location.account:
        raise StorageError(f"Azure location {location} does not name a storage account")
    connection = _connection(options)
    if connection and connection.account_name and connection.account_name.lower() != location.account.lower():
        raise StorageError(
            f"the Azure connection string is for account {connection.account_name!r}, "
            f"but {location} is in account {location.account!r}"
        )
    return location.account


class StorageOptions(BaseModel):
    """Everything needed to open any location of a repository."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    s3: S3Options = S3Options()
    azure: AzureOptions = AzureOptions()
    local_root: str | None = Field(
        default=None,
        description="lakeFS blockstore.local.path; required to resolve local:// namespaces.",
    )


def is_not_found(error: OSError) -> bool:
    """True when a ``pyarrow.fs`` read failed because the object does not exist.

    Local files raise ``FileNotFoundError``; the S3 and Azure filesystems raise a plain ``OSError``
    whose message says so.
    """
    if isinstance(error, FileNotFoundError):
        return True
    message = str(error).lower()
    return "not found" in message or "does not exist" in message


def is_misread(error: BaseException) -> bool:
    """True when pyarrow's S3 read failed on an error answer larger than the bytes it asked for.

    pyarrow reads an object into a buffer of the object's size; when S3 answers a GET of an object
    smaller than its error document (about 200-300 bytes: a manifest's checksum, a lease, a marker)
    with a 503 SlowDown or a 500, the AWS SDK cannot write that answer into the buffer and reports
    ``INTERNAL_FAILURE ... Failed to flush response stream``, which it does not retry. It is a
    throttled or failed request like any other, and is retried by :mod:`lakefs_gc.storage.reads`.
    """
    return "Failed to flush response stream" in str(error)


def file_exists(fs: pafs.FileSystem, path: str) -> bool:
    """Whether ``path`` is a file: ``get_file_info(path).type == File``, in one ``HEAD`` on an
    object store where the file is there or missing. ``get_file_info`` of a missing file also
    lists the path as a directory (a second request each time a marker or record is looked for
    and is not there yet; moto answers it by scanning the whole bucket, 0.57 s at 1M objects).
    Anything else (a directory, an error) is asked of ``get_file_info``, so the answer is its
    answer, and an error is raised (a ``pyarrow`` ``OSError``), never read as "missing"."""
    import pyarrow.fs as pafs

    try:
        with fs.open_input_file(path):
            return True
    except OSError as e:
        if is_not_found(e):
            return False
    return bool(fs.get_file_info(path).type == pafs.FileType.File)


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


#: attempts per S3 request made through ``pyarrow.fs`` (the first and up to 10 retries, as boto3's)
S3_ATTEMPTS = 11


def _s3_filesystem(options: S3Options) -> pafs.FileSystem:
    import pyarrow.fs as pafs

    kwargs: dict[str, object] = {
        "region": options.region,
        "force_virtual_addressing": not options.force_path_style,
        "anonymous": options.anonymous,
        # a write smaller than a part (records, spool files, report parts) goes as one PutObject
        # instead of CreateMultipartUpload + UploadPart + Complete: a third of the requests, and a
        # process killed mid-write leaves no incomplete upload behind (billed until a lifecycle rule
        # aborts it). An error such as a missing bucket then surfaces at write or close, inside the
        # same ``with``, where every writer already names the location.
        "allow_delayed_open": True,
        # throttling (503 SlowDown) and transient errors retried with backoff as often as boto3's
        # clients retry them (storage/clients.py, S3_RETRIES), not pyarrow's default 3 attempts: a
        # read that fails here rejects an inventory delivery or fails a mark
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=S3_ATTEMPTS),
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

    account = _azure_account(location, options)
    kwargs: dict[str, object] = _azure_credentials(options)
    if options.blob_endpoint or options.connection_string:
        url = urlsplit(azure_account_url(location, options))
        # pyarrow prepends the account to an authority starting with "." and addresses it
        # path-style otherwise (arrow/cpp/src/arrow/filesystem/azurefs.cc BuildBaseUrl)
        host = url.netloc
        authority = host[len(account) :] if host.lower().startswith(account.lower() + ".") else host
        for service in ("blob", "dfs"):
            kwargs[f"{service}_storage_authority"] = authority
            kwargs[f"{service}_storage_scheme"] = url.scheme
    try:
        return pafs.AzureFileSystem(account, **{k: v for k, v in kwargs.items() if v is not None})
    except (ValueError, OSError) as e:
        raise StorageError(f"cannot configure Azure access for account {account}: {e}") from e


def _azure_credentials(options: AzureOptions) -> dict[str, object]:
    """pyarrow's credential arguments, in the precedence of :class:`AzureOptions` (pyarrow takes only
    one of account key and SAS token)."""
    connection = _connection(options)
    if connection and connection.account_key:
        return {"account_key": connection.account_key}
    if connection and connection.sas_token:
        return {"sas_token": connection.sas_token}
    if options.account_key is not None:
        return {"account_key": _secret(options.account_key)}
    if options.sas_token is not None:
        return {"sas_token": _secret(options.sas_token)}
    return {
        "client_id": options.client_id,
        "client_secret": _secret(options.client_secret),
        "tenant_id": options.tenant_id,
    }
