"""S3's ``DeleteObjects`` wire (lakefs_gc.storage.s3_deleter): the body we write is the one botocore
writes, the answer we read is what botocore's parser reads, and every request that leaves a
botocore client with the hooks carries that body, checksummed.
"""

from __future__ import annotations

import base64
import zlib
from typing import Any

import boto3
import pytest
from botocore.handlers import escape_xml_payload
from botocore.parsers import RestXMLParser
from botocore.serialize import create_serializer
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from lakefs_gc.storage.clients import S3_DELETE_RETRIES, s3_client
from lakefs_gc.storage.deleters import DeleteOutcome
from lakefs_gc.storage.filesystems import S3Options
from lakefs_gc.storage.s3_deleter import (
    MalformedResult,
    S3BulkDeleter,
    _parse_plain,
    install,
    parse_result,
    request_body,
    result_of,
)
from lakefs_gc.storage.throttle import Throttle
from tests.storage.test_clients import Request, stub_server

_MODEL = boto3.session.Session().client("s3", region_name="us-east-1").meta.service_model
_DELETE = _MODEL.operation_model("DeleteObjects")
#: XML 1.0 characters (S3 keys are UTF-8; a key outside XML's alphabet cannot be sent by anyone)
_XML_TEXT = st.characters(
    blacklist_categories=("Cs",), blacklist_characters="\x00\ufffe\uffff", min_codepoint=0x09
).filter(lambda c: c in "\t\n\r" or ord(c) >= 0x20)
CODES = ["NoSuchKey", "AccessDenied", "SlowDown", "InternalError"]
KEYS = st.lists(st.text(_XML_TEXT, min_size=1, max_size=40), min_size=1, max_size=30, unique=True)


def botocore_body(keys: list[str], quiet: bool) -> bytes:
    """What botocore itself sends for ``keys``: its serializer, then its ``\\r``/``\\n`` escape."""
    request = create_serializer("rest-xml").serialize_to_request(
        {"Bucket": "b", "Delete": {"Objects": [{"Key": k} for k in keys], "Quiet": quiet}}, _DELETE
    )
    params = {"body": request["body"]}
    escape_xml_payload(params)
    return params["body"]


def botocore_parse(body: bytes) -> dict[str, Any]:
    parsed = RestXMLParser().parse({"body": body, "headers": {}, "status_code": 200}, _DELETE.output_shape)
    return {
        "Deleted": [{"Key": d.get("Key", "")} for d in parsed.get("Deleted", [])],
        "Errors": [{k: e.get(k, "") for k in ("Key", "Code", "Message")} for e in parsed.get("Errors", [])],
    }


@settings(max_examples=200, deadline=None)
@given(keys=KEYS, quiet=st.booleans())
def test_the_body_is_byte_for_byte_botocores(keys: list[str], quiet: bool) -> None:
    assert request_body(keys, quiet=quiet) == botocore_body(keys, quiet)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\r", "&#13;")


@settings(max_examples=200, deadline=None)
@given(
    deleted=KEYS,
    errors=st.lists(st.tuples(st.text(_XML_TEXT, min_size=1, max_size=20), st.sampled_from(CODES),
                              st.text(_XML_TEXT, max_size=20)), max_size=5),
    versioned=st.booleans(),
    pretty=st.booleans(),
)  # fmt: skip
def test_the_answer_reads_as_botocore_reads_it(
    deleted: list[str], errors: list[tuple[str, str, str]], versioned: bool, pretty: bool
) -> None:
    gap = "\n  " if pretty else ""
    version = f"{gap}<VersionId>v1</VersionId><DeleteMarker>true</DeleteMarker>" if versioned else ""
    entries = [f"<Deleted>{gap}<Key>{_escape(k)}</Key>{version}</Deleted>" for k in deleted]
    entries += [
        f"<Error><Key>{_escape(k)}</Key><Code>{c}</Code><Message>{_escape(m)}</Message></Error>"
        for k, c, m in errors
    ]
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        + gap.join(entries)
        + "</DeleteResult>"
    ).encode()
    assert parse_result(body) == botocore_parse(body)


def _plain_answer(keys: list[str]) -> bytes:
    return (
        f"<DeleteResult>{''.join(f'<Deleted><Key>{k}</Key></Deleted>' for k in keys)}</DeleteResult>".encode()
    )


def test_plain_answers_take_the_fast_path_and_agree_with_the_parser() -> None:
    body = _plain_answer([f"ns/data/g{i:03d}/c{i:020d}" for i in range(1000)])
    assert _parse_plain(body) == botocore_parse(body)  # the regular expressions read it
    assert _parse_plain(body.replace(b"</Key></Deleted>", b"</Key><Extra/></Deleted>", 1)) is not None
    reordered = body.replace(b"<Deleted><Key>", b"<Deleted><VersionId>1</VersionId><Key>", 1)
    assert _parse_plain(reordered) is None and parse_result(reordered) == botocore_parse(reordered)


@pytest.mark.parametrize("cut", [10, 200, -20, -1])
def test_an_answer_cut_short_is_malformed_not_empty(cut: int) -> None:
    body = b'<?xml version="1.0"?>' + _plain_answer([f"ns/data/a{i}" for i in range(10)])
    with pytest.raises(MalformedResult, match="not a whole XML document"):
        parse_result(body[:cut])


def test_a_client_without_the_hooks_is_read_as_botocore_parsed_it() -> None:
    parsed = {"Deleted": [{"Key": "a"}], "Errors": [{"Key": "b", "Code": "NoSuchKey", "Message": "m"}]}
    assert result_of(parsed) == parsed
    assert install(object()) is False  # a fake client keeps its own behaviour


def _stub_options(url: str) -> S3Options:
    return S3Options(
        endpoint_url=url, region="us-east-1", access_key_id="k", secret_access_key=SecretStr("s")
    )


def _deleted_answer(request: Request) -> tuple[int, dict[str, str], bytes]:
    import xml.etree.ElementTree as ET

    keys = [
        e.text or "" for e in ET.fromstring(request.body).iter("{http://s3.amazonaws.com/doc/2006-03-01/}Key")
    ]
    entries = "".join(f"<Deleted><Key>{_escape(k)}</Key></Deleted>" for k in keys)
    return 200, {"Content-Type": "application/xml"}, f"<DeleteResult>{entries}</DeleteResult>".encode()


def test_requests_carry_our_body_and_its_checksum() -> None:
    addresses = [f"data/s/{i} & <{i}>\r\n" for i in range(5)] + ["data/s/plain"]
    with stub_server(_deleted_answer) as stub:
        client = s3_client(_stub_options(stub.url), retries=S3_DELETE_RETRIES)
        with S3BulkDeleter(client, "bucket", "ns/") as deleter:
            assert deleter.delete(addresses) == [DeleteOutcome(a, "deleted") for a in addresses]
    (request,) = stub.requests
    assert request.body == request_body(["ns/" + a for a in addresses])
    headers = {k.lower(): v for k, v in request.headers.items()}
    if "content-md5" in headers:
        import hashlib

        assert headers["content-md5"] == base64.b64encode(hashlib.md5(request.body).digest()).decode()
    else:
        crc = zlib.crc32(request.body).to_bytes(4, "big")
        assert headers["x-amz-checksum-crc32"] == base64.b64encode(crc).decode()


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (b"<DeleteResult><Deleted><Key>ns/data/s/a</Key></Deleted>", "not a whole XML document"),
        (b"<Error><Code>InternalError</Code><Message>try again</Message></Error>", "InternalError"),
    ],
    ids=["cut-short", "error-inside-200"],
)
def test_a_torn_or_failed_200_answer_is_retried_then_failed(answer: bytes, reason: str) -> None:
    with stub_server(lambda request: (200, {"Content-Type": "application/xml"}, answer)) as stub:
        throttle = Throttle(max_retries=1, sleep=lambda s: None)
        client = s3_client(_stub_options(stub.url), retries=S3_DELETE_RETRIES)  # as the sweep's
        with S3BulkDeleter(client, "bucket", "ns/", throttle=throttle) as deleter:
            (outcome,) = deleter.delete(["data/s/a"])
    assert len(stub.requests) == 2  # the request and its one retry
    assert outcome.outcome == "failed" and reason in (outcome.error or ""), outcome
