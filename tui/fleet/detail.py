"""Everything known about one instance, on Enter from the fleet table; Esc goes back."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from gcptui.remote.models import SOURCE_TITLES, Instance, run_spend
from gcptui.tui.footer import KeysFooter
from gcptui.tui.live.cells import checkpoint_detail, gpu_panel_text, progress_cell
from gcptui.tui.live.columns import status_text
from gcptui.tui.live.state import Live

# Both tables' label column has this width, so the Job block lines up with the one above it (each
# grid sized itself to its own longest label: the live block sat 2 columns left of the rest).
LABEL_WIDTH = 13


def _grid() -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan", justify="right", min_width=LABEL_WIDTH)
    table.add_column()
    return table


def live_table(live: Live, usd_per_hour: float | None = None) -> Table:
    """Job, training progress, GPU use, sync and keep-alive, as the monitors last saw them."""
    table = _grid()
    job = live.job
    table.add_row("Job", live.job_text())
    if job is not None and job.command:
        # The VM's words: Text, never a str (Rich would read `[@click=...]` in it as markup).
        table.add_row("Command", Text(job.command))
        table.add_row("Started", Text(job.started_at or "-"))
        spent = run_spend(usd_per_hour, job.started_at, job.ended_at, datetime.now(UTC))
        if spent is not None:
            table.add_row(
                "Run cost", f"about ${spent:.2f} since it started (VM time at ${usd_per_hour:.2f}/h)"
            )
    if live.job_error:
        table.add_row("SSH", Text(live.job_error, "red"))
    table.add_row("Progress", progress_cell(live.progress, loss_width=30))
    table.add_row("Checkpoints", checkpoint_detail(live.progress, time.time()))
    table.add_row(
        "Sync", live.sync_text() + (Text(f"  {live.sync_reason}", "dim") if live.sync_reason else Text())
    )
    if live.sync_route:
        table.add_row("Sync route", Text(live.sync_route))
        table.add_row("Last sync", live.last_sync_text())
    table.add_row("Keep-alive", live.keepalive_text())
    # "GPU use": the machine's GPUs (the hardware) are the row "GPUs" of the table above.
    table.add_row("GPU use", gpu_panel_text(live.gpu, live.progress, idle=live.gpu_idle, width=30))
    return table


def price_text(instance: Instance) -> str:
    """``$1.33/h (catalog, 2026-11-20)``; ``-`` when unknown."""
    if instance.usd_per_hour is None:
        return "-"
    return f"${instance.usd_per_hour:.2f}/h while running ({instance.price_source}, {instance.price_as_of})"


def detail_table(instance: Instance) -> Table:
    table = _grid()
    rows: list[tuple[str, str | Text]] = [
        ("Name", instance.name),
        ("Source", SOURCE_TITLES.get(instance.source, instance.source)),
        ("Zone", instance.zone or "-"),
        ("Status", status_text(instance)),
        ("Machine type", instance.machine_type or "-"),
        ("GPUs", instance.gpu_summary or "none"),
        ("Provisioning", "Spot" if instance.spot else "on-demand"),
        ("Price", price_text(instance)),
        ("On preemption", instance.termination_action or "-"),
        ("External IP", instance.external_ip or "none"),
        ("Internal IP", instance.internal_ip or "-"),
        ("Instance id", instance.instance_id or "-"),
        ("Last start", instance.last_start or "-"),
        ("Last stop", instance.last_stop or "-"),
        ("Labels", ", ".join(f"{k}={v}" for k, v in sorted(instance.labels.items())) or "-"),
    ]
    for label, value in rows:
        table.add_row(label, Text(value) if isinstance(value, str) else value)
    return table


class DetailScreen(ModalScreen[None]):
    # A pager's keys (less, k9s): its own footer says them, not the fleet's keys behind the dialog.
    BINDINGS = [
        Binding("escape,q", "dismiss", "Back", id="detail.back"),
        Binding("j,down", "scroll('down')", "Down", id="detail.down", show=False),
        Binding("k,up", "scroll('up')", "Up", id="detail.up", show=False),
        Binding("g,home", "scroll('home')", "Top", id="detail.top"),
        Binding("G,end", "scroll('end')", "Bottom", id="detail.bottom"),
    ]

    def __init__(self, instance: Instance, live: Live | None = None) -> None:
        super().__init__()
        self.instance = instance
        self.live = live

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="detail"):
            yield Static(Text(self.instance.name, style="bold"), id="detail-title")
            yield Static(detail_table(self.instance), id="detail-body")
            yield Static(id="detail-live")
            yield Static(Text("Esc to go back · j/k scroll · g/G top and bottom", style="dim"))
        yield KeysFooter()

    def action_scroll(self, where: str) -> None:
        view = self.query_one("#detail", VerticalScroll)
        {"down": view.scroll_down, "up": view.scroll_up, "home": view.scroll_home, "end": view.scroll_end}[
            where
        ](animate=False)

    def on_mount(self) -> None:
        self._show_live()
        self.set_interval(1.0, self._show_live)  # GPU and progress move while the view is open

    def _show_live(self) -> None:
        if self.live is not None:
            self.query_one("#detail-live", Static).update(live_table(self.live, self.instance.usd_per_hour))

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
