"""``/branches/{branch}/diff`` (uncommitted changes) and ``/refs/{left}/diff/{right}`` (two- or three-dot)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lakefs_gc.testing import diffs
from lakefs_gc.testing.api.pagination import MAX_AMOUNT, amount
from lakefs_gc.testing.context import BadRequest
from lakefs_gc.testing.http import Request, Response, Router, json_response
from lakefs_gc.testing.objects import DEFAULT_CONTENT_TYPE

if TYPE_CHECKING:
    from lakefs_gc.testing.api import Services


def diff_json(diff: diffs.Difference, *, right_stats: bool) -> dict[str, Any]:
    path = diff.path.decode("utf-8", "surrogateescape")
    if diff.common_prefix:
        return {"path": path, "type": diff.type, "path_type": "common_prefix"}
    entry = diff.entry
    out: dict[str, Any] = {
        "path": path, "type": diff.type, "path_type": "object", "size_bytes": entry.size if entry else 0,
    }  # fmt: skip
    if right_stats and entry is not None:
        out["right"] = {
            "checksum": entry.etag,
            "mtime": (entry.last_modified_ns or 0) // 1_000_000_000,
            "content_type": entry.content_type or DEFAULT_CONTENT_TYPE,
            "metadata": dict(entry.metadata),
        }
    return out


def register(router: Router, services: Services) -> None:
    refs = services.refs

    def render(req: Request, lines: list[diffs.Difference], *, right_stats: bool = False) -> Response:
        results, has_more = diffs.page(
            lines, prefix=req.arg("prefix") or "", delimiter=req.arg("delimiter") or "",
            after=req.arg("after") or "", limit=amount(req),
        )  # fmt: skip
        rendered = [diff_json(d, right_stats=right_stats) for d in results]
        pagination = {
            "has_more": has_more,
            "next_offset": rendered[-1]["path"] if has_more and rendered else "",
            "results": len(rendered),
            "max_per_page": MAX_AMOUNT,
        }
        return json_response({"pagination": pagination, "results": rendered})

    def diff_branch(req: Request) -> Response:
        return render(req, diffs.uncommitted(refs, req.params["repository"], req.params["branch"]))

    def diff_refs(req: Request) -> Response:
        repo, left, right = req.params["repository"], req.params["leftRef"], req.params["rightRef"]
        refs.repository(repo)
        kind = req.arg("type") or "three_dot"
        if kind not in ("two_dot", "three_dot"):
            raise BadRequest(f"invalid diff type {kind!r}: two_dot or three_dot")
        compute = diffs.two_dot if kind == "two_dot" else diffs.three_dot
        return render(req, compute(refs, repo, left, right), right_stats=req.flag("include_right_stats"))

    base = "/repositories/{repository}"
    router.add("GET", base + "/branches/{branch}/diff", diff_branch)
    router.add("GET", base + "/refs/{leftRef}/diff/{rightRef}", diff_refs)
