"""Check a JSON value against a discovery-document schema, as Google's front end reads and writes it.

Requests and responses differ where Google's JSON mapping does: a request may give an int64 as a
number or a string (the proto3 JSON parser takes both), a response always writes it as a string; a
request must carry the fields the document marks required for its method
(``annotations.required``), a response need not. Both are refused fields the schema does not have
and enum values outside its list.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal

Direction = Literal["request", "response"]

_RANGES = {"int32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1)}
_STRING_RANGES = {"int64": (-(2**63), 2**63 - 1), "uint64": (0, 2**64 - 1)}
_DURATION = re.compile(r"-?\d+(\.\d{1,9})?s")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*={0,2}")  # "byte": base64, standard or URL-safe


class Checker:
    """One request's or response's walk through a document's schemas; ``problems`` collects what is wrong."""

    def __init__(self, schema_of: Callable[[str], dict[str, Any]], direction: Direction, method: str) -> None:
        self.schema_of = schema_of
        self.direction = direction
        self.method = method
        self.problems: list[str] = []

    def fail(self, where: str, message: str) -> None:
        self.problems.append(f"{where or '$'}: {message}")

    def check(self, schema: dict[str, Any], value: Any, where: str) -> None:
        if value is None:
            if self.direction == "response":
                self.fail(where, "is null: Google leaves unset fields out")
            return  # a request's null reads as the field's default
        if "$ref" in schema:
            name = schema["$ref"]
            self.check(self.schema_of(name), value, where)
            return
        kind = schema.get("type", "any")
        if kind == "any":
            return
        if kind == "object":
            self._object(schema, value, where)
        elif kind == "array":
            if not isinstance(value, list):
                self.fail(where, f"is {_json_type(value)}, the schema says array")
                return
            for i, item in enumerate(value):
                self.check(schema.get("items", {}), item, f"{where}[{i}]")
        elif kind == "string":
            self._string(schema, value, where)
        elif kind == "integer":
            self._integer(schema, value, where)
        elif kind == "number":
            if isinstance(value, bool) or not isinstance(value, int | float):
                # proto3 JSON also writes "NaN", "Infinity", "-Infinity" as strings
                if not (isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity")):
                    self.fail(where, f"is {_json_type(value)}, the schema says number")
        elif kind == "boolean":
            if not isinstance(value, bool):
                self.fail(where, f"is {_json_type(value)}, the schema says boolean")

    def _object(self, schema: dict[str, Any], value: Any, where: str) -> None:
        if not isinstance(value, dict):
            self.fail(where, f"is {_json_type(value)}, the schema says object")
            return
        properties: dict[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            at = f"{where}.{key}" if where else key
            if key in properties:
                self.check(properties[key], item, at)
            elif extra is not None:
                self.check(extra, item, f"{where}[{key!r}]")
            else:
                known = ", ".join(sorted(properties)) or "none"
                self.fail(at, f"unknown field (the schema's fields: {known})")
        if self.direction == "request":
            for key, spec in properties.items():
                required = spec.get("annotations", {}).get("required", [])
                if self.method in required and key not in value:
                    self.fail(f"{where}.{key}" if where else key, f"missing: required by {self.method}")

    def _string(self, schema: dict[str, Any], value: Any, where: str) -> None:
        if not isinstance(value, str):
            if "enum" in schema and self.direction == "request" and _is_int(value):
                return  # an enum's proto number: Google takes it (GAPIC clients send enum-encoding=int)
            form = schema.get("format")
            if form in _STRING_RANGES and isinstance(value, int) and not isinstance(value, bool):
                if self.direction == "request":
                    return  # accepted by Google's parser; responses write it as a string
                self.fail(where, f"is a number, the schema says a {form} written as a JSON string")
                return
            self.fail(where, f"is {_json_type(value)}, the schema says string")
            return
        enum = schema.get("enum")
        if enum is not None and value not in enum:
            self.fail(where, f"{value!r} is not one of the schema's values {enum}")
        form = schema.get("format")
        if form in _STRING_RANGES:
            low, high = _STRING_RANGES[form]
            if not re.fullmatch(r"-?\d+", value) or not low <= int(value) <= high:
                self.fail(where, f"{value!r} is not a {form}")
        elif form in ("date-time", "google-datetime"):
            try:
                datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                self.fail(where, f"{value!r} is not an RFC 3339 {form}")
        elif form == "date" and not _DATE.fullmatch(value):
            self.fail(where, f"{value!r} is not a date (YYYY-MM-DD)")
        elif form == "byte" and not _BASE64.fullmatch(value):
            self.fail(where, f"{value!r} is not base64 (format byte)")
        elif form == "google-duration" and not _DURATION.fullmatch(value):
            self.fail(where, f"{value!r} is not a duration such as '3.5s'")

    def _integer(self, schema: dict[str, Any], value: Any, where: str) -> None:
        form = schema.get("format", "int32")
        if isinstance(value, str) and self.direction == "request" and re.fullmatch(r"-?\d+", value):
            value = int(value)  # proto3 JSON takes a quoted int32 in requests too
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(where, f"is {_json_type(value)}, the schema says integer ({form})")
            return
        low, high = _RANGES.get(form, _RANGES["int32"])
        if not low <= value <= high:
            self.fail(where, f"{value} is outside {form}'s range")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
