"""The subset of GCE's list ``filter`` syntax the emulator understands.

``field = "value"``, ``field != value``, ``field eq regex``, ``field ne regex``, terms joined by
``AND`` (or juxtaposed) or ``OR`` and optionally parenthesised; fields may be dotted
(``scheduling.preemptible``). ``OR`` binds tighter than ``AND``, as in Google's filter grammar
(AIP-160): ``(a = 1) OR (a = 2) AND (b = 3)`` is ``(a = 1 OR a = 2) AND b = 3``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Predicate = Callable[[dict[str, Any]], bool]

_TERM = re.compile(
    r"""\s*\(?\s*(?P<field>[A-Za-z_][\w.]*)\s*(?P<op>!=|=|\beq\b|\bne\b|:)\s*
        (?P<value>"(?:[^"\\]|\\.)*"|'[^']*'|[^\s)]+)\s*\)?\s*(?:\b(?P<join>AND|OR)\b)?""",
    re.VERBOSE,
)


class FilterError(ValueError):
    """The filter expression is not understood (the server answers 400 invalid)."""


def parse_filter(expression: str) -> Predicate:
    """A predicate over a resource's JSON; an empty expression matches everything."""
    clauses: list[list[tuple[str, str, str]]] = []  # ANDed clauses, each of ORed terms
    joined_by_or = False
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
        term = (match.group("field"), match.group("op"), value)
        if joined_by_or and clauses:
            clauses[-1].append(term)
        else:
            clauses.append([term])
        joined_by_or = match.group("join") == "OR"
        position = match.end()
    if joined_by_or:  # a trailing OR joins nothing
        raise FilterError(
            f"Invalid value for field 'filter': '{expression}'. Invalid list filter expression."
        )

    def predicate(resource: dict[str, Any]) -> bool:
        return all(
            any(_matches(_lookup(resource, field), op, value) for field, op, value in clause)
            for clause in clauses
        )

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
