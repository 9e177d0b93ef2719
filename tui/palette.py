"""The command palette's entries and the help screen's order, from the action registry."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from textual.app import App, SystemCommand
from textual.screen import Screen

from gcptui.tui.keys import Action, key_label


def palette_commands(
    inherited: Iterable[SystemCommand],
    actions: Iterable[Action],
    keymap: dict[str, str],
    target_of: Callable[[Action], App[None] | Screen[None]],
) -> Iterator[SystemCommand]:
    """Textual's own commands (its Quit left out: the registry's, with its key, is listed once),
    then every action with its group, key and id."""
    for command in inherited:
        if not command.title.lower().startswith("quit"):
            yield command
    for action in actions:
        yield SystemCommand(
            action.description,
            f"{action.group} · key {key_label(keymap.get(action.id, action.key))} · id {action.id}",
            _runner(target_of(action), action.action),
        )


def help_order(actions: list[Action], on_fleet: bool) -> list[Action]:
    """On another screen (logs) its own keys come first: there `s` means follow, not start."""
    if on_fleet:
        return actions
    return [a for a in actions if a.screen != "app"] + [a for a in actions if a.screen == "app"]


def _runner(target: App[None] | Screen[None], action: str):  # type: ignore[no-untyped-def]
    async def run() -> None:
        await target.run_action(action)

    return run
