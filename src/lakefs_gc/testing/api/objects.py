"""Objects: upload, stat, get (410 once collected), delete, list, signed physical addresses."""

from __future__ import annotations

from email.utils import formatdate
from typing import TYPE_CHECKING, Any

from lakefs_gc.testing.api.pagination import MAX_AMOUNT, amount
from lakefs_gc.testing.context import BadRequest, NotFound
from lakefs_gc.testing.http import Request, Response, Router, json_response
from lakefs_gc.testing.objects import ObjectView, object_stats

if TYPE_CHECKING:
    from lakefs_gc.testing.api import Services


def register(router: Router, services: Services) -> None:
    objects, refs, ctx = services.objects, services.refs, services.ctx

    def stats(repo: str, view: ObjectView) -> dict[str, Any]:
        return object_stats(ctx, refs.repository(repo), view)

    def upload(req: Request) -> Response:
        repo, branch = req.params["repository"], req.params["branch"]
        data, content_type = req.upload()
        view = objects.upload(
            repo, branch, req.required("path"), data, content_type=content_type,
            if_none_match=req.headers.get("if-none-match"),
        )  # fmt: skip
        return json_response(stats(repo, view), 201)

    def stat(req: Request) -> Response:
        repo = req.params["repository"]
        return json_response(stats(repo, objects.stat(repo, req.params["ref"], req.required("path"))))

    def get(req: Request) -> Response:
        repo, ref, path = req.params["repository"], req.params["ref"], req.required("path")
        entry = objects.stat(repo, ref, path).entry
        data = objects.read(repo, ref, path)
        headers = {  # as lakeFS's GetObject sets them
            "ETag": f'"{entry.etag}"',
            "Last-Modified": formatdate((entry.last_modified_ns or 0) / 1e9, usegmt=True),
        }
        return Response(200, data, "application/octet-stream", headers)

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
                results.append(stats(repo, item))
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
        view = objects.link(repo, req.params["branch"], req.required("path"), req.json())
        return json_response(stats(repo, view))

    base = "/repositories/{repository}"
    router.add("POST", base + "/branches/{branch}/objects", upload)
    router.add("DELETE", base + "/branches/{branch}/objects", delete)
    router.add("POST", base + "/branches/{branch}/objects/delete", delete_many)
    router.add("GET", base + "/refs/{ref}/objects/stat", stat)
    router.add("GET", base + "/refs/{ref}/objects/ls", list_objects)
    router.add("GET", base + "/refs/{ref}/objects", get)
    router.add("GET", base + "/branches/{branch}/staging/backing", physical_address)
    router.add("PUT", base + "/branches/{branch}/staging/backing", link)
