"""Azure Storage Queue: Event Grid blob events delivered to a queue
(docs/formats/notifications.md, "Delivery options").

Message content is read raw (no decode policy): Event Grid and the older SDKs store it
base64-encoded, others as plain JSON, and :func:`lakefs_gc.events.parse.parse_message` accepts
both. A Storage Queue has no long polling, so a receive that finds nothing polls until its wait
is over.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from lakefs_gc.events.queues.base import QueueError, QueueMessage, Requests, poll
from lakefs_gc.events.queues.config import QueueConfig

#: messages per Get Messages request (the service's limit)
MAX_RECEIVE = 32
#: how often an empty queue is asked again while a receive waits
POLL_S = 0.25
#: the error codes of a receipt that can no longer delete its message (deleted, or received again)
_STALE = frozenset({"MessageNotFound", "PopReceiptMismatch", "QueueNotFound"})


class AzureStorageQueue:
    """An Azure Storage Queue (or Azurite's); acknowledging deletes with the pop receipt."""

    def __init__(self, config: QueueConfig) -> None:
        self.description = config.describe()
        self.visibility_timeout = config.visibility_timeout_seconds
        self._client = _client(config)
        self._requests = Requests(config.concurrency, "azure-queue")

    def receive(self, max_messages: int, wait_seconds: float) -> list[QueueMessage]:
        """Up to ``concurrency`` Get Messages at once (:meth:`Requests.receive`)."""
        return self._requests.receive(self._receive_polling, max_messages, MAX_RECEIVE, wait_seconds)

    def _receive_polling(self, count: int, wait_seconds: float) -> list[QueueMessage]:
        from azure.core.exceptions import AzureError

        def receive_once() -> list[QueueMessage]:
            try:
                pages = self._client.receive_messages(
                    messages_per_page=count, max_messages=count, visibility_timeout=self.visibility_timeout
                )
                return [_message(m) for m in pages]
            except AzureError as e:
                raise QueueError(f"{self.description}: cannot receive: {e}") from e

        return poll(receive_once, wait_seconds, POLL_S)

    def acknowledge(self, receipts: Sequence[str]) -> list[str]:
        """One Delete Message per receipt (the service has no batch delete), ``concurrency`` at once."""
        return [r for r in self._requests.map(self._delete, list(receipts)) if r is not None]

    def _delete(self, receipt: str) -> str | None:
        """``receipt`` if its message could not be deleted (stale), else None."""
        from azure.core.exceptions import AzureError, HttpResponseError

        try:
            message_id, pop_receipt = json.loads(receipt)
        except (ValueError, TypeError):
            return receipt  # not one of ours: nothing to delete
        try:
            self._client.delete_message(message_id, pop_receipt)
        except HttpResponseError as e:
            if e.status_code == 404 or getattr(e, "error_code", None) in _STALE:
                return receipt
            raise QueueError(f"{self.description}: cannot delete message {message_id}: {e}") from e
        except AzureError as e:
            raise QueueError(f"{self.description}: cannot delete message {message_id}: {e}") from e
        return None

    def close(self) -> None:
        self._requests.close()
        self._client.close()


def receipt_of(message_id: str, pop_receipt: str) -> str:
    """A message's id and pop receipt in one string (both are needed to delete it)."""
    return json.dumps([message_id, pop_receipt])


def _message(message: Any) -> QueueMessage:
    content = message.content
    body = content.decode("utf-8") if isinstance(content, bytes) else str(content or "")
    return QueueMessage(message.id, body, receipt_of(message.id, message.pop_receipt), message.inserted_on)


def _client(config: QueueConfig) -> Any:
    from azure.storage.queue import QueueClient

    assert config.queue_name is not None  # QueueConfig requires it
    try:
        if config.connection_string is not None:
            return QueueClient.from_connection_string(
                config.connection_string.get_secret_value(), config.queue_name
            )
        assert config.endpoint_url is not None  # QueueConfig requires one of them
        return QueueClient(config.endpoint_url, config.queue_name, credential=_credential(config))
    except ValueError as e:  # never quotes the connection string
        raise QueueError(f"{config.describe()}: cannot configure Azure queue access: {e}") from e


def _credential(config: QueueConfig) -> Any:
    if config.account_key is not None:
        account = config.account_name or _account_of(config.endpoint_url or "")
        return {"account_name": account, "account_key": config.account_key.get_secret_value()}
    if config.sas_token is not None:
        return config.sas_token.get_secret_value()
    return None


def _account_of(url: str) -> str:
    """The account of ``https://<account>.queue.core.windows.net`` or path-style
    ``http://127.0.0.1:10001/<account>`` (Azurite)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ".queue." in host:
        return host.split(".", 1)[0]
    return parts.path.strip("/").split("/", 1)[0]
