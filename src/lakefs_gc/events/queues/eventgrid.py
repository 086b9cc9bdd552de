"""Azure Event Grid namespace topics, pull delivery
(docs/formats/notifications.md, "Delivery options").

Blob events reach a namespace topic from the storage account's system topic (CloudEvents
schema); a subscription in queue mode hands them out with a lock. The lock lasts 60-300 s (set on
the subscription), far shorter than the time until Spark commits a batch, so acknowledging often
finds the lock lost: the event is then delivered again and the table drops the duplicate. That is
why the source spools what it receives instead of relying on locks
(docs/formats/spark-data-sources.md, "Replaying a queue").

The real broker waits up to ``max_wait_time`` (10 s at least) on an empty subscription, so every
drain of an idle queue ends with a 10 s receive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from lakefs_gc.events.queues.base import QueueError, QueueMessage, chunks
from lakefs_gc.events.queues.config import QueueConfig

#: the data plane's limits (azure-eventgrid 4.22.1 docstrings)
MAX_RECEIVE = 100
MIN_WAIT_S, MAX_WAIT_S = 10, 120
MAX_LOCK_TOKENS = 100


class EventGridNamespaceQueue:
    """An Event Grid namespace topic subscription read with ``EventGridConsumerClient``."""

    def __init__(self, config: QueueConfig) -> None:
        from azure.core.credentials import AzureKeyCredential
        from azure.eventgrid import EventGridConsumerClient

        assert config.endpoint_url and config.access_key  # QueueConfig requires them
        assert config.namespace_topic and config.subscription
        self.description = config.describe()
        self._client = EventGridConsumerClient(
            config.endpoint_url,
            AzureKeyCredential(config.access_key.get_secret_value()),
            namespace_topic=config.namespace_topic,
            subscription=config.subscription,
        )

    def receive(self, max_messages: int, wait_seconds: float) -> list[QueueMessage]:
        from azure.core.exceptions import AzureError

        from lakefs_gc.events.azure import cloud_event_body

        wait = max(MIN_WAIT_S, min(MAX_WAIT_S, math.ceil(wait_seconds)))
        try:
            details = self._client.receive(
                max_events=max(1, min(MAX_RECEIVE, max_messages)), max_wait_time=wait
            )
        except AzureError as e:
            raise QueueError(f"{self.description}: cannot receive: {e}") from e
        return [_message(d, cloud_event_body) for d in details]

    def acknowledge(self, receipts: Sequence[str]) -> list[str]:
        from azure.core.exceptions import AzureError

        failed: list[str] = []
        for chunk in chunks(receipts, MAX_LOCK_TOKENS):
            try:
                result = self._client.acknowledge(lock_tokens=list(chunk))
            except AzureError as e:
                raise QueueError(f"{self.description}: cannot acknowledge: {e}") from e
            failed.extend(f.lock_token for f in result.failed_lock_tokens)
        return failed

    def close(self) -> None:
        self._client.close()


def _message(detail: Any, body_of: Any) -> QueueMessage:
    event = detail.event
    return QueueMessage(
        id=event.id, body=body_of(event), receipt=detail.broker_properties.lock_token, sent_time=event.time
    )
