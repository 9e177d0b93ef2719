"""A question with a few answers, one key each (a finished job: fresh run or resume)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class ChoiceScreen(ModalScreen[str | None]):
    """Dismisses with the chosen answer's value, or None on Esc.

    ``answers`` are (key, value, description): ``("f", "start", "fresh run")``.
    """

    def __init__(self, question: str, answers: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.question = question
        self.answers = answers
        for key, value, _ in answers:
            self._bindings.bind(key, f"answer({value!r})", show=False)
        self._bindings.bind("escape", "answer(None)", show=False)

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Static(Text(self.question, style="bold"))
            for key, _, description in self.answers:
                yield Static(Text.assemble((f"{key}: ", "bold"), description))
            yield Static(Text("Esc: cancel", style="dim"))

    def action_answer(self, value: str | None) -> None:
        self.dismiss(value)
