"""Logging of the service: human lines on a terminal, or one JSON object per line for collectors.

``--log-format json`` gives ``{"time", "level", "logger", "message"}`` (plus ``error`` with the
traceback when there is one), which Loki, CloudWatch and Elastic parse without a grok pattern.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import Literal

LogFormat = Literal["text", "json"]


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        body = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat().replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            body["error"] = self.formatException(record.exc_info)
        return json.dumps(body, ensure_ascii=False)


def configure_logging(fmt: LogFormat, *, level: int = logging.INFO) -> None:
    """Route lakefs-gc's loggers to stderr in ``fmt`` (the rest of the process keeps its own)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    logger = logging.getLogger("lakefs_gc")
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False
