"""Redelivery dedupe over many batches: bounded by the horizon, every redelivery still dropped.

Drives the event path without Spark: spool files written by :class:`Spool` (real files), read and
routed by the source's executor-side :func:`read_spool`, stored by :class:`EventTableSink` with an
injected clock (one batch a minute). The sink is restarted half-way, as after a crash.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa

from lakefs_gc.events.dedupe import RecentKeys
from lakefs_gc.events.queues import QueueConfig, QueueMessage
from lakefs_gc.events.routing import EventRoute
from lakefs_gc.events.spool import Spool
from lakefs_gc.spark.ingest.events.source import SOURCE_SCHEMA, EventSourceConfig, read_spool
from lakefs_gc.spark.ingest.events.table import EventTable, EventTableSink, recorded_parts
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_location

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
BATCHES, MESSAGES, EVENTS_PER_MESSAGE, REDELIVERED = 200, 50, 5, 0.2
PER_BATCH = MESSAGES * EVENTS_PER_MESSAGE
HORIZON = timedelta(minutes=10)  # ten batches


def _body(store: Path, n: int, when: datetime) -> str:
    """One message of EVENTS_PER_MESSAGE events (the local format takes a JSON array)."""
    time = when.isoformat().replace("+00:00", "Z")
    return json.dumps([
        {"lakefs_gc_event": 1, "kind": "created", "path": f"{store}/ns/data/s1/o{n}-{i}", "time": time,
         "size": 1, "sequencer": f"{n:016x}"}
        for i in range(EVENTS_PER_MESSAGE)
    ])  # fmt: skip


def test_dedupe_keys_stay_bounded_and_every_redelivery_is_dropped(tmp_path: Path) -> None:
    store, rng = tmp_path / "store", random.Random(16)
    config = EventSourceConfig(
        name="soak",
        queue=QueueConfig(type="directory", path=str(tmp_path / "queue")),
        routes=(EventRoute.of("repo", parse_location(f"{store}/ns/")),),
        spool=str(tmp_path / "spool"),
    )
    table = EventTable(parse_location(str(tmp_path / "table")), StorageOptions())
    spool = Spool(Path(config.spool))
    now = [T0]

    def sink() -> EventTableSink:
        return EventTableSink(table, "soak", "s", dedupe_horizon=HORIZON, clock=lambda: now[0])

    current, held = sink(), []
    sent: dict[int, list[QueueMessage]] = {}  # batch -> the messages it delivered first
    stored = deduplicated = redeliveries = 0
    for batch in range(BATCHES):
        now[0] = T0 + timedelta(minutes=batch)
        if batch == BATCHES // 2:
            current = sink()  # a restart: the keys come back from the table
        window = range(max(0, batch - HORIZON // timedelta(minutes=1) + 1), batch)  # within the horizon
        recent = [m for b in window for m in sent[b]]
        again = rng.sample(recent, min(len(recent), int(MESSAGES * REDELIVERED)))
        first = sum(len(m) for m in sent.values())
        sent[batch] = [
            QueueMessage(f"m{first + i}", _body(store, first + i, now[0]), "r")
            for i in range(MESSAGES - len(again))
        ]
        fresh = sent[batch]
        spool.write(batch + 1, [*fresh, *again], now[0])
        rows = pa.Table.from_batches(list(read_spool(config, batch + 1)), schema=SOURCE_SCHEMA)
        counts = current.store(rows, batch)
        assert counts is not None
        stored, deduplicated, redeliveries = (
            stored + counts.events,
            deduplicated + counts.deduplicated,
            redeliveries + len(again) * EVENTS_PER_MESSAGE,
        )
        held.append(len(current.seen))
    assert redeliveries > 0.19 * BATCHES * PER_BATCH
    assert (stored, deduplicated) == (
        sum(len(m) for m in sent.values()) * EVENTS_PER_MESSAGE,
        redeliveries,
    )  # every redelivery dropped, nothing else
    bound = (HORIZON // timedelta(minutes=1) + 1) * PER_BATCH
    assert max(held) <= bound  # independent of the number of batches
    assert held[-1] >= HORIZON // timedelta(minutes=1) * PER_BATCH * (1 - REDELIVERED)
    assert len(recorded_parts(table)) == BATCHES


def test_recent_keys_forget_what_is_older_than_the_horizon() -> None:
    keys = RecentKeys(timedelta(minutes=5))
    keys.add([("r", "a", "created", "1", "")], T0)
    keys.add([("r", "b", "created", "1", "")], T0 + timedelta(minutes=3))
    keys.add([("r", "a", "created", "1", "")], T0 + timedelta(minutes=4))  # stored again later
    assert keys.expire(T0 + timedelta(minutes=5)) == 0
    assert ("r", "a", "created", "1", "") in keys and len(keys) == 2
    assert keys.expire(T0 + timedelta(minutes=8, seconds=1)) == 1  # b (3 min) went, a (4 min) stays
    assert ("r", "b", "created", "1", "") not in keys and ("r", "a", "created", "1", "") in keys
    assert keys.expire(T0 + timedelta(minutes=10)) == 1 and len(keys) == 0
