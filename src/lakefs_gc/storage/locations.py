"""Storage namespaces and lakeFS location URIs, parsed into one typed value.

lakeFS speaks in URIs (``s3://bucket/prefix``, ``https://<acct>.blob.core.windows.net/<container>/
<prefix>``, ``gs://bucket/prefix``, ``local://...``); object-store clients want a bucket/container and
a key. :class:`StorageLocation` is that split, plus the original spelling for messages.

``local://`` follows lakeFS's local blockstore (``pkg/block/local/adapter.go``) exactly:

* a *storage namespace* ``local://<ns>`` lives at ``path.Join(<local root>, <ns>)``, even if
  ``<ns>`` starts with ``/``;
* a *location returned by the API* is ``local://`` + an absolute path that already includes the
  root (``QualifiedKey.Format``). An absolute path under the root is taken as is; anything else is
  resolved under the root like a namespace (this is how a location we derive ourselves from a
  namespace, e.g. the uncommitted directory, resolves). The only ambiguous spelling is a
  namespace whose own path repeats the root's path, which lakeFS would nest twice.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, replace
from typing import Literal
from urllib.parse import unquote, urlsplit

from lakefs_gc.errors import ConfigError, StorageError

StorageKind = Literal["s3", "azure", "gs", "local"]

_S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


@dataclass(frozen=True)
class StorageLocation:
    """A bucket/container and key (or, for local files, an absolute path).

    ``key`` never starts with ``/``; a trailing ``/`` marks a directory-like prefix. For
    ``local`` locations ``container`` is empty and ``key`` is the absolute path.
    """

    kind: StorageKind
    container: str
    key: str
    account: str | None = None  # Azure storage account
    uri: str = ""  # the spelling it was parsed from (for messages)

    def join(self, relative: str) -> StorageLocation:
        """The location ``relative`` (a namespace-relative key such as ``_lakefs/<id>``) under this one."""
        base = self.key
        joined = relative.lstrip("/") if not base else base.rstrip("/") + "/" + relative.lstrip("/")
        if self.kind == "local" and not joined.startswith("/"):
            joined = "/" + joined
        return replace(self, key=joined, uri=_join_uri(self.uri or self.display(), relative))

    @property
    def fs_path(self) -> str:
        """The path a ``pyarrow.fs`` filesystem for this location expects (no trailing ``/``)."""
        if self.kind == "local":
            return self.key.rstrip("/") or "/"
        return f"{self.container}/{self.key}".rstrip("/")

    def display(self) -> str:
        """A canonical URI for messages and reports."""
        if self.kind == "local":
            return "file://" + self.key
        if self.kind == "azure":
            return f"https://{self.account}.blob.core.windows.net/{self.container}/{self.key}"
        return f"{self.kind}://{self.container}/{self.key}"

    def __str__(self) -> str:
        return self.uri or self.display()


def uri_scheme(uri: str) -> str:
    """The scheme exactly as spelled (``urlsplit`` lower-cases it), or ``""``."""
    match = _SCHEME.match(uri)
    return match.group(1) if match and "/" not in match.group(1) else ""


def parse_storage_namespace(namespace: str, *, local_root: str | None = None) -> StorageLocation:
    """Parse a repository's storage namespace (``local://`` is always under ``local_root``)."""
    if uri_scheme(namespace).lower() == "local":
        rest = _after_scheme(namespace)
        path = _under_root(rest, local_root, namespace)
        return StorageLocation("local", "", _dir(path, namespace), uri=namespace)
    return parse_location(namespace, local_root=local_root)


def parse_location(uri: str, *, local_root: str | None = None) -> StorageLocation:
    """Parse a full location URI as returned by the lakeFS API (or a local path)."""
    scheme = uri_scheme(uri).lower()
    if scheme in _S3_SCHEMES or scheme == "gs":
        return _parse_bucket_uri(uri, "gs" if scheme == "gs" else "s3")
    if scheme in ("http", "https"):
        return _parse_azure_blob_url(uri)
    if scheme in ("abfs", "abfss", "wasb", "wasbs"):
        return _parse_abfs(uri)
    if scheme == "local":
        return _parse_local_location(uri, local_root)
    if scheme == "file":
        parts = urlsplit(uri)
        if parts.netloc not in ("", "localhost"):
            raise StorageError(f"file URI with a remote host is not supported: {uri}")
        return StorageLocation("local", "", _abs_path(unquote(parts.path), uri), uri=uri)
    if scheme == "" and uri.startswith("/"):
        return StorageLocation("local", "", _abs_path(uri, uri), uri=uri)
    raise StorageError(
        f"unsupported storage location {uri!r} (expected s3://, gs://, https:// (Azure), "
        "abfs://, local://, file:// or an absolute path)"
    )


def _split_authority(uri: str) -> tuple[str, str]:
    """``scheme://authority/rest`` split by hand: lakeFS appends raw object keys to namespaces,
    so ``#``, ``?`` and ``%`` in the rest are part of the key, never URL syntax (``urlsplit``
    would cut ``a#b`` to ``a`` and point at another object)."""
    rest = uri.split("://", 1)[1] if "://" in uri else ""
    authority, _, path = rest.partition("/")
    return authority, path


def _parse_bucket_uri(uri: str, kind: StorageKind) -> StorageLocation:
    bucket, key = _split_authority(uri)
    if not bucket:
        raise StorageError(f"storage location {uri!r} has no bucket")
    return StorageLocation(kind, bucket, key.lstrip("/"), uri=uri)


def _parse_azure_blob_url(uri: str) -> StorageLocation:
    """``https://<acct>.blob.<domain>/<container>/<key>``, or path-style ``http://host:port/<acct>/
    <container>/<key>`` as used by Azurite."""
    authority, path = _split_authority(uri)
    host = authority.rsplit("@", 1)[-1].split(":", 1)[0].lower()
    segments = path.lstrip("/").split("/")
    if ".blob." in host:
        account, rest = host.split(".", 1)[0], segments
    else:
        account, rest = segments[0], segments[1:]
    if not account or not rest or not rest[0]:
        raise StorageError(f"Azure location {uri!r} must name an account and a container")
    return StorageLocation("azure", rest[0], "/".join(rest[1:]), account=account, uri=uri)


def _parse_abfs(uri: str) -> StorageLocation:
    parts = urlsplit(uri)
    container, _, host = parts.netloc.partition("@")
    if not container or not host:
        raise StorageError(f"Azure location {uri!r} must look like abfs://<container>@<account>.dfs...")
    account = host.split(".", 1)[0]
    return StorageLocation("azure", container, parts.path.lstrip("/"), account=account, uri=uri)


def _parse_local_location(uri: str, local_root: str | None) -> StorageLocation:
    rest = _after_scheme(uri)
    if rest.startswith("/"):
        clean = posixpath.normpath(rest)
        if local_root is None or _is_under(clean, posixpath.normpath(local_root)):
            return StorageLocation("local", "", _dir(clean, rest), uri=uri)
    return StorageLocation("local", "", _dir(_under_root(rest, local_root, uri), rest), uri=uri)


def _after_scheme(uri: str) -> str:
    rest = uri.split(":", 1)[1]
    return rest[2:] if rest.startswith("//") else rest


def _under_root(rest: str, local_root: str | None, uri: str) -> str:
    """``path.Join(root, rest)`` and refuse anything escaping the root (lakeFS verifyRelPath)."""
    if local_root is None:
        raise ConfigError(
            f"{uri!r} is a lakeFS local:// location: pass --local-root (storage.local_root), "
            "lakeFS's blockstore.local.path, to resolve it"
        )
    root = posixpath.normpath(local_root)
    path = posixpath.normpath(root + "/" + rest)
    if not _is_under(path, root):
        raise StorageError(f"{uri!r} resolves outside the local blockstore root {root}")
    return path


def _is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _abs_path(path: str, uri: str) -> str:
    if not path.startswith("/"):
        raise ConfigError(f"local location {uri!r} must be an absolute path")
    return _dir(posixpath.normpath(path), path)


def _dir(clean: str, original: str) -> str:
    """Keep the directory marker (trailing ``/``) that ``normpath`` removes."""
    return clean + "/" if original.endswith("/") and clean != "/" else clean


def _join_uri(base: str, relative: str) -> str:
    return base.rstrip("/") + "/" + relative.lstrip("/")
