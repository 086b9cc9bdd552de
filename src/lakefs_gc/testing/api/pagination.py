"""lakeFS's list pagination: ``prefix``/``after``/``amount`` in, ``{pagination, results}`` out."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from lakefs_gc.testing.context import BadRequest
from lakefs_gc.testing.http import Request, Response, json_response

T = TypeVar("T")
DEFAULT_AMOUNT = 100
MAX_AMOUNT = 1000


def amount(request: Request) -> int:
    """lakeFS's ``paginationAmount``: the spec allows -1..1000 (else 400); -1 and 0 mean the default."""
    raw = request.arg("amount")
    try:
        value = int(raw) if raw else DEFAULT_AMOUNT
    except ValueError as e:
        raise BadRequest(f"invalid amount {raw!r}") from e
    if not -1 <= value <= MAX_AMOUNT:
        raise BadRequest(f"amount must be between -1 and {MAX_AMOUNT}")
    return value if value > 0 else DEFAULT_AMOUNT


def page(
    request: Request, items: Iterable[T], key: Callable[[T], str], render: Callable[[T], dict[str, Any]]
) -> Response:
    """Render up to ``amount`` items after ``after``; items must come in ``key`` order."""
    limit = amount(request)
    after = request.arg("after") or ""
    results: list[T] = []
    has_more = False
    for item in items:
        if key(item) <= after:
            continue
        if len(results) == limit:
            has_more = True
            break
        results.append(item)
    next_offset = key(results[-1]) if has_more and results else ""
    return json_response(
        {
            "pagination": {
                "has_more": has_more,
                "next_offset": next_offset,
                "results": len(results),
                "max_per_page": MAX_AMOUNT,
            },
            "results": [render(r) for r in results],
        }
    )
