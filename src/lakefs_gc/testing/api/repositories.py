"""Repositories and their metadata, branches, commits, tags, merges, reverts and cherry-picks."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from lakefs_gc.testing.api.config import STORAGES
from lakefs_gc.testing.api.pagination import page
from lakefs_gc.testing.context import BadRequest, NotFound
from lakefs_gc.testing.http import Request, Response, Router, json_response
from lakefs_gc.testing.merges import CommitOverrides, cherry_pick, merge_into_branch, revert_commit
from lakefs_gc.testing.store import CommitRow, RepositoryRow

if TYPE_CHECKING:
    from lakefs_gc.testing.api import Services


def repository_json(r: RepositoryRow) -> dict[str, Any]:
    return {
        "id": r.id,
        "creation_date": r.creation_date,
        "default_branch": r.default_branch,
        "storage_id": r.storage_id,
        "storage_namespace": r.storage_namespace,
        "read_only": r.read_only,
    }


def commit_json(c: CommitRow) -> dict[str, Any]:
    return {
        "id": c.id,
        "parents": list(c.parents),
        "committer": c.committer,
        "message": c.message,
        "creation_date": c.creation_date,
        "meta_range_id": c.meta_range_id,
        "metadata": dict(c.metadata),
        "generation": c.generation,
        "version": c.version,
    }


def register(router: Router, services: Services) -> None:
    refs, ctx, store = services.refs, services.ctx, services.ctx.store

    def storage_id_for(namespace: str, requested: str | None) -> str:
        enabled = ctx.settings.blockstores
        matching = [i for i in enabled if re.match(STORAGES[i][2], namespace)]
        if requested:
            if requested not in enabled:
                raise BadRequest(f"unknown storage id {requested!r}")
            matching = [requested] if requested in matching else []
        if not matching:
            raise BadRequest(f"storage namespace {namespace!r} does not match any configured blockstore")
        return matching[0] if len(enabled) > 1 else ""

    def create_repository(req: Request) -> Response:
        body = req.json()
        name, namespace = str(body.get("name", "")), str(body.get("storage_namespace", ""))
        if not namespace:
            raise BadRequest("storage_namespace is required")
        storage_id = storage_id_for(namespace, body.get("storage_id"))
        repo = refs.create_repository(name, namespace, str(body.get("default_branch") or "main"), storage_id)
        return json_response(repository_json(repo), 201)

    def list_repositories(req: Request) -> Response:
        prefix = req.arg("prefix") or ""
        rows = [r for r in store.list_repositories() if r.id.startswith(prefix)]
        return page(req, rows, lambda r: r.id, repository_json)

    def get_repository(req: Request) -> Response:
        return json_response(repository_json(refs.repository(req.params["repository"])))

    def delete_repository(req: Request) -> Response:
        refs.repository(req.params["repository"])
        store.delete_repository(req.params["repository"])
        return Response(204)

    def get_metadata(req: Request) -> Response:
        refs.repository(req.params["repository"])
        return json_response(store.repository_metadata(req.params["repository"]))

    def set_metadata(req: Request) -> Response:
        metadata = req.json().get("metadata")
        if not isinstance(metadata, dict):
            raise BadRequest("metadata is required")
        if metadata:  # lakeFS returns before looking the repository up when there is nothing to set
            refs.repository(req.params["repository"])
            store.update_repository_metadata(req.params["repository"], _strings(metadata), [])
        return Response(204)

    def delete_metadata(req: Request) -> Response:
        keys = req.json().get("keys")
        if not isinstance(keys, list):
            raise BadRequest("keys is required")
        if keys:
            refs.repository(req.params["repository"])
            store.update_repository_metadata(req.params["repository"], {}, [str(k) for k in keys])
        return Response(204)

    def list_branches(req: Request) -> Response:
        repo = req.params["repository"]
        refs.repository(repo)
        prefix, hidden = req.arg("prefix") or "", req.flag("show_hidden")
        rows = [b for b in store.list_branches(repo) if b.id.startswith(prefix) and (hidden or not b.hidden)]
        return page(req, rows, lambda b: b.id, lambda b: {"id": b.id, "commit_id": b.commit_id})

    def create_branch(req: Request) -> Response:
        repo, body = req.params["repository"], req.json()
        refs.repository(repo)
        row = refs.create_branch(
            repo, str(body.get("name", "")), str(body.get("source", "")),
            hidden=bool(body.get("hidden")), force=bool(body.get("force")),
        )  # fmt: skip
        return Response(201, row.commit_id.encode(), "text/html")

    def get_branch(req: Request) -> Response:
        row = refs.branch(req.params["repository"], req.params["branch"])
        return json_response({"id": row.id, "commit_id": row.commit_id})

    def delete_branch(req: Request) -> Response:
        refs.delete_branch(req.params["repository"], req.params["branch"])
        return Response(204)

    def reset_branch(req: Request) -> Response:
        body = req.json()
        kind, path = str(body.get("type", "")), body.get("path")
        services.objects.reset(req.params["repository"], req.params["branch"], kind, path)
        return Response(204)

    def commit(req: Request) -> Response:
        body = req.json()
        if "message" not in body:
            raise BadRequest("commit message is required")
        date = body.get("date")
        row = refs.commit_branch(
            req.params["repository"], req.params["branch"], message=str(body["message"]),
            metadata=dict(body.get("metadata") or {}), date=int(date) if date is not None else None,
            allow_empty=bool(body.get("allow_empty")),
        )  # fmt: skip
        return json_response(commit_json(row), 201)

    def get_commit(req: Request) -> Response:
        repo = req.params["repository"]
        refs.repository(repo)
        return json_response(commit_json(refs.resolve(repo, req.params["commitId"]).commit))

    def log_commits(req: Request) -> Response:
        commits = refs.log(req.params["repository"], req.params["ref"], first_parent=req.flag("first_parent"))
        order = {c.id: f"{i:012d}" for i, c in enumerate(commits)}
        after = req.arg("after")
        if after and after in order:  # lakeFS pages the log by commit id
            req.query["after"] = [order[after]]
        response = page(req, commits, lambda c: order[c.id], commit_json)
        return _rewrite_next_offset(response, commits, order)

    def merge(req: Request) -> Response:
        body = req.json()
        row = merge_into_branch(
            refs, req.params["repository"], req.params["sourceRef"], req.params["destinationBranch"],
            message=body.get("message"), metadata=dict(body.get("metadata") or {}),
            strategy=body.get("strategy"), allow_empty=bool(body.get("allow_empty")),
            squash=bool(body.get("squash_merge")),
        )  # fmt: skip
        return json_response({"reference": row.id})

    def revert(req: Request) -> Response:
        body = req.json()
        if not isinstance(body.get("ref"), str) or not isinstance(body.get("parent_number"), int):
            raise BadRequest("ref and parent_number are required")
        revert_commit(
            refs, req.params["repository"], req.params["branch"], body["ref"],
            parent_number=body["parent_number"], allow_empty=bool(body.get("allow_empty")),
            overrides=CommitOverrides.parse(body.get("commit_overrides")),
        )  # fmt: skip
        return Response(204)

    def cherry_pick_commit(req: Request) -> Response:
        body = req.json()
        if not isinstance(body.get("ref"), str):
            raise BadRequest("ref is required")
        parent = body.get("parent_number")
        if parent is not None and not isinstance(parent, int):
            raise BadRequest("parent_number must be an integer")
        row = cherry_pick(
            refs, req.params["repository"], req.params["branch"], body["ref"], parent_number=parent,
            overrides=CommitOverrides.parse(body.get("commit_overrides")),
        )  # fmt: skip
        return json_response(commit_json(row), 201)

    def create_tag(req: Request) -> Response:
        repo, body = req.params["repository"], req.json()
        refs.repository(repo)
        tag, commit_id = refs.create_tag(
            repo, str(body.get("id", "")), str(body.get("ref", "")), force=bool(body.get("force"))
        )
        return json_response({"id": tag, "commit_id": commit_id}, 201)

    def list_tags(req: Request) -> Response:
        repo = req.params["repository"]
        refs.repository(repo)
        prefix = req.arg("prefix") or ""
        rows = [t for t in store.list_tags(repo) if t[0].startswith(prefix)]
        return page(req, rows, lambda t: t[0], lambda t: {"id": t[0], "commit_id": t[1]})

    def get_tag(req: Request) -> Response:
        repo = req.params["repository"]
        refs.repository(repo)
        commit_id = store.get_tag(repo, req.params["tag"])
        if commit_id is None:
            raise NotFound(f"tag not found: {req.params['tag']}")
        return json_response({"id": req.params["tag"], "commit_id": commit_id})

    def delete_tag(req: Request) -> Response:
        repo, tag = req.params["repository"], req.params["tag"]
        refs.repository(repo)
        if store.get_tag(repo, tag) is None:
            raise NotFound(f"tag not found: {tag}")
        store.delete_tag(repo, tag)
        return Response(204)

    base = "/repositories/{repository}"
    router.add("GET", "/repositories", list_repositories)
    router.add("POST", "/repositories", create_repository)
    router.add("GET", base, get_repository)
    router.add("DELETE", base, delete_repository)
    router.add("GET", base + "/metadata", get_metadata)
    router.add("POST", base + "/metadata", set_metadata)
    router.add("DELETE", base + "/metadata", delete_metadata)
    router.add("GET", base + "/branches", list_branches)
    router.add("POST", base + "/branches", create_branch)
    router.add("GET", base + "/branches/{branch}", get_branch)
    router.add("DELETE", base + "/branches/{branch}", delete_branch)
    router.add("PUT", base + "/branches/{branch}", reset_branch)
    router.add("POST", base + "/branches/{branch}/commits", commit)
    router.add("POST", base + "/branches/{branch}/revert", revert)
    router.add("POST", base + "/branches/{branch}/cherry-pick", cherry_pick_commit)
    router.add("GET", base + "/commits/{commitId}", get_commit)
    router.add("GET", base + "/refs/{ref}/commits", log_commits)
    router.add("POST", base + "/refs/{sourceRef}/merge/{destinationBranch}", merge)
    router.add("GET", base + "/tags", list_tags)
    router.add("POST", base + "/tags", create_tag)
    router.add("GET", base + "/tags/{tag}", get_tag)
    router.add("DELETE", base + "/tags/{tag}", delete_tag)


def _strings(values: dict[Any, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in values.items()}


def _rewrite_next_offset(response: Response, commits: list[CommitRow], order: dict[str, str]) -> Response:
    """Log pages are keyed by position internally but lakeFS returns a commit id as offset."""
    import json

    body = json.loads(response.body)
    offset = body["pagination"]["next_offset"]
    if offset:
        body["pagination"]["next_offset"] = commits[int(offset)].id
    return json_response(body)
