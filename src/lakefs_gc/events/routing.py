"""Which repository an object notification is about, and what a queue message becomes.

Every message drained from a queue ends as status rows, one per event or one for the message:
``event`` (routed to a repository's namespace, with its namespace-relative address), ``skipped``
(a test event, a tier change: no object event in it), ``dead`` (malformed: its body and the reason
go to the dead-letter file), ``unrouted`` (outside every configured namespace: normal when a queue
serves more than lakeFS) or ``not_deletable`` (inside a namespace, under a key the GC never
deletes). Pure: the Spark event source (:mod:`lakefs_gc.spark.ingest.events.source`) runs it on
the executors, the tests run it directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from lakefs_gc.errors import ConfigError
from lakefs_gc.events.model import EventFormatError, ObjectEvent, Store, sequencer_order
from lakefs_gc.inventory.mapping import NamespaceRoute, deletable_keys
from lakefs_gc.storage.locations import StorageLocation


@dataclass(frozen=True)
class EventRoute:
    """A repository's namespace as notifications name it.

    :class:`NamespaceRoute` matches ``(bucket or container, key)``; notifications also say which
    store and (Azure) which account, so two accounts' containers of the same name are not
    confused. ``store`` None and ``account`` "" match anything.
    """

    route: NamespaceRoute
    store: Store | None = None
    account: str = ""

    @classmethod
    def of(cls, repository: str, namespace: StorageLocation) -> EventRoute:
        if namespace.kind not in ("s3", "azure", "local"):
            raise ConfigError(f"{repository}: no notifications are read for {namespace.kind} namespaces")
        store: Store = namespace.kind
        return cls(NamespaceRoute.of(repository, namespace), store, namespace.account or "")

    def claims(self, event: ObjectEvent) -> bool:
        if self.store is not None and event.store != self.store:
            return False
        if self.account and event.account and event.account.lower() != self.account.lower():
            return False
        return event.bucket == self.route.container and event.key.startswith(self.route.prefix)


def longest_prefix_first(routes: Sequence[NamespaceRoute | EventRoute]) -> tuple[EventRoute, ...]:
    """The routes as :class:`EventRoute`, longest prefix first: nested namespaces route to the innermost."""
    event_routes = [r if isinstance(r, EventRoute) else EventRoute(r) for r in routes]
    return tuple(sorted(event_routes, key=lambda r: len(r.route.prefix), reverse=True))


def route_event(event: ObjectEvent, routes: Sequence[EventRoute]) -> tuple[str, str] | None:
    """``(repository, namespace-relative address)`` of the first route claiming ``event``
    (``routes`` longest prefix first), or None."""
    for route in routes:
        if route.claims(event):
            return route.route.repository, event.key[len(route.route.prefix) :]
    return None


def message_rows(
    message: dict[str, Any], routes: Sequence[EventRoute], format: Any, seq: int, received: datetime
) -> list[dict[str, Any]]:
    """One message's rows: its routed and unrouted events, or why it has none."""
    from lakefs_gc.events.parse import parse_message

    base = {"message_id": message["id"], "received_time": received, "spool": seq}
    try:
        parsed = parse_message(message["body"], format=format)
    except EventFormatError as e:
        return [{**base, "status": "dead", "reason": str(e), "body": message["body"]}]
    if not parsed.events:
        return [{**base, "status": "skipped", "reason": parsed.skipped or "no object events"}]
    rows = []
    for event in parsed.events:
        routed = route_event(event, routes)
        row = {**base, **_event_columns(event)}
        if routed is None:
            where = "/".join(p for p in (event.account, event.bucket, event.key) if p)
            rows.append({**row, "address": where, "status": "unrouted", "reason": "outside every namespace"})
        else:
            rows.append({**row, "repository": routed[0], "address": routed[1], "status": "event"})
    return rows


def drop_undeletable(rows: list[dict[str, Any]]) -> None:
    """Routed events whose address lakeFS never garbage-collects (``_lakefs/``, ``data/<file>``...)
    become ``not_deletable`` (docs/invariants.md, invariant 3; the same rule as inventories:
    :func:`~lakefs_gc.inventory.mapping.deletable_keys`)."""
    routed = [r for r in rows if r["status"] == "event"]
    if not routed:
        return
    keep = deletable_keys(pa.array([r["address"] for r in routed], pa.string())).to_pylist()
    for row, ok in zip(routed, keep, strict=True):
        if not ok:
            row.update(status="not_deletable", reason=f"not a deletable address in {row['repository']}")
            row["repository"] = None


def _event_columns(event: ObjectEvent) -> dict[str, Any]:
    return {
        "kind": event.kind,
        "event_time": event.event_time,
        "sequencer": sequencer_order(event.sequencer),
        "size": event.size,
        "etag": event.etag,
        "version_id": event.version_id,
    }


def utc(when: datetime) -> datetime:
    """``when`` in UTC (a naive time is taken as UTC: queues report UTC)."""
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)
