"""The contracts' backends as fixtures: ``local_backend``, ``s3_backend``, ``azure_backend``."""

from tests.contracts.backends import azure_backend, local_backend, s3_backend

__all__ = ["azure_backend", "local_backend", "s3_backend"]
