"""Committed address normalisation, exactly as the Scala client's ``filterAddresses``
(docs/formats/lakefs-ranges.md, "Committed addresses").

The committed side of the anti-join must speak the listing's language: namespace-relative keys
(``data/<slice>/<xid>``, legacy root GUIDs). Entries in ranges are RELATIVE (already such a key),
FULL (a URI: inside the namespace it is stripped to a key; outside, such as imports, it refers to
nothing GC may delete and is dropped), or BY_PREFIX_DEPRECATED (old commits: bare GUIDs without a
scheme are relative).

Compatibility over cleverness: the namespace prefix test is an **exact string prefix** and the
scheme test uses the namespace's scheme as spelled. A FULL address inside the namespace but spelled
differently (``s3a://`` vs ``s3://``, doubled ``/``) is kept verbatim and matches no listed key
(lakefs-gc-api.md, "Pitfalls of lakeFS's Scala client", 8); the server stores ``<ns>/data/...``
as RELATIVE, so this is rare.
"""

from __future__ import annotations

from lakefs_gc.errors import ConfigError, StorageError
from lakefs_gc.gc.ports import RepositoryInfo
from lakefs_gc.storage.locations import StorageLocation, parse_storage_namespace, uri_scheme

#: graveler ``AddressType.RELATIVE`` (``catalog.proto``: 0 BY_PREFIX_DEPRECATED, 1 RELATIVE, 2 FULL)
_RELATIVE = 1
#: blockstore type (GET /config) → the kind of storage location it serves
_BLOCKSTORE_KINDS = {"s3": "s3", "azure": "azure", "local": "local", "gs": "gs"}


def namespace_prefix(storage_namespace: str) -> str:
    """The raw storage namespace with a trailing ``/`` forced (the SDK-form namespace)."""
    return storage_namespace if storage_namespace.endswith("/") else storage_namespace + "/"


def normalize_committed_address(address: str, address_type: int | str, namespace: str) -> str | None:
    """The namespace-relative key ``address`` refers to, or ``None`` if GC must ignore it.

    ``address_type`` is an ``AddressType`` (an int enum) or its name; ``namespace`` is the raw
    ``storage_namespace`` of the repository (a trailing ``/`` is added if missing).

    * RELATIVE → kept unchanged;
    * starts with the namespace → the namespace is stripped;
    * does not start with ``<namespace scheme>:`` (e.g. a schemeless deprecated GUID) → kept;
    * otherwise (a URI outside the namespace) → dropped.
    """
    if _is_relative(address_type):
        return address
    ns = namespace_prefix(namespace)
    if address.startswith(ns):
        return address[len(ns) :]
    if not address.startswith(uri_scheme(ns) + ":"):
        return address
    return None


def _is_relative(address_type: int | str) -> bool:
    if isinstance(address_type, str):
        return address_type.upper() == "RELATIVE"
    return int(address_type) == _RELATIVE


def collectable_namespace(
    repo: RepositoryInfo, blockstore_type: str, local_root: str | None
) -> StorageLocation:
    """``repo``'s storage namespace, parsed, when a GC may collect it: a writable repository whose
    namespace is of the kind of storage lakeFS says serves it (``blockstore_type``, GET /config),
    and one we support; else the error that says which of these it is not."""
    if repo.read_only:
        raise ConfigError(f"repository {repo.id!r} is read-only; lakeFS refuses to prepare a GC for it")
    namespace = parse_storage_namespace(repo.storage_namespace, local_root=local_root)
    expected = _BLOCKSTORE_KINDS.get(blockstore_type)
    if expected is None:
        raise StorageError(
            f"repository {repo.id!r} lives on a {blockstore_type!r} blockstore: nothing a GC can collect"
        )
    if expected != namespace.kind:
        raise StorageError(
            f"repository {repo.id!r}: namespace {repo.storage_namespace} is {namespace.kind}, "
            f"but lakeFS says its blockstore is {blockstore_type}"
        )
    if namespace.kind == "gs":
        raise StorageError("Google Cloud Storage namespaces are not supported yet")
    return namespace
