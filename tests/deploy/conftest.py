"""Fixtures of the deploy tests: the S3 world of the service's end-to-end tests (a notifying moto
bucket, its SQS queue, an inventory bucket) and the lakeFS test server on it."""

from tests.service.conftest import s3_served, s3_world

__all__ = ["s3_served", "s3_world"]
