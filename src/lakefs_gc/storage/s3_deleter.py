"""S3's bulk deleter: ``DeleteObjects`` of up to 1000 keys, the request body written and the
answer read here, while botocore still resolves the endpoint, signs, checksums, sends and raises
for error statuses.

Why the wire is ours: a sweep is a stream of 1000-key ``DeleteObjects`` requests, and botocore's
model-driven machinery cost about 34 ms of CPU per request (bench/README.md, section S3
DeleteObjects: client CPU per request): validating 1000 parameter structures (28 % of it),
serialising them through ElementTree (34 %) and parsing the 1000 ``<Deleted>`` entries of the
answer shape by shape (35 %).
At S3's latencies a sweep task waits on requests in flight, so that CPU, not the store, bounded
how fast the executors deleted. A body written as one string join and an answer read by two
regular expressions (the XML parser for anything unusual) cost a few milliseconds.

How, through botocore's event hooks on the deleter's client (:func:`install`):

* ``before-parameter-build``: the keys move from the call's parameters into the request context,
  and botocore serialises an empty ``<Delete>`` (nothing to validate);
* ``before-call``: the body becomes :func:`request_body` of those keys (the request checksum is
  computed after this hook, so it covers the body sent);
* ``before-parse``: a 200 answer holding a ``<DeleteResult>`` is kept whole under
  :data:`RAW_RESULT` and botocore parses an empty one; any other answer (an error, a 200 with an
  ``<Error>`` body) is left to botocore, which raises as usual.

:func:`result_of` reads either form, so a client without the hooks (a fake, a future botocore
that skips one) gives the same outcomes. If only the first hook ran, the request carries no key
and S3 refuses it (``MalformedXML``): the batch fails, nothing else is deleted.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

from lakefs_gc.storage.deleters import (
    S3_MAX_BATCH,
    BatchAnswer,
    BatchingDeleter,
    DeleteOutcome,
    Retry,
    key_prefix,
)
from lakefs_gc.storage.throttle import Throttle

#: S3 error codes that mean "slow down" (the whole request's, or one key's inside DeleteObjects).
S3_THROTTLE_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded"})
#: S3 error codes worth the same request again (besides any 5xx).
S3_TRANSIENT_CODES = frozenset({"InternalError", "ServiceUnavailable", "RequestTimeout"})

#: where the raw ``<DeleteResult>`` travels in botocore's parsed response
RAW_RESULT = "LakeFSGcRawDeleteResult"
_KEYS = "lakefs_gc_delete_keys"  # request context entry: the keys of this request
_INSTALLED = "lakefs_gc_delete_wire"
_EVENT = "{}.s3.DeleteObjects"
#: XML text escapes; ``\r`` and ``\n`` as character references, as botocore's ``escape_xml_payload``
#: writes them, so an XML parser's line-end normalisation cannot change a key
_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "\r": "&#xD;", "\n": "&#xA;"})
_SPECIAL = frozenset("&<>\r\n")
#: what only the XML parser reads right: entities, CDATA, comments, per-key errors, prefixed tags
_NOT_PLAIN = (b"&", b"<![CDATA[", b"<!--", b"<Error>", b":Deleted", b":Key")
_DELETED_KEY = re.compile(rb"<Deleted>\s*<Key>([^<]*)</Key>")


class S3BulkDeleter(BatchingDeleter):
    """``DeleteObjects`` with up to 1000 keys per request, ``Quiet=False`` so every key is reported.

    S3 reports a key that does not exist as ``Deleted`` (deleting is idempotent there), so this
    deleter says ``deleted`` for absent keys and ``missing`` only if a store answers ``NoSuchKey``.
    On a versioned bucket a delete without version id only adds a delete marker, as lakeFS's GC does.
    ``SlowDown`` (the request's or a key's) and 503 are throttling; other 5xx, ``InternalError``,
    ``RequestTimeout`` and connection failures are transient; both are retried. Any other failure
    of a request marks every key of its batch ``failed``. The request body is written and the
    answer read by this module's wire functions (botocore's own cost most of a sweep task's CPU).
    """

    def __init__(
        self,
        client: Any,
        bucket: str,
        namespace_key: str,
        *,
        max_batch: int = S3_MAX_BATCH,
        throttle: Throttle | None = None,
    ) -> None:
        super().__init__(max_batch, S3_MAX_BATCH, throttle)
        self.client = client
        self.bucket = bucket
        self.prefix = key_prefix(namespace_key)
        install(client)

    def _delete_batch(self, addresses: list[str]) -> BatchAnswer:
        from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
        from botocore.exceptions import ConnectionError as BotoConnectionError

        by_key = {self.prefix + a: a for a in addresses}
        try:
            answer = self.client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in by_key], "Quiet": False}
            )
            response = result_of(answer)
        except MalformedResult as e:  # cut short: as botocore treats a torn 200, worth a retry
            return dict.fromkeys(addresses, Retry(str(e), False))
        except ClientError as e:
            error = f"DeleteObjects failed: {e}"
            status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            code = str(e.response.get("Error", {}).get("Code", ""))
            throttled = status == 503 or code in S3_THROTTLE_CODES
            if throttled or status >= 500 or code in S3_TRANSIENT_CODES:
                return dict.fromkeys(addresses, Retry(error, throttled))
            return {a: DeleteOutcome(a, "failed", error) for a in addresses}
        except (BotoConnectionError, HTTPClientError) as e:
            return dict.fromkeys(addresses, Retry(f"DeleteObjects failed: {e}", False))
        except BotoCoreError as e:
            return {a: DeleteOutcome(a, "failed", f"DeleteObjects failed: {e}") for a in addresses}
        outcomes: BatchAnswer = {}
        for deleted in response["Deleted"]:
            address = by_key.get(deleted.get("Key", ""))
            if address is not None:
                outcomes[address] = DeleteOutcome(address, "deleted")
        for error in response["Errors"]:
            address = by_key.get(error.get("Key", ""))
            if address is None:
                continue
            code = error.get("Code", "")
            reason = f"{code}: {error.get('Message', '')}"
            if code == "NoSuchKey":
                outcomes[address] = DeleteOutcome(address, "missing")
            elif code in S3_THROTTLE_CODES or code in S3_TRANSIENT_CODES:
                outcomes[address] = Retry(reason, code in S3_THROTTLE_CODES)
            else:
                outcomes[address] = DeleteOutcome(address, "failed", reason)
        return outcomes

    def close(self) -> None:
        self.client.close()


def request_body(keys: Sequence[str], *, quiet: bool = False) -> bytes:
    """The ``<Delete>`` document for ``keys``, as botocore would write it (unquoted keys, no
    version ids)."""
    parts = ['<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/">']
    for key in keys:
        escaped = key.translate(_ESCAPES) if not _SPECIAL.isdisjoint(key) else key
        parts.append(f"<Object><Key>{escaped}</Key></Object>")
    parts.append(f"<Quiet>{'true' if quiet else 'false'}</Quiet></Delete>")
    return "".join(parts).encode()


def parse_result(body: bytes) -> dict[str, Any]:
    """A ``<DeleteResult>`` document as botocore's parsed form: ``{"Deleted": [{"Key": ...}],
    "Errors": [{"Key", "Code", "Message"}]}`` (the fields the sweep reads). Raises
    :class:`MalformedResult` for a document that does not parse (an answer cut short)."""
    fast = _parse_plain(body)
    if fast is not None:
        return fast
    try:
        root = ET.fromstring(body)
    except ET.ParseError as e:
        raise MalformedResult(f"DeleteObjects answer is not a whole XML document: {e}") from e
    deleted: list[dict[str, str]] = []
    errors: list[dict[str, str]] = []
    for entry in root:
        kind = entry.tag.rpartition("}")[2]
        if kind not in ("Deleted", "Error"):
            continue
        fields = {child.tag.rpartition("}")[2]: child.text or "" for child in entry}
        if kind == "Deleted":
            deleted.append({"Key": fields.get("Key", "")})
        else:
            errors.append({k: fields.get(k, "") for k in ("Key", "Code", "Message")})
    return {"Deleted": deleted, "Errors": errors}


class MalformedResult(ValueError):
    """A ``DeleteObjects`` answer that is not a whole XML document: worth the request again."""


def _parse_plain(body: bytes) -> dict[str, Any] | None:
    """The common answer (every key ``<Deleted>``, plain text) read with two regular expressions,
    about 4x cheaper than a parse tree; None for anything else (entities, CDATA, comments,
    errors, prefixed tags, an answer cut short), which the XML parser reads."""
    if any(mark in body for mark in _NOT_PLAIN) or not body.rstrip().endswith(b"</DeleteResult>"):
        return None
    keys = _DELETED_KEY.findall(body)
    if len(keys) != body.count(b"<Deleted>"):
        return None  # a <Deleted> entry of another shape
    return {"Deleted": [{"Key": k.decode()} for k in keys], "Errors": []}


def result_of(response: dict[str, Any]) -> dict[str, Any]:
    """``Deleted`` and ``Errors`` of a ``delete_objects`` answer, with or without the hooks."""
    raw = response.get(RAW_RESULT)
    if raw is not None:
        return parse_result(raw)
    return {"Deleted": response.get("Deleted", []), "Errors": response.get("Errors", [])}


def install(client: Any) -> bool:
    """Route ``client``'s ``delete_objects`` through this module; False for a client that is not
    botocore's (fakes): it keeps its own behaviour. Idempotent."""
    events = getattr(getattr(client, "meta", None), "events", None)
    if events is None or not hasattr(events, "register"):
        return False
    if getattr(client, _INSTALLED, False):
        return True
    events.register(_EVENT.format("before-parameter-build"), _take_keys, unique_id=f"{_INSTALLED}-params")
    events.register_first(_EVENT.format("before-call"), _write_body, unique_id=f"{_INSTALLED}-body")
    # first of all before-parse handlers: botocore's check for an S3 error inside a 200 answer
    # parses the whole body again; it still runs after this one, on what is left to parse
    events.register_first("before-parse.s3.*", _keep_result, unique_id=f"{_INSTALLED}-result")
    try:
        from botocore.handlers import _handle_200_error
    except ImportError:  # pragma: no cover - a botocore without it: nothing to reorder
        pass
    else:
        events.unregister("before-parse.s3.*", _handle_200_error)
        events.register_first("before-parse.s3.*", _handle_200_error)
    setattr(client, _INSTALLED, True)
    return True


def _take_keys(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    delete = params.get("Delete") or {}
    objects = delete.get("Objects") or []
    if not objects or any(set(o) != {"Key"} for o in objects):
        return  # version ids or nothing to move: botocore's own path
    context[_KEYS] = ([o["Key"] for o in objects], bool(delete.get("Quiet", False)))
    params["Delete"] = {"Objects": [], "Quiet": bool(delete.get("Quiet", False))}


def _write_body(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    taken = context.get(_KEYS)
    if taken is not None:
        keys, quiet = taken
        params["body"] = request_body(keys, quiet=quiet)


def _keep_result(
    operation_model: Any, response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **_: Any
) -> None:
    if getattr(operation_model, "name", None) != "DeleteObjects":
        return
    body = response_dict.get("body") or b""
    if response_dict.get("status_code") == 200 and _root_element(body) == b"DeleteResult":
        customized_response_dict[RAW_RESULT] = body
        response_dict["body"] = b'<DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"/>'


def _root_element(body: bytes) -> bytes:
    """The root element's name of an XML document (after its declaration), or b"" if unclear."""
    head = body[:1024].lstrip()
    if head.startswith(b"<?"):
        head = head[head.find(b"?>") + 2 :].lstrip()
    if not head.startswith(b"<"):
        return b""
    end = min((i for i in (head.find(b" "), head.find(b">"), head.find(b"/")) if i > 0), default=-1)
    return head[1:end] if end > 0 else b""
