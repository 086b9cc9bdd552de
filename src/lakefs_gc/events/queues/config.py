"""Where object notifications are read from: one :class:`QueueConfig` per queue.

The service's config file lists these under ``service.events``; each one is an event source
(a streaming query). The model is frozen and picklable, because it travels to the Spark Python
worker that drains the queue; secrets are ``SecretStr`` so they never print.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

QueueType = Literal["sqs", "azure-queue", "eventgrid", "directory"]
MessageFormat = Literal["s3", "azure", "local", "auto"]

#: the message format each queue type carries unless told otherwise
DEFAULT_FORMATS: dict[str, MessageFormat] = {
    "sqs": "s3",
    "azure-queue": "azure",
    "eventgrid": "azure",
    "directory": "local",
}
#: fields each queue type needs (one of each tuple)
_REQUIRED: dict[str, tuple[tuple[str, ...], ...]] = {
    "sqs": (("queue_url",),),
    "azure-queue": (("queue_name",), ("connection_string", "endpoint_url")),
    "eventgrid": (("endpoint_url",), ("access_key",), ("namespace_topic",), ("subscription",)),
    "directory": (("path",),),
}
#: fields that belong to one queue type only (given for another type: a mistake, refused)
_OWNED: dict[str, tuple[str, ...]] = {
    "sqs": ("queue_url", "region", "access_key_id", "secret_access_key", "session_token"),
    "azure-queue": ("queue_name", "connection_string", "account_name", "account_key", "sas_token"),
    "eventgrid": ("access_key", "namespace_topic", "subscription"),
    "directory": ("path",),
}
#: 15 minutes: a received message stays hidden until the commit that follows its batch
DEFAULT_VISIBILITY_TIMEOUT_S = 900


class QueueConfig(BaseModel):
    """One notification queue and how to reach it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: QueueType = Field(
        description=(
            "sqs: S3 event notifications in an SQS queue (direct, via SNS or EventBridge); "
            "azure-queue: Event Grid blob events delivered to an Azure Storage Queue; "
            "eventgrid: an Event Grid namespace topic subscription (pull delivery); "
            "directory: the demo's local queue, one JSON file per message."
        )
    )
    format: MessageFormat = Field(
        default="auto",
        description=(
            "Which notification shapes to accept. Defaults by type (sqs: s3, azure-queue and "
            "eventgrid: azure, directory: local); 'auto' recognises every shape, for a queue fed "
            "by several kinds of subscription."
        ),
    )
    endpoint_url: str | None = Field(
        default=None,
        description=(
            "The service endpoint. sqs: a custom endpoint (moto, LocalStack), None for AWS; "
            "azure-queue: the queue service URL (https://<account>.queue.core.windows.net) when no "
            "connection_string is given; eventgrid: the namespace endpoint "
            "(https://<namespace>.<region>-1.eventgrid.azure.net), required."
        ),
    )
    visibility_timeout_seconds: int = Field(
        default=DEFAULT_VISIBILITY_TIMEOUT_S,
        ge=1,
        description=(
            "How long a received message stays hidden (sqs, azure-queue, directory). Messages are "
            "deleted only when Spark commits their batch, which happens when the next batch is "
            "planned: keep this longer than a trigger interval, or they are delivered again "
            "(harmless: duplicates are dropped, but counted). Event Grid fixes its lock duration "
            "on the subscription instead (60-300 s)."
        ),
    )
    concurrency: int = Field(
        default=4,
        ge=1,
        le=64,
        description=(
            "sqs, azure-queue: receive and delete requests in flight at once. One request moves at "
            "most 10 messages (SQS) or deletes one (Storage Queue), so a queue is drained at about "
            "this many requests per round trip: at 50 ms, 4 drain ~800 SQS messages/s."
        ),
    )
    # --- sqs
    queue_url: str | None = Field(default=None, description="sqs: the queue URL (required).")
    region: str | None = Field(default=None, description="sqs: the queue's region; None: boto3's default.")
    access_key_id: str | None = Field(default=None, description="sqs: None uses boto3's credential chain.")
    secret_access_key: SecretStr | None = None
    session_token: SecretStr | None = None
    # --- azure-queue
    queue_name: str | None = Field(default=None, description="azure-queue: the queue's name (required).")
    connection_string: SecretStr | None = Field(
        default=None,
        description="azure-queue: a storage connection string (with QueueEndpoint or account name).",
    )
    account_name: str | None = Field(
        default=None,
        description="azure-queue: the storage account for account_key (default: from endpoint_url).",
    )
    account_key: SecretStr | None = Field(default=None, description="azure-queue: a shared key.")
    sas_token: SecretStr | None = Field(
        default=None, description="azure-queue: a SAS token (process + delete)."
    )
    # --- eventgrid
    access_key: SecretStr | None = Field(default=None, description="eventgrid: the namespace's access key.")
    namespace_topic: str | None = Field(default=None, description="eventgrid: the namespace topic.")
    subscription: str | None = Field(
        default=None, description="eventgrid: the topic's event subscription (queue delivery mode)."
    )
    # --- directory
    path: str | None = Field(
        default=None,
        description="directory: the directory writers drop '*.json' message files into (tmp + rename).",
    )

    @model_validator(mode="before")
    @classmethod
    def _default_format(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("format") is None and data.get("type") in DEFAULT_FORMATS:
            return {**data, "format": DEFAULT_FORMATS[data["type"]]}
        return data

    @model_validator(mode="after")
    def _fields_of_type(self) -> QueueConfig:
        for options in _REQUIRED[self.type]:
            if all(getattr(self, name) is None for name in options):
                raise ValueError(f"a {self.type} queue needs {' or '.join(options)}")
        for other, names in _OWNED.items():
            given = [n for n in names if other != self.type and getattr(self, n) is not None]
            if given:
                raise ValueError(f"a {self.type} queue does not take {', '.join(given)} (they are {other}'s)")
        return self

    def describe(self) -> str:
        """The queue in messages: type and location, never a secret."""
        where = {
            "sqs": self.queue_url,
            "azure-queue": f"{self.endpoint_url or 'connection string'} queue {self.queue_name}",
            "eventgrid": f"{self.endpoint_url} topic {self.namespace_topic} subscription {self.subscription}",
            "directory": self.path,
        }[self.type]
        return f"{self.type} {where}"
