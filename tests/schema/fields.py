"""The fields a schema has and the fields a response sets, as JSON paths in the schema's terms:
``items[].scheduling.provisioningModel``; a map's entries (``additionalProperties``) as ``{}``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Schemas = Callable[[str], dict[str, Any]]


def _resolve(schemas: Schemas, schema: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    name = schema.get("$ref")
    return (name, schemas(name)) if name else (None, schema)


def schema_paths(
    schemas: Schemas, schema: dict[str, Any], where: str = "", seen: tuple[str, ...] = ()
) -> list[str]:
    """Every path the schema allows (a recursive schema is walked once per branch)."""
    name, schema = _resolve(schemas, schema)
    if name in seen:
        return []
    seen = (*seen, name) if name else seen
    out: list[str] = []
    kind = schema.get("type")
    if kind == "array":
        return schema_paths(schemas, schema.get("items", {}), where + "[]", seen)
    if kind == "object":
        for key, spec in schema.get("properties", {}).items():
            at = f"{where}.{key}" if where else key
            out.append(at)
            out += schema_paths(schemas, spec, at, seen)
        extra = schema.get("additionalProperties")
        if extra is not None:
            out += schema_paths(schemas, extra, where + "{}", seen)
    return out


def set_paths(schemas: Schemas, schema: dict[str, Any], value: Any, where: str = "") -> set[str]:
    """The paths ``value`` sets, read through the schema (fields the schema lacks are left out)."""
    _, schema = _resolve(schemas, schema)
    out: set[str] = set()
    kind = schema.get("type")
    if kind == "array" and isinstance(value, list):
        for item in value:
            out |= set_paths(schemas, schema.get("items", {}), item, where + "[]")
    elif kind == "object" and isinstance(value, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if key in properties:
                at = f"{where}.{key}" if where else key
                out.add(at)
                out |= set_paths(schemas, properties[key], item, at)
            elif extra is not None:
                out |= set_paths(schemas, extra, item, where + "{}")
    return out
