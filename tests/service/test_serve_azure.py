"""``lakefs-gc serve`` end to end on Azure Blob Storage (Azurite), with Event Grid events in a
Storage Queue.

Azurite has no Event Grid: the test server plays it, sending a ``BlobCreated``/``BlobDeleted``
event (EventGridEvent schema, base64, as Event Grid delivers to a Storage Queue) for each blob
it writes or deletes, so the service drains exactly what the notifier sent. An Azure inventory
delivery is the candidate set's baseline; what happens after it is known from the events only.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from pyspark.sql import SparkSession

from lakefs_gc.inventory.generate import generate_delivery
from lakefs_gc.service.app import GcService
from lakefs_gc.storage.locations import parse_location, parse_storage_namespace
from tests.service.conftest import AzureWorld, Served
from tests.service.histories import (
    History,
    Marks,
    deleted_branch,
    expired_commits,
    from_inventory,
    marked_addresses,
    one_cycle,
    orphan,
    pause_cycles,
    probe,
    recent_commit,
    running,
    scrape,
    service_settings,
    staging,
    total,
    value,
    wait_for,
    wait_older,
)

REPO = "events-azure"
SOURCE = "azure"


def received(url: str) -> float:
    return value(scrape(url), "lakefs_gc_events_received_total", source=SOURCE)


def test_azure_end_to_end(
    spark: SparkSession, azure_world: AzureWorld, azure_served: Served, tmp_path: Any
) -> None:
    world, served = azure_world, azure_served
    h = History(served.lakefs, REPO, world.namespace(REPO)).create()
    held = expired_commits(h)
    deleted_branch(h)
    staging(h)
    namespace = parse_storage_namespace(world.namespace(REPO))
    snapshot = generate_delivery(namespace, served.options, parse_location(world.inventory), flavour="azure")
    settings = service_settings(
        served.connection, tmp_path / "state", [REPO], storage=served.storage,
        events={SOURCE: world.queue()}, inventory=world.inventory,
    )  # fmt: skip
    service = GcService(settings, spark)
    marks = Marks(service, REPO)
    pause_cycles(service)  # one cycle, once the events of the whole history are in
    with running(service):
        url = service.status.url
        recent_commit(h, held)  # the history goes on while the service ingests
        late = orphan(h, "late/z")
        h.garbage(late, "orphaned after the snapshot: only its event tells")
        wait_for(
            lambda: value(scrape(url), "lakefs_gc_inventory_deliveries_total", outcome="ingested") == 1,
            "the delivery ingested",
            service,
        )
        wait_for(lambda: received(url) == world.notifier.sent, "every event", service)
        wait_older(service, late)
        record, summary = one_cycle(service, marks, datetime.now(timezone.utc))
        assert from_inventory(summary, snapshot), summary["candidates"]
        assert late.address in marked_addresses(service, REPO, record["mark_id"])

        # nothing notifies the sweep's deletes here (Azurite has no Event Grid): the count stands
        wait_for(lambda: received(url) == world.notifier.sent, "every event", service)
        samples = scrape(url)
        assert [probe(url, p)[0] for p in ("/healthz", "/readyz")] == [200, 200]
        service.request_stop()
        assert service.wait() == 0
    assert not any(q.isActive for q in service.queries)

    assert h.problems(world.keys(REPO)) == []
    assert h.unreadable() == []
    garbage = len(h.garbage_addresses)
    assert value(samples, "lakefs_gc_events_received_total", source=SOURCE) == world.notifier.sent
    assert value(samples, "lakefs_gc_events_dead_lettered_total", source=SOURCE) == 0
    assert value(samples, "lakefs_gc_events_skipped_total", source=SOURCE) == 0
    # every upload created one blob under data/ (the rest is lakeFS metadata under _lakefs/)
    assert value(samples, "lakefs_gc_events_ingested_total", source=SOURCE, repository=REPO) == len(h.uploads)
    assert value(samples, "lakefs_gc_inventory_deliveries_total", outcome="ingested") == 1
    assert value(samples, "lakefs_gc_objects_deleted_total", repository=REPO) == garbage == record["deleted"]
    assert value(samples, "lakefs_gc_last_successful_cycle_timestamp_seconds", repository=REPO) > (
        late.written.timestamp()
    )
    assert value(samples, "lakefs_gc_candidate_set_objects", repository=REPO) > 0
    assert total(samples, "lakefs_gc_lakefs_api_request_duration_seconds_count") > 0
    assert total(samples, "lakefs_gc_cycle_failures_total") == 0
