"""docs/REFERENCE.md stays the contract of the code: generated blocks current, every field and command
documented; and the code cites only documents that live in this repository."""

from __future__ import annotations

import argparse
import functools
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from pydantic import BaseModel

from gcptui.remote.config import Config
from gcptui.tui.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "REFERENCE.md"
FIX = "run `python scripts/config_reference.py --write`"


@functools.cache
def _generator() -> ModuleType:
    """scripts/config_reference.py, imported from its file (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location(
        "config_reference", ROOT / "scripts" / "config_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _models(model: type[BaseModel]) -> Iterator[type[BaseModel]]:
    """``model`` and every model its fields hold (a section, a list of sections), depth first."""
    yield model
    generator = _generator()
    for field in model.model_fields.values():
        inner, _ = generator.section_model(field.annotation)
        if inner is not None:
            yield from _models(inner)


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    for action in parser._actions:  # argparse keeps its subparsers nowhere public
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("build_parser() has no subcommands")


def test_generated_blocks_are_current() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    generator = _generator()
    for name in generator.BLOCKS:
        assert text.count(f"<!-- {name}:start -->") == 1 and text.count(f"<!-- {name}:end -->") == 1, (
            f"docs/REFERENCE.md needs one <!-- {name}:start --> ... <!-- {name}:end --> block: add the "
            f"markers, then {FIX}"
        )
    assert generator.render(text) == text, f"docs/REFERENCE.md is out of date with the code: {FIX}"


def test_every_config_field_and_section_is_described() -> None:
    missing = [
        f"{model.__name__}.{name}"
        for model in _models(Config)
        for name, field in model.model_fields.items()
        if not (field.description or "").strip()
    ]
    assert not missing, (
        f"config fields without a description: {', '.join(missing)}: add Field(description=...) in "
        f"remote/config.py, then {FIX}"
    )
    undocumented = [model.__name__ for model in _models(Config) if not (model.__doc__ or "").strip()]
    assert not undocumented, f"config sections without a docstring: {', '.join(undocumented)}"


def test_every_command_and_flag_is_in_the_reference() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    missing: list[str] = []
    for command, parser in _subcommands().items():
        if f"gcptui {command}" not in text:
            missing.append(f"gcptui {command}")
        for action in parser._actions:
            for option in action.option_strings:
                if (
                    option.startswith("--")
                    and option != "--help"
                    and not re.search(rf"`[^`]*{option}\b", text)
                ):
                    missing.append(f"gcptui {command} {option}")
    assert not missing, f"docs/REFERENCE.md does not mention: {', '.join(missing)}"


def test_the_code_cites_no_document_outside_the_repository() -> None:
    citing = [
        str(path.relative_to(ROOT))
        for folder in ("tui", "remote", "trainer")
        for path in sorted((ROOT / folder).rglob("*"))
        if path.is_file()
        and path.suffix in (".py", ".sh", ".tcss", ".toml", ".md")
        and "DESIGN.md" in path.read_text(encoding="utf-8", errors="replace")
    ]
    assert not citing, (
        f"these cite DESIGN.md, which is not in the repository (use docs/REFERENCE.md): {citing}"
    )
