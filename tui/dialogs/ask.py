"""One line of text to type, prefilled with a best guess (the run directory to pull)."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class AskScreen(ModalScreen[str | None]):
    """Dismisses with the text typed (stripped) on Enter, or None on Esc or an empty line."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="ask.cancel")]

    def __init__(self, question: str, guess: str = "") -> None:
        super().__init__()
        self.question = question
        self.guess = guess

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Static(Text(self.question, style="bold"))
            yield Input(value=self.guess, id="ask-input")
            yield Static(Text("Enter: go   Esc: cancel", style="dim"))

    def on_mount(self) -> None:
        self.query_one("#ask-input", Input).focus()

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
