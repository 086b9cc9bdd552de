"""HTTP/1.1 message framing for the test server: request bodies and byte ranges.

Request line and headers are parsed by the standard library (``http.server``); what it leaves
to the application is where a request *body* ends (RFC 9112 §6). Getting that wrong stores
empty objects and then reads the unread body as the next request on the same connection, so
lakeFS's clients (``lakefs``, ``lakefs-spec``), which upload with ``Transfer-Encoding:
chunked``, must be framed exactly as Go's ``net/http`` frames them:

* ``Transfer-Encoding: chunked`` wins over ``Content-Length`` (and such a request closes the
  connection afterwards, the defence against request smuggling); any other transfer coding
  is answered 501 like Go's "unsupported transfer encoding";
* ``Content-Length`` must be one decimal number (repeated values must agree), else 400;
* neither header: no body.

A framing error is answered and the connection closed, never read as the next request.

Byte ranges follow lakeFS's ``httputil.ParseRange``: one range per request (``bytes=a-b``,
``bytes=a-``, ``bytes=-n``), the end clipped to the object; a start past the end or a zero
suffix is unsatisfiable (416 with ``Content-Range: bytes */size``), any other malformed range
is answered 416 without it.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from email.message import Message
from typing import Protocol

#: longest chunk-size or trailer line accepted (Go: 4 KiB for chunk lines)
MAX_LINE = 4096
_HEX = frozenset(string.hexdigits)


class Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...
    def readline(self, size: int = ..., /) -> bytes: ...


class FramingError(Exception):
    """A request whose body cannot be delimited; answered with ``status``, then the connection closes."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Body:
    data: bytes
    #: the connection must close after the answer (both Transfer-Encoding and Content-Length)
    close: bool = False


def read_body(rfile: Readable, headers: Message) -> Body:
    """The complete request body, consumed from ``rfile`` exactly up to its end."""
    encodings = headers.get_all("Transfer-Encoding") or []
    lengths = headers.get_all("Content-Length") or []
    if encodings:
        codings = [c.strip().lower() for value in encodings for c in value.split(",") if c.strip()]
        if codings != ["chunked"]:
            raise FramingError(501, f"unsupported transfer encoding: {', '.join(encodings)!r}")
        return Body(read_chunked(rfile), close=bool(lengths))
    if not lengths:
        return Body(b"")
    values = {v.strip() for value in lengths for v in value.split(",")}
    if len(values) != 1:
        raise FramingError(400, f"conflicting Content-Length values: {sorted(values)}")
    (value,) = values
    if not value.isdigit() or not value.isascii():
        raise FramingError(400, f"invalid Content-Length {value!r}")
    length = int(value)
    data = rfile.read(length) if length else b""
    if len(data) != length:
        raise FramingError(400, f"request body ended after {len(data)} of {length} bytes")
    return Body(data)


def read_chunked(rfile: Readable) -> bytes:
    """Decode a chunked body (RFC 9112 §7.1): sized chunks, a zero chunk, trailer fields, CRLF."""
    parts: list[bytes] = []
    while True:
        line = _read_line(rfile, "chunk size")
        size_text = line.split(b";", 1)[0].strip().decode("latin-1")
        if not size_text or not set(size_text) <= _HEX or len(size_text) > 16:
            raise FramingError(400, f"invalid chunk size line {line[:40]!r}")
        size = int(size_text, 16)
        if size == 0:
            break
        chunk = rfile.read(size)
        if len(chunk) != size:
            raise FramingError(400, f"chunk ended after {len(chunk)} of {size} bytes")
        if _read_line(rfile, "chunk end") != b"":
            raise FramingError(400, "chunk data is not followed by CRLF")
        parts.append(chunk)
    while _read_line(rfile, "trailer") != b"":
        pass  # trailer fields carry nothing lakeFS's API uses
    return b"".join(parts)


def _read_line(rfile: Readable, what: str) -> bytes:
    line = rfile.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise FramingError(400, f"{what} line too long")
    if not line.endswith(b"\n"):
        raise FramingError(400, f"request body ended inside a {what} line")
    return line.rstrip(b"\r\n")


class RangeNotSatisfiable(Exception):
    """lakeFS answers 416; ``unsatisfiable`` adds ``Content-Range: bytes */size``."""

    def __init__(self, spec: str, *, unsatisfiable: bool) -> None:
        super().__init__(f"range {spec!r} not satisfiable")
        self.unsatisfiable = unsatisfiable


def parse_range(spec: str, length: int) -> tuple[int, int]:
    """``(start, end)`` inclusive, as lakeFS's ``httputil.ParseRange`` computes them."""
    bad = RangeNotSatisfiable(spec, unsatisfiable=False)
    if not spec.startswith("bytes=") or "," in spec:
        raise bad
    first, sep, last = (part.strip() for part in spec[len("bytes=") :].partition("-"))
    if not sep or (not first and not last):
        raise bad
    if not first:  # a suffix: the last N bytes
        suffix = _int64(last)
        if suffix is None:
            raise bad
        if suffix == 0:
            raise RangeNotSatisfiable(spec, unsatisfiable=True)
        return max(length - suffix, 0), length - 1
    start, end = _int64(first), (_int64(last) if last else length - 1)
    if start is None or end is None or (last and start > end):
        raise bad
    if start > length - 1:
        raise RangeNotSatisfiable(spec, unsatisfiable=True)
    return start, min(end, length - 1)


def _int64(text: str) -> int | None:
    """Go's ``strconv.ParseInt(s, 10, 64)`` when it gives a non-negative value, else None."""
    digits = text[1:] if text.startswith("+") else text
    if not digits.isdigit() or not digits.isascii() or int(digits) >= 2**63:
        return None
    return int(digits)
