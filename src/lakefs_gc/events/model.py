"""One object notification, whatever cloud and wrapper it arrived in.

The candidate set (:mod:`lakefs_gc.gc.candidate_set`) only needs to know, per object, whether it
was created or deleted and when; every parser (:mod:`lakefs_gc.events.s3`,
:mod:`lakefs_gc.events.azure`, :mod:`lakefs_gc.events.local`) produces :class:`ObjectEvent`, and
the streaming source stores them as :data:`EVENT_SCHEMA` rows.

Events arrive at least once and in no order (docs/formats/notifications.md, "Ordering and
duplicates"). Two notifications of one object are ordered by their ``sequencer`` when both have one (S3 and
Azure both define it per key only), else by their event time; a redelivered notification has the same
:meth:`ObjectEvent.dedupe_key` as the first delivery.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import pyarrow as pa

from lakefs_gc.errors import GcError

Store = Literal["s3", "azure", "local"]
Kind = Literal["created", "deleted"]
#: sequencers are compared after right-padding with "0" to this many characters: pad the shorter
#: one (notifications.md, "Ordering and duplicates"); Azure's are 32 or 48 hex characters, S3's 16-18
SEQUENCER_WIDTH = 64


class EventFormatError(GcError):
    """A queue message is not a notification we understand: it goes to the dead-letter file.

    The message names what is wrong and where (the field path), never just "bad JSON". It never
    reaches the CLI: a malformed message is data (dead-lettered), not a failure of the service.
    """


@dataclass(frozen=True)
class ObjectEvent:
    """An object was created (or overwritten) or deleted at ``event_time``.

    ``bucket`` is the S3 bucket or the Azure container (for a local namespace: ``""``);
    ``account`` the Azure storage account (``""`` elsewhere); ``key`` the decoded object key
    (blob name, or for a local namespace the absolute path without its leading ``/``), exactly
    as :class:`~lakefs_gc.inventory.mapping.NamespaceRoute` matches inventory rows.
    """

    store: Store
    bucket: str
    key: str
    kind: Kind
    event_time: datetime  # tz-aware UTC
    account: str = ""
    size: int | None = None  # absent on deletes
    etag: str | None = None  # unquoted
    sequencer: str | None = None
    version_id: str | None = None
    event_name: str = ""  # the source's own event type, for the logs (e.g. "ObjectCreated:Put")

    def dedupe_key(self) -> tuple[str, str, str, str, str, str]:
        """Equal for a notification and its redeliveries (not for two writes of one key)."""
        when = self.sequencer if self.sequencer is not None else self.event_time.isoformat()
        return (self.store, self.account, self.bucket, self.key, self.version_id or "", f"{self.kind}@{when}")


def sequencer_order(sequencer: str | None) -> str:
    """A sort key for the sequencers of one object: right-padded with ``0``. None sorts first."""
    return "" if sequencer is None else sequencer.ljust(SEQUENCER_WIDTH, "0")


#: the events as the event table stores them (one row per routed event)
EVENT_SCHEMA = pa.schema(
    [
        ("repository", pa.string()),
        ("address", pa.string()),  # namespace-relative, as in the mark's reports
        ("kind", pa.string()),  # "created" | "deleted"
        ("event_time", pa.timestamp("us", tz="UTC")),
        ("sequencer", pa.string()),  # sequencer_order() of the event's sequencer ("" if none)
        ("size", pa.int64()),
        ("etag", pa.string()),
        ("version_id", pa.string()),
        ("message_id", pa.string()),  # the queue message it came in
        ("received_time", pa.timestamp("us", tz="UTC")),  # when it was drained from the queue
    ]
)
EVENT_DDL = (
    "repository string, address string, kind string, event_time timestamp, sequencer string, "
    "size long, etag string, version_id string, message_id string, received_time timestamp"
)
