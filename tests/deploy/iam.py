"""A small IAM policy evaluator: enough of AWS's rules to decide whether one identity policy allows
one request (what the coverage test needs), and strict about anything else it meets.

An explicit Deny wins, then any Allow, else the request is implicitly denied. Action and Resource
patterns use IAM's wildcards (``*`` any run of characters, ``/`` included; ``?`` any one
character); actions compare case-insensitively, resources case-sensitively. Conditions:
``StringLike`` and ``StringEquals`` (a key the request does not carry makes them false).
NotAction, NotResource and other operators are refused rather than approximated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_OPERATORS = ("StringLike", "StringEquals")


@dataclass(frozen=True)
class Decision:
    allowed: bool
    statement: str | None  # the Sid that decided (the Deny, or the first Allow)


def _listify(value: str | Sequence[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _glob(pattern: str, value: str, *, case: bool) -> bool:
    regex = re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".")
    return re.fullmatch(regex, value, 0 if case else re.IGNORECASE) is not None


def _conditions_hold(conditions: Mapping[str, Mapping[str, Any]], context: Mapping[str, str]) -> bool:
    for operator, tests in conditions.items():
        if operator not in _OPERATORS:
            raise ValueError(f"condition operator {operator} is not supported by this evaluator")
        for key, expected in tests.items():
            if key not in context:
                return False
            value = context[key]
            if operator == "StringLike":
                if not any(_glob(p, value, case=True) for p in _listify(expected)):
                    return False
            elif value not in _listify(expected):
                return False
    return True


def evaluate(policy: Mapping[str, Any], action: str, resource: str, context: Mapping[str, str]) -> Decision:
    allow: str | None = None
    for statement in policy["Statement"]:
        unsupported = {"NotAction", "NotResource", "NotPrincipal", "Principal"} & set(statement)
        if unsupported:
            raise ValueError(f"{sorted(unsupported)} not supported by this evaluator")
        if not any(_glob(p, action, case=False) for p in _listify(statement["Action"])):
            continue
        if not any(_glob(p, resource, case=True) for p in _listify(statement["Resource"])):
            continue
        if not _conditions_hold(statement.get("Condition", {}), context):
            continue
        sid = statement.get("Sid", "?")
        if statement["Effect"] == "Deny":
            return Decision(False, sid)
        allow = allow or sid
    return Decision(allow is not None, allow)
