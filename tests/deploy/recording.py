"""A recording front for moto: every request the product sends, as the IAM actions it needs.

moto's S3 and SQS (the process-wide backend the test session's moto server uses too) are served
on a port of their own behind :class:`StorageCalls`, a WSGI hook that writes down each request's
(action, resource ARN, condition keys) before moto answers it. Only the product's clients are
pointed at this port; the test harness (the lakeFS test server writing objects, fixtures creating
buckets and queues, the inventory generator) keeps using the session's server, so what is recorded
is exactly what lakefs-gc itself calls. The mapping from an HTTP request to IAM actions follows
the S3 and SQS authorization references (e.g. DeleteObjects needs s3:DeleteObject on each key,
HeadObject s3:GetObject, multipart uploads s3:PutObject).
"""

from __future__ import annotations

import io
import json
import re
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

_CREDENTIAL_SCOPE = re.compile(r"Credential=[^/]+/\d{8}/([^/]+)/([^/]+)/aws4_request")
#: SQS operations -> IAM action (batch operations are authorized as their single forms)
_SQS_ACTIONS = {
    "ReceiveMessage": "sqs:ReceiveMessage",
    "DeleteMessage": "sqs:DeleteMessage",
    "DeleteMessageBatch": "sqs:DeleteMessage",
    "ChangeMessageVisibility": "sqs:ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
    "GetQueueAttributes": "sqs:GetQueueAttributes",
    "GetQueueUrl": "sqs:GetQueueUrl",
}


@dataclass(frozen=True)
class Call:
    """One authorization the request needs: ``action`` on ``resource``, with the request's
    condition keys (``s3:prefix`` for listings)."""

    action: str
    resource: str
    context: tuple[tuple[str, str], ...] = ()
    request: str = ""  # method and path, to say where it came from

    def describe(self) -> str:
        keys = "".join(f" {k}={v!r}" for k, v in self.context)
        return f"{self.action} on {self.resource}{keys} ({self.request})"


@dataclass
class StorageCalls:
    """WSGI middleware: records, then forwards every request to moto unchanged."""

    app: WsgiApp
    calls: list[Call] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # requests no rule here maps (a test failure)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        body = b""
        if environ.get("REQUEST_METHOD") == "POST":  # DeleteObjects keys, SQS operations
            body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
            environ["wsgi.input"] = io.BytesIO(body)
        calls, unknown = _authorizations(environ, body)
        with self._lock:
            self.calls.extend(calls)
            self.unknown.extend(unknown)
        return self.app(environ, start_response)


def _authorizations(environ: dict[str, Any], body: bytes) -> tuple[list[Call], list[str]]:
    method = environ["REQUEST_METHOD"]
    path = environ.get("PATH_INFO", "").encode("latin-1").decode("utf-8")
    query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
    scope = _CREDENTIAL_SCOPE.search(environ.get("HTTP_AUTHORIZATION", ""))
    request = f"{method} {path}?{environ.get('QUERY_STRING', '')}"
    if scope is None:
        return [], [f"unsigned request {request}"]
    region, service = scope.groups()
    if service == "s3":
        return _s3(method, path, query, environ, body, request)
    if service == "sqs":
        return _sqs(environ, body, region, request)
    return [], [f"{service}: {request}"]


def _s3(
    method: str, path: str, query: dict[str, list[str]], environ: dict[str, Any], body: bytes, request: str
) -> tuple[list[Call], list[str]]:
    bucket, _, key = path.lstrip("/").partition("/")
    arn = f"arn:aws:s3:::{bucket}"
    if not key:
        if method in ("GET", "HEAD") and not (set(query) - {"list-type", "prefix", "delimiter",
                                                            "continuation-token", "max-keys",
                                                            "start-after", "encoding-type",
                                                            "fetch-owner", "marker"}):  # fmt: skip
            prefix = query.get("prefix", [""])[0]
            return [Call("s3:ListBucket", arn, (("s3:prefix", prefix),), request)], []
        if method == "GET" and "location" in query:
            return [Call("s3:GetBucketLocation", arn, (), request)], []
        if method == "POST" and "delete" in query:
            root = ET.fromstring(body)
            keys = [e.text or "" for e in root.iter() if e.tag.endswith("Key")]
            return [Call("s3:DeleteObject", f"{arn}/{k}", (), request) for k in keys], []
        return [], [f"s3 bucket request {request}"]
    obj = f"{arn}/{key}"
    if method in ("GET", "HEAD") and not (set(query) - {"partNumber", "versionId", "response-content-type"}):
        return [Call("s3:GetObject", obj, (), request)], []
    if method == "PUT" and not (set(query) - {"partNumber", "uploadId"}):
        calls = [Call("s3:PutObject", obj, (), request)]
        source = environ.get("HTTP_X_AMZ_COPY_SOURCE")
        if source:
            calls.append(Call("s3:GetObject", f"arn:aws:s3:::{unquote(source).lstrip('/')}", (), request))
        return calls, []
    if method == "POST" and ("uploads" in query or "uploadId" in query):
        return [Call("s3:PutObject", obj, (), request)], []
    if method == "DELETE":
        action = "s3:AbortMultipartUpload" if "uploadId" in query else "s3:DeleteObject"
        return [Call(action, obj, (), request)], []
    return [], [f"s3 object request {request}"]


def _sqs(environ: dict[str, Any], body: bytes, region: str, request: str) -> tuple[list[Call], list[str]]:
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target.startswith("AmazonSQS."):  # JSON protocol
        operation, params = target.split(".", 1)[1], json.loads(body or b"{}")
        queue_url = str(params.get("QueueUrl", ""))
    else:  # query protocol
        form = parse_qs(body.decode())
        operation, queue_url = form.get("Action", [""])[0], form.get("QueueUrl", [""])[0]
    action = _SQS_ACTIONS.get(operation)
    if action is None or not queue_url:
        return [], [f"sqs {operation or '?'}: {request}"]
    account, name = urlparse(queue_url).path.strip("/").split("/")[-2:]
    return [Call(action, f"arn:aws:sqs:{region}:{account}:{name}", (), f"{operation} {queue_url}")], []
