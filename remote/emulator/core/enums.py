"""Enums sent as numbers, read as Google reads them.

Every GAPIC REST transport (google-cloud-tpu, -aiplatform, -container, ...) asks for
``$alt=json;enum-encoding=int`` and writes request enums as their proto numbers (``"strategy": 4``).
Google's front end takes a number or a name for any enum field, and always answers with names. An
emulated API lists the enum fields it reads (a path such as ``jobSpec.scheduling.strategy``, ``[]``
stepping into each item of a list) with each enum's numbers, and ``names_for_numbers`` rewrites the
numbers in a request body to names before anything else reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gcptui.remote.emulator.core.errors import ApiError

EnumFields = Mapping[str, tuple[str, Mapping[int, str]]]  # path -> (the enum's proto name, number -> name)


def names_for_numbers(body: Any, fields: EnumFields, root: str) -> None:
    """Rewrite, in place, each enum number at one of ``fields``' paths to its name; a number the
    enum lacks is the 400 Google answers (``root`` is the request message's field name in it)."""
    for path, (enum, names) in fields.items():
        _rewrite(body, path.split("."), enum, names, root)


def _rewrite(node: Any, steps: list[str], enum: str, names: Mapping[int, str], where: str) -> None:
    if not steps:
        return
    step, rest = steps[0], steps[1:]
    many = step.endswith("[]")
    key = step.removesuffix("[]")
    if not isinstance(node, dict) or key not in node:
        return
    at = f"{where}.{_snake(key)}"
    if many:
        items = node[key]
        for index, item in enumerate(items if isinstance(items, list) else []):
            _rewrite(item, rest, enum, names, f"{at}[{index}]")
        return
    if rest:
        _rewrite(node[key], rest, enum, names, at)
        return
    value = node[key]
    if isinstance(value, bool):
        return  # a JSON type error, left to the API's own check
    if isinstance(value, int):
        if value not in names:
            raise ApiError(
                400, f"Invalid value at '{at}' (type.googleapis.com/{enum}), {value}", "badRequest"
            )
        node[key] = names[value]


def _snake(name: str) -> str:
    """``acceleratorConfig`` -> ``accelerator_config``: Google names fields by their proto names."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)
