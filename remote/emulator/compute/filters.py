"""The subset of GCE's list ``filter`` syntax the emulator understands.

``field = "value"``, ``field != value``, ``field eq regex``, ``field ne regex``, terms joined by
``AND`` (or juxtaposed) and optionally parenthesised; fields may be dotted (``scheduling.preemptible``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Predicate = Callable[[dict[str, Any]], bool]

_TERM = re.compile(
    r"""\s*\(?\s*(?P<field>[A-Za-z_][\w.]*)\s*(?P<op>!=|=|\beq\b|\bne\b|:)\s*
        (?P<value>"(?:[^"\\]|\\.)*"|'[^']*'|[^\s)]+)\s*\)?\s*(?:\bAND\b)?""",
    re.VERBOSE,
)


class FilterError(ValueError):
    """The filter expression is not understood (the server answers 400 invalid)."""


def parse_filter(expression: str) -> Predicate:
    """A predicate over a resource's JSON; an empty expression matches everything."""
    terms: list[tuple[str, str, str]] = []
    position = 0
    text = expression.strip()
    while position < len(text):
        match = _TERM.match(text, position)
        if not match or match.end() == position:
            raise FilterError(
                f"Invalid value for field 'filter': '{expression}'. Invalid list filter expression."
            )
        value = match.group("value")
        if value[:1] in "\"'":
            value = value[1:-1].replace('\\"', '"')
        terms.append((match.group("field"), match.group("op"), value))
        position = match.end()

    def predicate(resource: dict[str, Any]) -> bool:
        return all(_matches(_lookup(resource, field), op, value) for field, op, value in terms)

    return predicate


def _lookup(resource: dict[str, Any], dotted: str) -> str:
    value: Any = resource
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _matches(actual: str, op: str, wanted: str) -> bool:
    if op in ("=", ":"):
        return actual == wanted or (wanted.endswith("*") and actual.startswith(wanted[:-1]))
    if op == "!=":
        return actual != wanted
    found = re.fullmatch(wanted, actual) is not None
    return found if op == "eq" else not found
