"""Azure inventory ``schemaFields``: the names the GC reads, and Azure's time format.

Field names are spelled differently in the docs and in ARM/SDK-written rules; never hard-code one
spelling, look each field up by all of them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timezone

import pyarrow as pa

NAME = ("Name",)
LAST_MODIFIED = ("Last-Modified", "LastModified")
CONTENT_LENGTH = ("Content-Length", "ContentLength")
ETAG = ("ETag", "Etag")
FRACTION_RE = r"(\.\d{6})\d+"  # Azure may write 7 fractional digits; pyarrow parses at most 6 (us)
TS = pa.timestamp("us", tz="UTC")


def field(columns: Sequence[str], names: Sequence[str]) -> str | None:
    """The spelling of a field (one of ``names``) that ``columns`` uses, if any."""
    return next((n for n in names if n in columns), None)


def parse_time(text: str) -> datetime | None:
    """An ISO-8601 time in UTC (naive means UTC; over 6 fractional digits cut), or None."""
    text = re.sub(FRACTION_RE, r"\1", text.strip())
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else parsed.astimezone(timezone.utc)
