"""Durations for flags and config files."""

from __future__ import annotations

from datetime import timedelta

import pytest

from lakefs_gc.durations import format_duration, parse_duration
from lakefs_gc.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("24h", timedelta(hours=24)),
        ("90m", timedelta(minutes=90)),
        ("7d", timedelta(days=7)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("45s", timedelta(seconds=45)),
        ("2w", timedelta(days=14)),
        ("1.5h", timedelta(minutes=90)),
        ("3600", timedelta(hours=1)),
        (" 6H ", timedelta(hours=6)),
    ],
)
def test_parse(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "h", "10x", "1h 30", "-5m", "1d2", "abc"])
def test_invalid_durations_name_the_input(text: str) -> None:
    with pytest.raises(ConfigError, match="invalid duration"):
        parse_duration(text)


def test_format() -> None:
    assert format_duration(timedelta(hours=24)) == "1d"
    assert format_duration(timedelta(hours=1, minutes=30, seconds=5)) == "1h30m5s"
    assert format_duration(timedelta(0)) == "0s"
