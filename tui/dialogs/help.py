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

from gcptui.tui.keys import KEY_NOTES, Action, key_label


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


# How the denser cells read (the table has no room for legends).
LEGEND = (
    ("GPU util", "mean over the VM's GPUs: utilization sparkline, utilization now, then mNN% = memory in use"
     " (percent of total, averaged); IDLE: idle too long. Up to 140 columns: no sparklines; up to 100: the"
     " figures alone (Progress: percent and ETA), the rest in the detail view (Enter)"),
    ("Sync", "off, syncing N, in sync HH:MM:SS (the last batch), or a brief 'synced N files' after a save"),
    ("Keep-alive", "the setting (on/off/- for non-Spot), then the step of a recovery in progress or how the last"
     " one ended: resumed, idle (restarted, nothing to resume), left stopped, failed, gave up"),
    ("Timeline", "detected by: notice (the VM's own preemption notice), poll (the Compute API), lost (a poll"
     " a dropped SSH connection asked for), manual (L)"),
    ("Marks", "space marks machines: l shows their logs side by side, s, R, K act on every marked one"
     " (after a question naming them); c clears the marks"),
    ("Sort", "o: the next column (live ones too: job, progress, GPU, sync); O or a second header click reverses"),
    ("ctrl+s", "in the logs screen: saves what the pane shows to gcptui-NAME-TIME.log in the folder gcptui started in"),
)  # fmt: skip


def legend_table(rows: tuple[tuple[str, str], ...] = LEGEND) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(justify="right", style="bold cyan", min_width=10)
    table.add_column()
    for name, text in rows:
        table.add_row(name, text)
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
            yield Static(Text("\nKeys that differ by screen", style="bold"))
            yield Static(legend_table(KEY_NOTES))
            yield Static(Text("\nReading the table", style="bold"))
            yield Static(legend_table())

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
