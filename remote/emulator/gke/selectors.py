"""Kubernetes label and field selectors, parsed as the API server parses them (a bad one is a 400)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Match = Callable[[dict[str, Any]], bool]
_SET = re.compile(
    r"^\s*(!?)\s*([A-Za-z0-9./_-]+)\s*(?:(notin|in)\s*\(([^)]*)\)|(==|=|!=)\s*([A-Za-z0-9._-]*))?\s*$"
)
_FIELD = re.compile(r"^\s*([A-Za-z.]+)\s*(==|!=|=)\s*(.*?)\s*$")
FIELDS = {"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase", "spec.restartPolicy",
          "spec.schedulerName", "spec.serviceAccountName", "status.podIP", "status.nominatedNodeName",
          "involvedObject.name", "involvedObject.namespace", "involvedObject.uid", "involvedObject.kind",
          "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
          "reason", "reportingComponent", "source", "type", "spec.unschedulable"}  # fmt: skip


class SelectorError(ValueError):
    pass


def _terms(text: str) -> list[str]:
    """Split on commas outside parentheses (``a in (x,y),b``)."""
    terms, depth, current = [], 0, ""
    for char in text:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return [t for t in terms if t.strip()]


def labels(obj: dict[str, Any]) -> dict[str, str]:
    found: dict[str, str] = obj["metadata"].get("labels") or {}
    return found


def _equals(key: str, value: str, negate: bool) -> Match:
    def test(obj: dict[str, Any]) -> bool:
        return (labels(obj).get(key) == value) != negate

    return test


def _member(key: str, choices: set[str], negate: bool) -> Match:
    def test(obj: dict[str, Any]) -> bool:
        return (labels(obj).get(key) in choices) != negate

    return test


def _exists(key: str, negate: bool) -> Match:
    def test(obj: dict[str, Any]) -> bool:
        return (key in labels(obj)) != negate

    return test


def _field_equals(key: str, value: str, negate: bool) -> Match:
    def test(obj: dict[str, Any]) -> bool:
        return (_field(obj, key) == value) != negate

    return test


def label_selector(text: str) -> Match:
    tests: list[Match] = []
    for term in _terms(text):
        found = _SET.match(term)
        if found is None:
            raise SelectorError(f"unable to parse requirement: {term!r}")
        negate, key, set_op, values, op, value = found.groups()
        if negate and (set_op or op):
            raise SelectorError(f"unable to parse requirement: {term!r}")
        if negate:
            tests.append(_exists(key, True))
        elif set_op:
            choices = {v.strip() for v in values.split(",") if v.strip()}
            if set_op == "in":
                tests.append(_member(key, choices, False))
            else:
                tests.append(_member(key, choices, True))
        elif op == "!=":
            tests.append(_equals(key, value, True))
        elif op:
            tests.append(_equals(key, value, False))
        else:
            tests.append(_exists(key, False))
    return lambda o: all(test(o) for test in tests)


def _field(obj: dict[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else str(value)


def field_selector(text: str) -> Match:
    tests: list[Match] = []
    for term in _terms(text):
        found = _FIELD.match(term)
        if found is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        key, op, value = found.groups()
        if key not in FIELDS:
            raise SelectorError(
                f'"{key}" is not a known field selector: only "metadata.name", "metadata.namespace"'
            )
        if op == "!=":
            tests.append(_field_equals(key, value, True))
        else:
            tests.append(_field_equals(key, value, False))
    return lambda o: all(test(o) for test in tests)
