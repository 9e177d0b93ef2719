"""Every command's --help says what it does, and the commands that take NAME say what a NAME is."""

from __future__ import annotations

import argparse

from gcptui.tui.cli.main import build_parser


def commands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[f"{prefix}{name}"] = sub
                found.update(commands(sub, f"{prefix}{name} "))
    return found


def test_every_command_help_opens_with_what_it_does_and_names_what_name_is() -> None:
    found = commands(build_parser())
    assert {"logs", "gpu", "job", "vm", "sweep run"} <= set(found)
    for name, parser in found.items():
        assert parser.description, f"gcptui {name} --help has no description"
    for name in ("logs", "gpu", "job", "vm", "pull"):
        assert "gcptui ls" in found[name].format_help(), name  # NAME: as `gcptui ls` lists them
