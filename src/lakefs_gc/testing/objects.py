"""Objects on branches: uploads, copies, signed physical addresses, staging, deletes, listing, reads."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from lakefs_gc.lakefs.xid import new_descending_xid, new_xid, xid_time
from lakefs_gc.sstable import AddressType, Entry
from lakefs_gc.sstable.catalog import decode_entry, encode_entry, epoch_ns
from lakefs_gc.testing.context import (
    BadRequest,
    Gone,
    NotFound,
    NotImplementedByServer,
    PreconditionFailed,
    ServerContext,
)
from lakefs_gc.testing.refs import Refs
from lakefs_gc.testing.store import RepositoryRow

DEFAULT_CONTENT_TYPE = "application/octet-stream"


class PathProvider:
    """``data/<slice>/<xid>`` where slices are descending xids rotated hourly or every N objects."""

    def __init__(self, ctx: ServerContext) -> None:
        self._ctx = ctx
        self._lock = threading.Lock()
        self._slice = ""
        self._slice_started: datetime | None = None
        self._count = 0

    def new_path(self) -> str:
        now = self._ctx.now()
        settings = self._ctx.settings
        with self._lock:
            expired = self._slice_started is None or now - self._slice_started >= settings.slice_interval
            if expired or self._count >= settings.slice_objects:
                self._slice, self._slice_started, self._count = new_descending_xid(now), now, 0
            self._count += 1
            return f"data/{self._slice}/{new_xid(now)}"


@dataclass(frozen=True)
class ObjectView:
    path: str
    entry: Entry


class Objects:
    def __init__(self, refs: Refs) -> None:
        self.refs = refs
        self.ctx = refs.ctx
        self.store = refs.store
        self.paths = PathProvider(refs.ctx)

    # -- writes ---------------------------------------------------------------------------
    def upload(
        self,
        repo: str,
        branch: str,
        path: str,
        data: bytes,
        *,
        content_type: str,
        metadata: dict[str, str],
        if_none_match: str | None,
    ) -> ObjectView:
        """lakeFS's UploadObject: the data at a new address; content type (default
        ``application/octet-stream``) and user metadata are part of the entry and its identity."""
        repository = self.refs.repository(repo)
        self.refs.branch(repo, branch)
        _check_path(path)
        self._check_absent(repo, branch, path, if_none_match)
        address = self.paths.new_path()
        self.ctx.namespace_store(repository.storage_namespace).put(address, data)
        entry = Entry(
            address=address,
            address_type=AddressType.RELATIVE,
            size=len(data),
            etag=hashlib.md5(data).hexdigest(),
            last_modified_ns=epoch_ns(self.ctx.now()),
            content_type=content_type or DEFAULT_CONTENT_TYPE,
            metadata=dict(metadata),
        )
        self.store.stage(repo, branch, path, encode_entry(entry))
        return ObjectView(path, entry)

    def copy(self, repo: str, branch: str, path: str, src_ref: str, src_path: str) -> ObjectView:
        """lakeFS's CopyObject (``Catalog.CopyEntry``, lakeFS 1.79 and later): the source entry,
        committed or staged, with its data copied to a *new* physical address written now; size,
        checksum, content type and metadata are the source's. No address is ever shared, so a
        copy keeps nothing of its source alive (docs/formats/lakefs-object-copy.md)."""
        repository = self.refs.repository(repo)
        self.refs.branch(repo, branch)
        _check_path(path)
        source = self.stat(repo, src_ref or branch, src_path)
        data = self._data(repository, source)
        address = self.paths.new_path()
        self.ctx.namespace_store(repository.storage_namespace).put(address, data)
        entry = replace(
            source.entry,
            address=address,
            address_type=AddressType.RELATIVE,
            last_modified_ns=epoch_ns(self.ctx.now()),
            content_type=source.entry.content_type or DEFAULT_CONTENT_TYPE,
        )
        self.store.stage(repo, branch, path, encode_entry(entry))
        return ObjectView(path, entry)

    def update_user_metadata(self, repo: str, branch: str, path: str, metadata: dict[str, str]) -> None:
        """lakeFS's UpdateObjectUserMetadata: the branch's entry with its metadata replaced, staged
        (a committed entry becomes a staged change: the identity includes the metadata)."""
        view = self.stat(repo, self.refs.branch(repo, branch).id, path)
        entry = replace(view.entry, metadata=dict(metadata))
        self.store.stage(repo, branch, path, encode_entry(entry))

    def physical_address(self, repo: str, branch: str, path: str) -> str:
        """A signed address (``data/<slice>/<xid>,<sig>``) valid for the grace period."""
        repository = self.refs.repository(repo)
        self.refs.branch(repo, branch)
        address = self.paths.new_path()
        signed = f"{address},{self._signature(repo, branch, path, address)}"
        return self.ctx.namespace_store(repository.storage_namespace).qualified(signed)

    def link(
        self, repo: str, branch: str, path: str, body: dict[str, Any], if_none_match: str | None = None
    ) -> ObjectView:
        repository = self.refs.repository(repo)
        self.refs.branch(repo, branch)
        _check_path(path)
        self._check_absent(repo, branch, path, if_none_match)
        staging = body.get("staging") or {}
        physical = str(staging.get("physical_address") or "")
        relative, kind = self._normalize(repository, physical)
        if kind is AddressType.RELATIVE and relative.startswith("data/"):
            self._verify_link(repo, branch, path, relative)
        entry = Entry(
            address=relative,
            address_type=kind,
            size=int(body.get("size_bytes", 0)),
            etag=str(body.get("checksum", "")),
            last_modified_ns=epoch_ns(self.ctx.now()),
            content_type=str(body.get("content_type") or DEFAULT_CONTENT_TYPE),
            metadata=dict(body.get("user_metadata") or {}),
        )
        self.store.stage(repo, branch, path, encode_entry(entry))
        return ObjectView(path, entry)

    def delete(self, repo: str, branch: str, path: str) -> None:
        repository = self.refs.repository(repo)
        head = self.refs.commit(repo, self.refs.branch(repo, branch).commit_id)
        committed = self._committed(repository, head.meta_range_id, path)
        present, staged = self.store.staged(repo, branch, path)
        if not (present and staged is not None) and (committed is None or present):
            raise NotFound(f"object not found: {path}")
        if committed is not None:
            self.store.stage(repo, branch, path, None)
        else:
            self.store.clear_staging(repo, branch, path=path)

    def reset(self, repo: str, branch: str, kind: str, path: str | None) -> None:
        self.refs.branch(repo, branch)
        if kind == "reset":
            self.store.clear_staging(repo, branch)
        elif kind == "object" and path:
            self.store.clear_staging(repo, branch, path=path)
        elif kind == "common_prefix" and path:
            self.store.clear_staging(repo, branch, prefix=path)
        else:
            raise BadRequest(f"invalid reset type {kind!r} (reset, object or common_prefix with a path)")

    # -- reads ----------------------------------------------------------------------------
    def lookup(self, repo: str, ref: str, path: str) -> ObjectView | None:
        repository = self.refs.repository(repo)
        resolved = self.refs.resolve(repo, ref)
        if resolved.branch is not None:
            present, raw = self.store.staged(repo, resolved.branch, path)
            if present:
                return None if raw is None else ObjectView(path, decode_entry(raw))
        entry = self._committed(repository, resolved.commit.meta_range_id, path)
        return None if entry is None else ObjectView(path, entry)

    def stat(self, repo: str, ref: str, path: str) -> ObjectView:
        view = self.lookup(repo, ref, path)
        if view is None:
            raise NotFound(f"object not found: {path}")
        return view

    def read(self, repo: str, ref: str, path: str) -> bytes:
        return self._data(self.refs.repository(repo), self.stat(repo, ref, path))

    def read_range(self, repository: RepositoryRow, view: ObjectView, start: int, end: int) -> bytes:
        """Bytes ``start..end`` (inclusive) of an object; 410 once its data was collected."""
        store = self.ctx.namespace_store(repository.storage_namespace)
        data = store.get_range(self._relative(view), start, end - start + 1)
        if data is None:
            raise Gone(f"object {view.path!r} was removed from storage (garbage collected)")
        return data

    def _data(self, repository: RepositoryRow, view: ObjectView) -> bytes:
        data = self.ctx.namespace_store(repository.storage_namespace).get(self._relative(view))
        if data is None:
            raise Gone(f"object {view.path!r} was removed from storage (garbage collected)")
        return data

    @staticmethod
    def _relative(view: ObjectView) -> str:
        if view.entry.address_type is AddressType.FULL:
            raise BadRequest(
                "reading objects outside the storage namespace is not supported by the test server"
            )
        return view.entry.address

    def list(
        self, repo: str, ref: str, *, prefix: str, after: str, delimiter: str
    ) -> Iterator[ObjectView | str]:
        """Objects under prefix after ``after`` in path order; common prefixes as ``str``."""
        last_prefix = None
        for view in self._merged(repo, ref, prefix=prefix, after=after):
            if delimiter:
                cut = view.path.find(delimiter, len(prefix))
                if cut >= 0:
                    common = view.path[: cut + len(delimiter)]
                    if common != last_prefix and common > after:
                        last_prefix = common
                        yield common
                    continue
            yield view

    def _merged(self, repo: str, ref: str, *, prefix: str, after: str) -> Iterator[ObjectView]:
        repository = self.refs.repository(repo)
        resolved = self.refs.resolve(repo, ref)
        trees = self.ctx.trees(repository.storage_namespace)
        start = max(prefix, after)
        staged = {}
        if resolved.branch is not None:
            staged = dict(self.store.iter_staging(repo, resolved.branch, start=start, prefix=prefix))
        committed = {}
        if resolved.commit.meta_range_id:
            for key, entry in trees.entries(resolved.commit.meta_range_id, start=start.encode()):
                path = key.decode("utf-8", "surrogateescape")
                if not path.startswith(prefix):
                    if path > prefix:
                        break
                    continue
                committed[path] = entry
        for path in sorted(staged.keys() | committed.keys()):
            if path <= after:
                continue
            if path in staged:
                raw = staged[path]
                if raw is not None:
                    yield ObjectView(path, decode_entry(raw))
            else:
                yield ObjectView(path, committed[path])

    # -- helpers --------------------------------------------------------------------------
    def _check_absent(self, repo: str, branch: str, path: str, if_none_match: str | None) -> None:
        """lakeFS's upload preconditions: ``If-None-Match: *`` only (412 when the path exists)."""
        if if_none_match is None:
            return
        if if_none_match != "*":
            raise NotImplementedByServer("If-None-Match only supports '*'")
        if self.lookup(repo, branch, path) is not None:
            raise PreconditionFailed("path already exists")

    def _committed(self, repository: RepositoryRow, metarange: str, path: str) -> Entry | None:
        if not metarange:
            return None
        return self.ctx.trees(repository.storage_namespace).get(metarange, path.encode())

    def _signature(self, repo: str, branch: str, path: str, address: str) -> str:
        payload = json.dumps(
            {"Repository": repo, "Branch": branch, "Path": path, "PhysicalAddress": address},
            separators=(",", ":"),
        ).encode()
        digest = hmac.new(self.ctx.settings.signing_key, payload, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def _verify_link(self, repo: str, branch: str, path: str, relative: str) -> None:
        address, sep, signature = relative.rpartition(",")
        if not sep or not hmac.compare_digest(signature, self._signature(repo, branch, path, address)):
            raise BadRequest(f"link address is not valid for {path!r}: missing or wrong signature")
        issued = xid_time(address.rsplit("/", 1)[-1])
        if self.ctx.now() - issued > self.ctx.settings.grace_period:
            raise BadRequest(f"link address expired (issued {issued.isoformat()})")

    def _normalize(self, repository: RepositoryRow, physical: str) -> tuple[str, AddressType]:
        """Like lakeFS's normalizePhysicalAddress: under ``<ns>/data/`` → RELATIVE, else FULL."""
        if not physical:
            raise BadRequest("staging.physical_address is required")
        prefix = self.ctx.namespace_store(repository.storage_namespace).qualified("")
        if physical.startswith(prefix) and physical[len(prefix) :].startswith("data/"):
            return physical[len(prefix) :], AddressType.RELATIVE
        return physical, AddressType.FULL


def object_stats(ctx: ServerContext, repository: RepositoryRow, view: ObjectView) -> dict[str, Any]:
    entry = view.entry
    physical = entry.address
    if entry.address_type is not AddressType.FULL:
        physical = ctx.namespace_store(repository.storage_namespace).qualified(entry.address)
    stats: dict[str, Any] = {
        "path": view.path,
        "path_type": "object",
        "physical_address": physical,
        "checksum": entry.etag,
        "size_bytes": entry.size,
        "mtime": (entry.last_modified_ns or 0) // 1_000_000_000,
        "content_type": entry.content_type or DEFAULT_CONTENT_TYPE,
    }
    if entry.metadata:
        stats["metadata"] = dict(entry.metadata)
    return stats


def _check_path(path: str) -> None:
    if not path:
        raise BadRequest("path is required")
