"""The generated parts of docs/REFERENCE.md: the config file (from remote/config/) and the keys.

Each part sits between two marker comments in docs/REFERENCE.md, e.g.
``<!-- config-reference:start -->`` and ``<!-- config-reference:end -->``. Edit the code (a field's
``description=``, a section's docstring, an ``Action`` in tui/keys.py), never the block itself.

Usage:
    python scripts/config_reference.py           print the generated blocks, markers included
    python scripts/config_reference.py --write   rewrite the blocks in docs/REFERENCE.md
    python scripts/config_reference.py --check   exit 1 when docs/REFERENCE.md is out of date
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from gcptui.remote.config import Config

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "REFERENCE.md"
COMMAND = "python scripts/config_reference.py --write"
NOTE = f"<!-- generated from the code by scripts/config_reference.py: do not edit here; run `{COMMAND}` -->"


# ---- the config file ------------------------------------------------------------------------------


def _cell(text: str) -> str:
    """Text fit for one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _markdown(doc: str) -> str:
    """A docstring as Markdown paragraphs: reST ``literals`` become `code`, lines are joined."""
    doc = re.sub(r"``([^`]+)``", r"`\1`", inspect.cleandoc(doc))
    return "\n\n".join(" ".join(block.split()) for block in doc.split("\n\n"))


def _without_none(annotation: Any) -> tuple[Any, bool]:
    """``X | None`` -> (X, True); anything else -> (it, False)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(annotation)) == 2:
            return args[0], True
    return annotation, False


def type_name(annotation: Any) -> str:
    """A TOML-minded name for a field's type."""
    inner, optional = _without_none(annotation)
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    origin = typing.get_origin(inner)
    if inner in names:
        name = names[inner]
    elif origin is list:
        (item,) = typing.get_args(inner)
        name = f"array of {type_name(item)}s"
    elif origin is dict:
        _, value = typing.get_args(inner)
        name = f"table of {type_name(value)}s"
    elif isinstance(inner, type) and issubclass(inner, BaseModel):
        name = "table"
    elif origin is typing.Literal:
        name = "one of " + ", ".join(f'"{value}"' for value in typing.get_args(inner))
    else:
        raise TypeError(f"no reference name for the type {inner!r}: teach scripts/config_reference.py")
    return f"{name} (may be left out)" if optional else name


def default_text(field: FieldInfo) -> str:
    """The field's default as it would be written in TOML."""
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, BaseModel):
        return "see below"
    return f"`{json.dumps(value)}`"


def constraint_text(field: FieldInfo) -> str:
    """The numeric and length bounds pydantic enforces (rules in validators are in the description)."""
    parts: list[str] = []
    for item in field.metadata:
        if isinstance(item, annotated_types.Ge):
            parts.append(f"≥ {item.ge}")
        elif isinstance(item, annotated_types.Gt):
            parts.append(f"> {item.gt}")
        elif isinstance(item, annotated_types.Le):
            parts.append(f"≤ {item.le}")
        elif isinstance(item, annotated_types.Lt):
            parts.append(f"< {item.lt}")
        elif isinstance(item, annotated_types.MinLen):
            parts.append("not empty" if item.min_length == 1 else f"at least {item.min_length} long")
        elif isinstance(item, annotated_types.MaxLen):
            parts.append(f"at most {item.max_length} long")
    return ", ".join(parts) or "-"


def section_model(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model of a top-level field and whether it is an array of tables (``[[hosts]]``)."""
    inner, _ = _without_none(annotation)
    if typing.get_origin(inner) is list:
        (item,) = typing.get_args(inner)
        if isinstance(item, type) and issubclass(item, BaseModel):
            return item, True
    if isinstance(inner, type) and issubclass(inner, BaseModel):
        return inner, False
    return None, False


def toml_fields(model: type[BaseModel]) -> Iterator[tuple[str, FieldInfo]]:
    """The fields a TOML file can set (``Config.path`` is set by the loader, not the file)."""
    for name, field in model.model_fields.items():
        if not field.exclude:
            yield name, field


def config_reference() -> str:
    """Every section and key of gcptui.toml, from the pydantic models."""
    out: list[str] = [_markdown(Config.__doc__ or "")]
    for name, field in toml_fields(Config):
        model, array = section_model(field.annotation)
        header = f"[[{name}]]" if array else f"[{name}]"
        out.append(f"### `{header}`")
        if model is None:  # a free-form table: [keys]
            out.append(f"{type_name(field.annotation).capitalize()}. {field.description or ''}")
            continue
        out.append(_markdown(model.__doc__ or ""))
        rows = ["| key | type | default | constraints | meaning |", "|---|---|---|---|---|"]
        for key, sub in toml_fields(model):
            rows.append(
                f"| `{key}` | {type_name(sub.annotation)} | {default_text(sub)} | "
                f"{constraint_text(sub)} | {_cell(sub.description or '')} |"
            )
        out.append("\n".join(rows))
    return "\n\n".join(out)


# ---- the keys -------------------------------------------------------------------------------------


def key_reference() -> str:
    """Every action of the key registry (tui/keys.py ACTIONS) with its default key."""
    from gcptui.tui.keys import ACTIONS, key_label

    where = {"app": "everywhere", "fleet": "fleet", "logs": "logs screen", "sweep": "sweep screen"}
    rows = ["| action id | default key | screen | does | notes |", "|---|---|---|---|---|"]
    for action in ACTIONS:
        notes = [
            text
            for flag, text in (
                (action.destructive, "asks first"),
                (action.mutating, "off with `--readonly`"),
                (action.demo_only, "demo only"),
                (not action.show, "not in the footer"),
            )
            if flag
        ]
        label = key_label(action.key)
        key = f"`{action.key}`" + (f" ({label})" if label != action.key else "")
        rows.append(
            f"| `{action.id}` | {key} | {where.get(action.screen, action.screen)} | "
            f"{_cell(action.description)} | {', '.join(notes) or '-'} |"
        )
    return "\n".join(rows)


# ---- the blocks in docs/REFERENCE.md ----------------------------------------------------------------

BLOCKS: dict[str, Callable[[], str]] = {
    "config-reference": config_reference,
    "key-reference": key_reference,
}


def block(name: str) -> str:
    """One generated block, markers included."""
    return f"<!-- {name}:start -->\n{NOTE}\n\n{BLOCKS[name]()}\n\n<!-- {name}:end -->"


def render(text: str) -> str:
    """``text`` (docs/REFERENCE.md) with every generated block replaced by what the code says now."""
    for name in BLOCKS:
        found = list(re.finditer(rf"<!-- {name}:start -->.*?<!-- {name}:end -->", text, re.S))
        if len(found) != 1:
            raise ValueError(f"docs/REFERENCE.md must hold one <!-- {name}:start --> ... :end --> block")
        start, end = found[0].span()
        text = text[:start] + block(name) + text[end:]
    return text


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the blocks in docs/REFERENCE.md")
    mode.add_argument("--check", action="store_true", help="exit 1 when docs/REFERENCE.md is out of date")
    args = parser.parse_args(argv)
    if not (args.write or args.check):
        print("\n\n".join(block(name) for name in BLOCKS))
        return 0
    try:
        current = REFERENCE.read_text(encoding="utf-8")
        wanted = render(current)
    except (OSError, ValueError) as err:
        print(f"config_reference: {err}", file=sys.stderr)
        return 2
    if args.check:
        if wanted != current:
            print(f"docs/REFERENCE.md is out of date: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    if wanted != current:
        REFERENCE.write_text(wanted, encoding="utf-8")
        print("docs/REFERENCE.md: generated blocks rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
