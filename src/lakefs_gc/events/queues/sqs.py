"""Amazon SQS: where S3 event notifications arrive (directly, via SNS or via EventBridge)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from lakefs_gc.events.queues.base import QueueError, QueueMessage, Requests, chunks
from lakefs_gc.events.queues.config import QueueConfig

#: SQS limits (docs/formats/notifications.md, "Delivery wrappers"): messages per receive,
#: entries per delete batch, long poll
MAX_RECEIVE = 10
MAX_DELETE_BATCH = 10
MAX_WAIT_S = 20
#: botocore retries for the queue calls (throttling and transient errors)
SQS_RETRIES = {"mode": "standard", "max_attempts": 5}


class SqsQueue:
    """An SQS queue read with long polling; acknowledging deletes the messages."""

    def __init__(self, config: QueueConfig) -> None:
        if config.queue_url is None:
            raise QueueError(f"{config.describe()}: no queue_url")
        self.description = config.describe()
        self.queue_url = config.queue_url
        self.visibility_timeout = config.visibility_timeout_seconds
        self._client = _client(config)
        self._requests = Requests(config.concurrency, "sqs")

    def receive(self, max_messages: int, wait_seconds: float) -> list[QueueMessage]:
        """Up to ``concurrency`` receives at once (:meth:`Requests.receive`)."""
        return self._requests.receive(self._receive_once, max_messages, MAX_RECEIVE, wait_seconds)

    def _receive_once(self, count: int, wait_seconds: float) -> list[QueueMessage]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self._client.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=count,
                WaitTimeSeconds=max(0, min(MAX_WAIT_S, round(wait_seconds))),
                VisibilityTimeout=self.visibility_timeout,
                MessageSystemAttributeNames=["SentTimestamp"],
            )
        except (BotoCoreError, ClientError) as e:
            raise QueueError(f"{self.description}: cannot receive: {e}") from e
        return [_message(m) for m in response.get("Messages", [])]

    def acknowledge(self, receipts: Sequence[str]) -> list[str]:
        from botocore.exceptions import BotoCoreError, ClientError

        def delete(chunk: Sequence[str]) -> list[str]:
            entries = [{"Id": str(i), "ReceiptHandle": r} for i, r in enumerate(chunk)]
            try:
                response = self._client.delete_message_batch(QueueUrl=self.queue_url, Entries=entries)
            except (BotoCoreError, ClientError) as e:
                raise QueueError(f"{self.description}: cannot delete messages: {e}") from e
            return [chunk[int(f["Id"])] for f in response.get("Failed", [])]

        unique = list(dict.fromkeys(receipts))  # SQS refuses a batch naming one receipt twice
        return [r for failed in self._requests.map(delete, chunks(unique, MAX_DELETE_BATCH)) for r in failed]

    def close(self) -> None:
        self._requests.close()
        self._client.close()


def _message(message: dict[str, Any]) -> QueueMessage:
    sent = message.get("Attributes", {}).get("SentTimestamp")
    sent_time = datetime.fromtimestamp(int(sent) / 1000, timezone.utc) if sent else None
    return QueueMessage(message["MessageId"], message["Body"], message["ReceiptHandle"], sent_time)


def _client(config: QueueConfig) -> Any:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError

    session = boto3.session.Session()
    kwargs: dict[str, Any] = {}
    if config.access_key_id:
        kwargs["aws_access_key_id"] = config.access_key_id
        kwargs["aws_secret_access_key"] = _secret(config.secret_access_key)
        kwargs["aws_session_token"] = _secret(config.session_token)
    try:
        return session.client(
            "sqs",
            endpoint_url=config.endpoint_url,
            region_name=config.region or session.region_name or _region_of(config.queue_url or ""),
            config=Config(retries=SQS_RETRIES),
            **kwargs,
        )
    except (BotoCoreError, ValueError) as e:
        raise QueueError(f"{config.describe()}: cannot configure SQS access: {e}") from e


def _region_of(queue_url: str) -> str:
    """``https://sqs.<region>.amazonaws.com/<account>/<name>``'s region, else us-east-1."""
    host = queue_url.split("://", 1)[-1].split("/", 1)[0]
    parts = host.split(".")
    return parts[1] if len(parts) > 3 and parts[0] == "sqs" else "us-east-1"


def _secret(value: Any) -> str | None:
    return value.get_secret_value() if value is not None else None
