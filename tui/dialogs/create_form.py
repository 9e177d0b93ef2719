"""The create form on a base VM: names (or one name and a count), zone, Spot, and optionally the
multi-node group they make up. Enter creates, Esc cancels.

Counted names follow ``gcptui vm create --count``: ``NAME-0``, ``NAME-1``, ... numbered on from the
group's current size; with no name, NAME is the group's (else the base's)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Checkbox, Input, Label, Static

from gcptui.remote.errors import ConfigError
from gcptui.remote.models import Instance
from gcptui.remote.provision import check_group, expand_names


@dataclass(frozen=True, slots=True)
class CreateRequest:
    names: list[str]
    zone: str
    spot: bool
    group: str | None = None  # recorded as a [[groups]] entry (its VMs in name order) once they exist


def _row(label: str, field: Widget) -> ComposeResult:
    """A field with its label on the left: placeholders vanish as one types, and one was cut off."""
    with Horizontal(classes="form-row"):
        yield Label(label, classes="form-label")
        yield field


class CreateFormScreen(ModalScreen[CreateRequest | None]):
    """Dismisses with a ``CreateRequest``, or None on Esc."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="create.cancel")]

    def __init__(self, base: Instance, group_sizes: Mapping[str, int] | None = None) -> None:
        super().__init__()
        self.base = base
        self.group_sizes = dict(group_sizes or {})  # VMs each [[groups]] entry has now

    def compose(self) -> ComposeResult:
        base = self.base
        with Vertical(id="create-form"):
            yield Static(
                Text(f"New VMs like {base.name} ({base.machine_type}, {base.gpu_summary})", style="bold")
            )
            yield from _row(
                "Names",
                Input(
                    placeholder="a b c, or one name and a count (none: GROUP-i or BASE-i)", id="create-names"
                ),
            )
            yield from _row(
                "Count", Input(value="1", placeholder="how many", id="create-count", type="integer")
            )
            yield from _row("Zone", Input(value=base.zone, placeholder="zone", id="create-zone"))
            yield from _row(
                "Spot", Checkbox("Spot VMs (preemptible, cheaper)", value=base.spot, id="create-spot")
            )
            yield from _row(
                "Group", Input(placeholder="optional: run them as one multi-node job", id="create-group")
            )
            yield Static("", id="create-error")
            yield Static(Text("Enter: create   Esc: cancel", style="dim"))

    def on_mount(self) -> None:
        self.query_one("#create-names", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        count_text = self.query_one("#create-count", Input).value.strip() or "1"
        group = self.query_one("#create-group", Input).value.strip() or None
        text = self.query_one("#create-names", Input).value
        first = self.group_sizes.get(group, 0) if group is not None else 0
        try:
            if group is not None:
                check_group(group)
            # No name: as `vm create --count N`, GROUP-i (else BASE-i), numbered on from the group.
            given = bool(text.strip())
            names = expand_names(text if given else group or self.base.name, int(count_text),
                                 first=first, numbered=not given)  # fmt: skip
        except (ConfigError, ValueError) as err:
            self.query_one("#create-error", Static).update(Text(str(err), style="bold red"))
            return
        zone = self.query_one("#create-zone", Input).value.strip() or self.base.zone
        self.dismiss(CreateRequest(names, zone, self.query_one("#create-spot", Checkbox).value, group))

    def action_cancel(self) -> None:
        self.dismiss(None)
