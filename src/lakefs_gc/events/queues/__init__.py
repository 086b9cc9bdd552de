"""Notification queues: the :class:`EventQueue` port and one adapter per service.

:func:`open_queue` builds the adapter a :class:`QueueConfig` names. SDKs are imported only by
the adapter that needs them, so a service reading SQS never loads the Azure SDKs.
"""

from __future__ import annotations

from lakefs_gc.events.queues.base import EventQueue, QueueError, QueueMessage
from lakefs_gc.events.queues.config import DEFAULT_FORMATS, MessageFormat, QueueConfig, QueueType

__all__ = [
    "DEFAULT_FORMATS",
    "EventQueue",
    "MessageFormat",
    "QueueConfig",
    "QueueError",
    "QueueMessage",
    "QueueType",
    "open_queue",
]


def open_queue(config: QueueConfig) -> EventQueue:
    """The adapter for ``config`` (clients are created here: call it where the queue is read)."""
    if config.type == "sqs":
        from lakefs_gc.events.queues.sqs import SqsQueue

        return SqsQueue(config)
    if config.type == "azure-queue":
        from lakefs_gc.events.queues.azure_queue import AzureStorageQueue

        return AzureStorageQueue(config)
    if config.type == "eventgrid":
        from lakefs_gc.events.queues.eventgrid import EventGridNamespaceQueue

        return EventGridNamespaceQueue(config)
    from lakefs_gc.events.queues.directory import DirectoryQueue

    return DirectoryQueue(config)
