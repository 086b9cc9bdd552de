"""Human durations (``24h``, ``90m``, ``7d``, ``1h30m``, ``45s``) for flags and config files."""

from __future__ import annotations

import re
from datetime import timedelta

from lakefs_gc.errors import ConfigError

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """Parse ``1h30m``-style text; a bare number means seconds."""
    raw = text.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", raw):
        return timedelta(seconds=float(raw))
    parts = _PART.findall(raw)
    if not raw or "".join(n + u for n, u in parts) != raw:
        raise ConfigError(f"invalid duration {text!r}: use e.g. 24h, 90m, 7d, 1h30m or 45s")
    return timedelta(seconds=sum(float(n) * _UNITS[u] for n, u in parts))


def format_duration(value: timedelta) -> str:
    """The shortest ``d/h/m/s`` spelling, for messages and reports."""
    seconds = int(value.total_seconds())
    if seconds == 0:
        return "0s"
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        n, seconds = divmod(seconds, size)
        if n:
            out.append(f"{n}{unit}")
    return "".join(out)


def duration_field(value: object) -> object:
    """A pydantic ``before`` validator's body: text parsed, anything else left to pydantic.

    Raises ``ValueError`` (not :class:`ConfigError`) so that pydantic names the field.
    """
    if not isinstance(value, str):
        return value
    try:
        return parse_duration(value)
    except ConfigError as e:
        raise ValueError(str(e)) from e
