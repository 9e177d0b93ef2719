"""``?``: every key, grouped, read from the action registry and the live keymap."""

from __future__ import annotations

from collections import defaultdict

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from gcptui.tui.keys import Action, key_label


def help_table(actions: list[Action], keymap: dict[str, str]) -> Table:
    groups: dict[str, list[Action]] = defaultdict(list)
    for action in actions:
        groups[action.group].append(action)
    table = Table.grid(padding=(0, 2))
    table.add_column(justify="right", style="bold yellow", min_width=10)
    table.add_column()
    table.add_column(style="dim")
    for group, members in groups.items():
        table.add_row("", Text(group, style="bold underline"), "")
        for action in members:
            note = "  (asks first)" if action.destructive else ""
            table.add_row(key_label(keymap.get(action.id, action.key)), action.description + note, action.id)
        table.add_row("", "", "")
    table.add_row("ctrl+p", "Command palette: every action by name", "")
    return table


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close", id="help.close")]

    def __init__(self, actions: list[Action], keymap: dict[str, str]) -> None:
        super().__init__()
        self.actions = actions
        self.keymap = keymap

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static(Text("gcptui keys", style="bold"))
            yield Static(help_table(self.actions, self.keymap))
            yield Static(Text("Rebind any key in [keys] of gcptui.toml by its action id.", style="dim"))

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
