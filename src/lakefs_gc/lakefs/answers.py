"""lakeFS's answers turned into our errors: a failed call, a task without GC rules.

Every SDK failure becomes a :class:`~lakefs_gc.errors.LakeFSError` carrying the HTTP status, with a
message naming the operation, the repository and what lakeFS said, so the CLI can print it without
a traceback; "no GC rules" becomes a :class:`~lakefs_gc.errors.NoRetentionRulesError`, never "no
active commits" (docs/formats/lakefs-gc-api.md, "Pitfalls of lakeFS's Scala client", 2).
"""

from __future__ import annotations

import json
import re

from lakefs_sdk.exceptions import ApiException

from lakefs_gc.errors import LakeFSError, NoRetentionRulesError
from lakefs_gc.lakefs.retry import http_status, is_connection_error

HTTP_NOT_FOUND = 404
#: task error messages that mean "this repository has no GC rules"
NO_RULES = re.compile(r"not found|no (gc|garbage collection|retention) rules|rules.*missing", re.IGNORECASE)


def no_rules(repository: str, detail: str, *, status: int | None = HTTP_NOT_FOUND) -> NoRetentionRulesError:
    return NoRetentionRulesError(
        f"repository {repository!r} has no garbage collection rules (or lakeFS cannot find them), "
        f"so lakeFS cannot tell which commits are active; refusing to continue. "
        f"Set rules with `lakectl gc set-config`. Detail: {detail}",
        status=status,
    )


def translate(exc: BaseException, where: str, endpoint: str) -> LakeFSError:
    status = http_status(exc)
    if isinstance(exc, ApiException) and status is not None:
        return LakeFSError(f"{where} failed: HTTP {status}: {server_message(exc)}", status=status)
    if is_connection_error(exc):
        return LakeFSError(f"{where} failed: cannot reach lakeFS at {endpoint}: {exc}")
    return LakeFSError(f"{where} failed: {type(exc).__name__}: {exc}")


def server_message(exc: ApiException) -> str:
    """lakeFS errors carry ``{"message": ...}``; fall back to the reason phrase."""
    body = exc.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if isinstance(body, str) and body:
        try:
            doc = json.loads(body)
        except ValueError:
            return body[:500]
        if isinstance(doc, dict) and isinstance(doc.get("message"), str):
            return str(doc["message"])
        return body[:500]
    return str(exc.reason or "no message")
