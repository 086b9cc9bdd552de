"""GC rules, prepare commits (blocking, async, status), prepare uncommitted, metadata files."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING

from lakefs_gc.testing.context import BadRequest, NotFound
from lakefs_gc.testing.http import Request, Response, Router, json_response

if TYPE_CHECKING:
    from lakefs_gc.testing.api import Services

METADATA_TYPES = {"range", "meta_range"}


def register(router: Router, services: Services) -> None:
    gc, refs, ctx = services.gc, services.refs, services.ctx

    def get_rules(req: Request) -> Response:
        return json_response(gc.get_rules(req.params["repository"]))

    def set_rules(req: Request) -> Response:
        gc.set_rules(req.params["repository"], req.json())
        return Response(204)

    def delete_rules(req: Request) -> Response:
        gc.delete_rules(req.params["repository"])
        return Response(204)

    def prepare_commits(req: Request) -> Response:
        return json_response(gc.prepare_commits(req.params["repository"]), 201)

    def prepare_commits_async(req: Request) -> Response:
        return json_response({"id": gc.start_prepare_commits(req.params["repository"])}, 202)

    def prepare_commits_status(req: Request) -> Response:
        task = gc.task_status(req.params["repository"], req.required("id"))
        body: dict[str, object] = {
            "task_id": task.id,
            "completed": task.completed,
            "update_time": _rfc3339(task.update_time),
        }
        if task.result is not None:
            body["result"] = task.result
        if task.error is not None:
            body["error"] = {"message": task.error}
        return json_response(body)

    def prepare_uncommitted(req: Request) -> Response:
        token = req.json().get("continuation_token")
        return json_response(gc.prepare_uncommitted(req.params["repository"], token), 201)

    def metadata_location(kind: str) -> object:
        param = "meta_range" if kind == "meta_range" else "range"

        def handler(req: Request) -> Response:
            repository = refs.repository(req.params["repository"])
            table_id = req.params[param]
            key = f"_lakefs/{table_id}"
            if not ctx.namespace_store(repository.storage_namespace).exists(key):
                raise NotFound(f"{kind} not found: {table_id}")
            return json_response({"location": key}, headers={"Location": key})

        return handler

    def metadata_object(req: Request) -> Response:
        repository = refs.repository(req.params["repository"])
        if req.params["type"] not in METADATA_TYPES:
            raise BadRequest(f"invalid metadata object type {req.params['type']!r}")
        data = ctx.namespace_store(repository.storage_namespace).get(f"_lakefs/{req.params['object_id']}")
        if data is None:
            raise NotFound(f"{req.params['type']} not found: {req.params['object_id']}")
        return Response(200, data, "application/octet-stream")

    base = "/repositories/{repository}"
    for prefix in (base + "/settings/gc_rules", base + "/gc/rules"):
        router.add("GET", prefix, get_rules)
        router.add("DELETE", prefix, delete_rules)
    router.add("PUT", base + "/settings/gc_rules", set_rules)
    router.add("POST", base + "/gc/rules", set_rules)
    router.add("POST", base + "/gc/prepare_commits", prepare_commits)
    router.add("POST", base + "/gc/prepare_commits/async", prepare_commits_async)
    router.add("GET", base + "/gc/prepare_commits/status", prepare_commits_status)
    router.add("POST", base + "/gc/prepare_uncommited", prepare_uncommitted)
    router.add("GET", base + "/metadata/meta_range/{meta_range}", metadata_location("meta_range"))  # type: ignore[arg-type]
    router.add("GET", base + "/metadata/range/{range}", metadata_location("range"))  # type: ignore[arg-type]
    router.add("GET", base + "/metadata/object/{type}/{object_id}", metadata_object)


def _rfc3339(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).isoformat().replace("+00:00", "Z")
