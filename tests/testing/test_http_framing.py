"""HTTP/1.1 on the wire: the test server delimits request bodies like Go's net/http, on raw sockets.

Chunked bodies (with extensions and trailers), ``Expect: 100-continue``, pipelined requests on one
keep-alive connection, and every malformed frame answered and the connection closed, never read as
the next request. Byte ranges against lakeFS's ``httputil.ParseRange`` cases.
"""

from __future__ import annotations

import base64
import hashlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import pytest

from lakefs_gc.testing.framing import RangeNotSatisfiable, parse_range
from lakefs_gc.testing.server import LakeFSTestServer
from tests.testing.sdk import Lakefs

REPO = "wire"


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


class Connection:
    """One raw keep-alive connection to the server, with the server's Basic credentials."""

    def __init__(self, server: LakeFSTestServer) -> None:
        host, port = server.endpoint.split("//", 1)[1].split("/", 1)[0].split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.rfile: BinaryIO = self.sock.makefile("rb")
        creds = server.credentials
        token = base64.b64encode(f"{creds.access_key_id}:{creds.secret_access_key}".encode()).decode()
        self.auth = f"Authorization: Basic {token}\r\n"

    def request(self, method: str, target: str, headers: str = "", body: bytes = b"") -> bytes:
        return f"{method} /api/v1{target} HTTP/1.1\r\nHost: x\r\n{self.auth}{headers}\r\n".encode() + body

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self, *, head: bool = False) -> Answer:
        status_line = self.rfile.readline()
        assert status_line.startswith(b"HTTP/1.1 "), status_line
        headers = {}
        while (line := self.rfile.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        length = 0 if head else int(headers.get("content-length", "0"))
        return Answer(int(status_line.split()[1]), headers, self.rfile.read(length))

    def closed_by_server(self) -> bool:
        return self.rfile.read(1) == b""

    def close(self) -> None:
        self.rfile.close()
        self.sock.close()


@pytest.fixture
def conn(server: LakeFSTestServer, lakefs: Lakefs) -> Iterator[Connection]:
    lakefs.create_repo(REPO, f"local://{REPO}")
    connection = Connection(server)
    yield connection
    connection.close()


def upload_target(path: str) -> str:
    return f"/repositories/{REPO}/branches/main/objects?path={path}"


def chunked(*chunks: bytes, trailer: bytes = b"") -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n" + trailer + b"\r\n"


def test_a_chunked_upload_stores_every_byte_and_the_connection_stays_usable(conn: Connection) -> None:
    body = b"0\r\n" + b"x" * 70_000  # a chunk that looks like a last-chunk line must not end the body
    frames = b"%x;name=value\r\n%s\r\n" % (3, body[:3]) + chunked(body[3:], trailer=b"X-Checksum: abc\r\n")
    conn.send(conn.request("POST", upload_target("a"), "Transfer-Encoding: chunked\r\n", frames))
    created = conn.read()
    assert created.status == 201, created.body
    assert b'"size_bytes": %d' % len(body) in created.body
    assert hashlib.md5(body).hexdigest().encode() in created.body
    conn.send(conn.request("GET", f"/repositories/{REPO}/refs/main/objects?path=a"))
    got = conn.read()
    assert (got.status, got.body) == (200, body)
    assert "connection" not in got.headers


def test_pipelined_requests_are_answered_in_order(conn: Connection) -> None:
    conn.send(
        conn.request("POST", upload_target("p1"), "Transfer-Encoding: chunked\r\n", chunked(b"one"))
        + conn.request("POST", upload_target("p2"), "Content-Length: 3\r\n", b"two")
        + conn.request("GET", f"/repositories/{REPO}/refs/main/objects?path=p1")
        + conn.request("GET", f"/repositories/{REPO}/refs/main/objects?path=p2")
    )
    assert [conn.read().status for _ in range(2)] == [201, 201]
    assert [conn.read().body for _ in range(2)] == [b"one", b"two"]


def test_a_refused_request_still_consumes_its_body(conn: Connection) -> None:
    """Errors found before the body matters (no such branch, bad credentials) keep the stream in step."""
    missing = f"/repositories/{REPO}/branches/nope/objects?path=x"
    conn.send(conn.request("POST", missing, "Transfer-Encoding: chunked\r\n", chunked(b"lost")))
    assert conn.read().status == 404
    no_auth = b"POST /api/v1" + upload_target("x").encode() + b" HTTP/1.1\r\nHost: x\r\n"
    conn.send(no_auth + b"Content-Length: 4\r\n\r\nlost")
    assert conn.read().status == 401
    conn.send(conn.request("GET", f"/repositories/{REPO}/branches/main"))
    assert conn.read().status == 200


def test_expect_100_continue_is_answered_before_the_body_is_sent(conn: Connection) -> None:
    headers = "Content-Length: 5\r\nExpect: 100-continue\r\n"
    conn.send(conn.request("POST", upload_target("e"), headers))
    interim = conn.read(head=True)
    assert interim.status == 100
    conn.send(b"hello")
    assert conn.read().status == 201
    conn.send(conn.request("GET", f"/repositories/{REPO}/refs/main/objects?path=e"))
    assert conn.read().body == b"hello"


def test_transfer_encoding_wins_over_content_length_and_then_closes(conn: Connection) -> None:
    headers = "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n"
    conn.send(conn.request("POST", upload_target("both"), headers, chunked(b"chunked wins")))
    answer = conn.read()
    assert answer.status == 201 and b'"size_bytes": 12' in answer.body
    assert answer.headers["connection"] == "close" and conn.closed_by_server()


@pytest.mark.parametrize(
    ("headers", "body", "status"),
    [
        ("Transfer-Encoding: chunked\r\n", b"zz\r\nab\r\n0\r\n\r\n", 400),  # not hexadecimal
        ("Transfer-Encoding: chunked\r\n", b"5\r\nabcdefgh\r\n0\r\n\r\n", 400),  # chunk longer than said
        ("Transfer-Encoding: chunked\r\n", b"5\r\nab", 400),  # the client stops mid-chunk
        ("Transfer-Encoding: gzip, chunked\r\n", chunked(b"x"), 501),
        ("Transfer-Encoding: identity\r\n", b"", 501),
        ("Content-Length: abc\r\n", b"", 400),
        ("Content-Length: -1\r\n", b"", 400),
        ("Content-Length: 3\r\nContent-Length: 4\r\n", b"abcd", 400),
    ],
)
def test_a_body_that_cannot_be_delimited_is_refused_and_the_connection_closed(
    conn: Connection, headers: str, body: bytes, status: int
) -> None:
    conn.send(conn.request("POST", upload_target("bad"), headers, body))
    if body.endswith(b"ab"):
        conn.sock.shutdown(socket.SHUT_WR)
    answer = conn.read()
    assert answer.status == status and answer.headers["connection"] == "close"
    assert answer.headers["content-type"] == "application/json" and b'"message"' in answer.body
    assert conn.closed_by_server()


def test_repeated_equal_content_lengths_are_one_length(conn: Connection) -> None:
    conn.send(conn.request("POST", upload_target("cl"), "Content-Length: 3, 3\r\n", b"abc"))
    assert conn.read().status == 201


def test_head_answers_the_length_without_a_body(conn: Connection) -> None:
    conn.send(conn.request("POST", upload_target("h"), "Content-Length: 10\r\n", b"0123456789"))
    assert conn.read().status == 201
    target = f"/repositories/{REPO}/refs/main/objects?path=h"
    conn.send(conn.request("HEAD", target))
    head = conn.read(head=True)
    assert (head.status, head.headers["content-length"]) == (200, "10")
    assert head.headers["accept-ranges"] == "bytes"
    conn.send(conn.request("HEAD", target, "Range: bytes=2-4\r\n"))
    part = conn.read(head=True)
    assert (part.status, part.headers["content-length"]) == (206, "3")
    assert part.headers["content-range"] == "bytes 2-4/10"
    conn.send(conn.request("HEAD", target, "Range: bytes=10-\r\n"))
    assert conn.read(head=True).status == 416
    conn.send(conn.request("GET", target, "Range: bytes=-3\r\n"))  # the connection is still in step
    assert conn.read().body == b"789"


# lakeFS's own ParseRange cases (pkg/httputil/range_test.go): (spec, length) -> (start, end)
@pytest.mark.parametrize(
    ("spec", "length", "expected"),
    [
        ("bytes=0-20", 50, (0, 20)),
        ("bytes=0-20", 10, (0, 9)),
        ("bytes=-20", 50, (30, 49)),
        ("bytes=20-", 50, (20, 49)),
        ("bytes=-20", 10, (0, 9)),
        ("bytes=0-20", 20, (0, 19)),
        ("bytes=0-19", 20, (0, 19)),
        ("bytes=1-300", 20, (1, 19)),
        ("bytes=19-", 20, (19, 19)),
        ("bytes= 2 - 4 ", 20, (2, 4)),
    ],
)
def test_parse_range(spec: str, length: int, expected: tuple[int, int]) -> None:
    assert parse_range(spec, length) == expected


@pytest.mark.parametrize(
    ("spec", "unsatisfiable"),
    [
        ("bytes=-0-19", False),
        ("0-19", False),
        ("bytes=-", False),
        ("bytes=0-foo", False),
        ("bytes=foo-19", False),
        ("bytes=20-", True),
        ("bytes=21-", True),
        ("bytes=-0", True),
        ("bytes=20-25", True),
        ("bytes=4-2", False),
        ("bytes=1-2,4-5", False),  # one range per request, like S3
        ("bytes=1", False),
    ],
)
def test_parse_range_refusals(spec: str, unsatisfiable: bool) -> None:
    with pytest.raises(RangeNotSatisfiable) as refused:
        parse_range(spec, 20)
    assert refused.value.unsatisfiable is unsatisfiable
