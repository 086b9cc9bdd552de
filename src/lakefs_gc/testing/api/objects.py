"""Objects: upload, copy, stat, get and head (ranges; 410 once collected), delete, list, user
metadata, signed physical addresses. Headers and statuses are those of lakeFS's controller."""

from __future__ import annotations

from email.utils import formatdate
from typing import TYPE_CHECKING, Any

from lakefs_gc.testing.api.pagination import MAX_AMOUNT, amount
from lakefs_gc.testing.context import BadRequest, NotFound, NotImplementedByServer
from lakefs_gc.testing.framing import RangeNotSatisfiable, parse_range
from lakefs_gc.testing.http import Request, Response, Router, json_response
from lakefs_gc.testing.objects import DEFAULT_CONTENT_TYPE, ObjectView, object_stats

#: lakeFS's ``x-lakefs-meta-<key>`` upload headers become user metadata ``<key>``;
#: ``x-lakefs-internal-<key>`` become ``::lakefs::<key>`` (``extractLakeFSMetadata``)
META_PREFIX, INTERNAL_PREFIX, INTERNAL_KEY_PREFIX = "x-lakefs-meta-", "x-lakefs-internal-", "::lakefs::"
#: content types lakeFS's GetObject serves ``inline``; everything else is an ``attachment``
INLINE_TYPES = frozenset({
    "image/jpeg", "image/jpg", "image/png", "image/gif", "image/webp", "image/svg+xml",
    "application/pdf", "text/plain", "text/markdown", "text/x-markdown", "text/html", "text/css",
    "text/javascript", "application/javascript", "application/json", "application/xml", "text/xml",
    "video/mp4", "video/webm", "audio/mpeg", "audio/wav", "audio/webm",
})  # fmt: skip


def user_metadata(headers: dict[str, str]) -> dict[str, str]:
    """The user metadata of an upload, from its headers, keys lower-cased as Go's header map has them."""
    metadata = {}
    for name, value in headers.items():
        if name.startswith(META_PREFIX):
            metadata[name[len(META_PREFIX) :]] = value
        elif name.startswith(INTERNAL_PREFIX):
            metadata[INTERNAL_KEY_PREFIX + name[len(INTERNAL_PREFIX) :]] = value
    return metadata


def object_headers(view: ObjectView) -> dict[str, str]:
    entry = view.entry
    return {
        "ETag": f'"{entry.etag}"' if not entry.etag.startswith('"') else entry.etag,
        "Last-Modified": formatdate((entry.last_modified_ns or 0) // 1_000_000_000, usegmt=True),
        "Cache-Control": "no-store, must-revalidate",  # lakeFS's httputil.KeepPrivate
        "Expires": "0",
    }


if TYPE_CHECKING:
    from lakefs_gc.testing.api import Services


def register(router: Router, services: Services) -> None:
    objects, refs, ctx = services.objects, services.refs, services.ctx

    def stats(repo: str, view: ObjectView) -> dict[str, Any]:
        return object_stats(ctx, refs.repository(repo), view)

    def upload(req: Request) -> Response:
        repo, branch = req.params["repository"], req.params["branch"]
        if "if-match" in req.headers:
            raise NotImplementedByServer("If-Match is not supported")  # lakeFS: 501
        data, content_type = req.upload()
        metadata = user_metadata(req.headers)
        view = objects.upload(
            repo, branch, req.required("path"), data, content_type=content_type, metadata=metadata,
            if_none_match=req.headers.get("if-none-match"),
        )  # fmt: skip
        body = stats(repo, view)
        body["content_type"], body["metadata"] = content_type, metadata  # as lakeFS answers them
        return json_response(body, 201)

    def copy(req: Request) -> Response:
        repo, branch, body = req.params["repository"], req.params["branch"], req.json()
        if body.get("shallow"):
            raise NotImplementedByServer("shallow copy is not implemented")  # lakeFS OSS: 501
        if not isinstance(body.get("src_path"), str):
            raise BadRequest("src_path is required")
        view = objects.copy(
            repo, branch, req.required("dest_path"), str(body.get("src_ref") or ""), body["src_path"]
        )
        answer = stats(repo, view)
        answer.setdefault("metadata", {})
        return json_response(answer, 201)

    def stat(req: Request) -> Response:
        repo = req.params["repository"]
        body = stats(repo, objects.stat(repo, req.params["ref"], req.required("path")))
        if "metadata" not in body or not req.flag("user_metadata", default=True):
            body["metadata"] = {}
        return json_response(body)

    def get(req: Request) -> Response:
        repo, ref, path = req.params["repository"], req.params["ref"], req.required("path")
        repository = refs.repository(repo)
        view = objects.stat(repo, ref, path)
        headers = object_headers(view)
        if req.headers.get("if-none-match") == headers["ETag"]:
            return Response(304)
        content_type = view.entry.content_type or DEFAULT_CONTENT_TYPE
        headers["X-Content-Type-Options"] = "nosniff"
        headers["Content-Disposition"] = "inline" if content_type in INLINE_TYPES else "attachment"
        spec = req.headers.get("range")
        if spec is None:
            return Response(200, objects.read(repo, ref, path), content_type, headers)
        size = view.entry.size
        try:
            start, end = parse_range(spec, size)
        except RangeNotSatisfiable as e:
            extra = {"Content-Range": f"bytes */{size}"} if e.unsatisfiable else {}
            return json_response({"message": "Requested Range Not Satisfiable"}, 416, {**headers, **extra})
        headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        return Response(206, objects.read_range(repository, view, start, end), content_type, headers)

    def head(req: Request) -> Response:
        """lakeFS's HeadObject: the entry's headers only; it never reads the data, nor answers a body."""
        repo, ref, path = req.params["repository"], req.params["ref"], req.required("path")
        try:
            view = objects.stat(repo, ref, path)
        except NotFound:
            return Response(404)
        headers = {**object_headers(view), "Accept-Ranges": "bytes"}
        content_type, size = view.entry.content_type or DEFAULT_CONTENT_TYPE, view.entry.size
        spec = req.headers.get("range")
        if spec is None:
            return Response(200, b"", content_type, headers, head_length=size)
        try:
            start, end = parse_range(spec, size)
        except RangeNotSatisfiable:
            return Response(416, b"", content_type, headers, head_length=0)
        headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        return Response(206, b"", content_type, headers, head_length=end - start + 1)

    def update_metadata(req: Request) -> Response:
        body = req.json()
        metadata = body.get("set")
        if not isinstance(metadata, dict):
            raise BadRequest("set is required")
        objects.update_user_metadata(
            req.params["repository"], req.params["branch"], req.required("path"),
            {str(k): str(v) for k, v in metadata.items()},
        )  # fmt: skip
        return Response(204)  # what lakeFS's controller answers (its spec documents 201)

    def delete(req: Request) -> Response:
        objects.delete(req.params["repository"], req.params["branch"], req.required("path"))
        return Response(204)

    def delete_many(req: Request) -> Response:
        repo, branch = req.params["repository"], req.params["branch"]
        errors = []
        for path in req.json().get("paths") or []:
            try:
                objects.delete(repo, branch, str(path))
            except NotFound:
                continue  # lakeFS's bulk delete ignores missing paths
            except BadRequest as e:
                errors.append({"status_code": 400, "message": e.message, "path": str(path)})
        return json_response({"errors": errors})

    def list_objects(req: Request) -> Response:
        repo, ref = req.params["repository"], req.params["ref"]
        limit = amount(req)
        prefix, after = req.arg("prefix") or "", req.arg("after") or ""
        results: list[dict[str, Any]] = []
        has_more = False
        for item in objects.list(repo, ref, prefix=prefix, after=after, delimiter=req.arg("delimiter") or ""):
            if len(results) == limit:
                has_more = True
                break
            if isinstance(item, str):
                results.append({"path": item, "path_type": "common_prefix", "physical_address": "",
                                "checksum": "", "mtime": 0})  # fmt: skip
            else:
                entry_stats = stats(repo, item)
                if not req.flag("user_metadata", default=True):
                    entry_stats.pop("metadata", None)
                results.append(entry_stats)
        next_offset = results[-1]["path"] if has_more else ""
        pagination = {
            "has_more": has_more,
            "next_offset": next_offset,
            "results": len(results),
            "max_per_page": MAX_AMOUNT,
        }
        return json_response({"pagination": pagination, "results": results})

    def physical_address(req: Request) -> Response:
        repo, branch = req.params["repository"], req.params["branch"]
        location = objects.physical_address(repo, branch, req.required("path"))
        return json_response({"physical_address": location})

    def link(req: Request) -> Response:
        repo = req.params["repository"]
        view = objects.link(
            repo, req.params["branch"], req.required("path"), req.json(), req.headers.get("if-none-match")
        )
        return json_response(stats(repo, view))

    base = "/repositories/{repository}"
    router.add("POST", base + "/branches/{branch}/objects", upload)
    router.add("DELETE", base + "/branches/{branch}/objects", delete)
    router.add("POST", base + "/branches/{branch}/objects/delete", delete_many)
    router.add("POST", base + "/branches/{branch}/objects/copy", copy)
    router.add("PUT", base + "/branches/{branch}/objects/stat/user_metadata", update_metadata)
    router.add("GET", base + "/refs/{ref}/objects/stat", stat)
    router.add("GET", base + "/refs/{ref}/objects/ls", list_objects)
    router.add("GET", base + "/refs/{ref}/objects", get)
    router.add("HEAD", base + "/refs/{ref}/objects", head)
    router.add("GET", base + "/branches/{branch}/staging/backing", physical_address)
    router.add("PUT", base + "/branches/{branch}/staging/backing", link)
