"""Pure formatting of fleet rows: which columns, how each cell reads, colours and sorting.

Kept free of widgets so the table, the CLI's rich table and tests share one definition.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from rich.text import Text

from gcptui.remote.models import Instance, State
from gcptui.tui.live.state import Live

# The colour of a row's status word, by its neutral state: every kind of compute alike.
STATE_STYLES: dict[State, str] = {
    State.RUNNING: "bold green",
    State.PROVISIONING: "cyan",
    State.STOPPING: "yellow",
    State.STOPPED: "red",
    State.PREEMPTED: "bold magenta",
    State.SUCCEEDED: "green",
    State.FAILED: "bold red",
    State.DELETING: "yellow",
    State.UNKNOWN: "dim",
}


def status_word(instance: Instance) -> str:
    """The backend's own word, except a preemption reads PREEMPTED so a person sees it at a glance;
    Vertex AI's ``JOB_STATE_`` prefix is left out (``CANCELLED``, ``RUNNING``: what its console says)."""
    if instance.state is State.PREEMPTED:
        return "PREEMPTED"
    return instance.status.removeprefix("JOB_STATE_")


def row_title(instance: Instance) -> str:
    """What a person calls the row: its name, or a Vertex AI job's display name (the ``--name`` it
    was submitted with; its 19-digit id stays the handle gcloud and ``ls --json`` give)."""
    return instance.title or instance.name


def is_job_row(instance: Instance) -> bool:
    """A row that is a job (a Vertex AI custom job), not a machine: counted apart."""
    return not instance.machine


def status_style(instance: Instance) -> str:
    return STATE_STYLES.get(instance.state, "")


def status_text(instance: Instance) -> Text:
    return Text(status_word(instance), style=status_style(instance), justify="left")


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    label: str
    cell: Callable[[Instance], str | Text]
    sort_key: Callable[[Instance], object]


def short_gpu(gpu_type: str) -> str:
    """``nvidia-tesla-a100`` reads A100, ``nvidia-h100-80gb`` H100-80GB: what people call them."""
    return gpu_type.removeprefix("nvidia-").removeprefix("tesla-").upper()


def _gpus(i: Instance) -> str:
    return ", ".join(f"{g.count}x {short_gpu(g.type)}" for g in i.gpus) or "-"


def price_cell(i: Instance) -> str | Text:
    """``1.23`` per hour; ``~1.23`` (dim) from the bundled fallback table; ``-`` when unknown."""
    if i.usd_per_hour is None:
        return "-"
    if i.price_source == "fallback":
        return Text(f"~{i.usd_per_hour:.2f}", style="dim")
    return f"{i.usd_per_hour:.2f}"


def fleet_cost_line(instances: tuple[Instance, ...] | list[Instance]) -> str:
    """``$12.34/h running`` for the RUNNING VMs (``~`` and the source when not the catalog's); empty
    when nothing runs or no price is known."""
    running = [i for i in instances if i.state is State.RUNNING]
    priced = [i for i in running if i.usd_per_hour is not None]
    if not priced:
        return ""
    total = sum(i.usd_per_hour or 0.0 for i in priced)
    sources = {i.price_source for i in priced}
    approximate = "~" if "fallback" in sources else ""
    where = (
        ""
        if sources == {"catalog"}
        else f" ({', '.join(sorted(s or '?' for s in sources))} prices, {priced[0].price_as_of})"
    )
    unknown = f", {len(running) - len(priced)} unpriced" if len(priced) < len(running) else ""
    return f"{approximate}${total:.2f}/h running{unknown}{where}"


INSTANCE_COLUMNS: tuple[Column, ...] = (
    Column("name", "Name", row_title, row_title),
    Column("zone", "Zone", lambda i: i.zone or "(host)", lambda i: i.zone),
    Column("status", "Status", status_text, status_word),
    Column("machine_type", "Machine", lambda i: i.machine_type or "-", lambda i: i.machine_type),
    Column("gpus", "GPUs", _gpus, _gpus),
    Column("spot", "Spot", lambda i: Text("spot", style="yellow") if i.spot else "", lambda i: not i.spot),
    Column("price", "$/h", price_cell, lambda i: -(i.usd_per_hour or 0.0)),
    Column("external_ip", "External IP", lambda i: i.external_ip or "-", lambda i: i.external_ip or ""),
)


# How much a live cell says: everything (wide), no sparklines (compact), the bare figures (narrow:
# 80-100 columns, where the step count, loss and GPU memory wait in the detail view).
Form = Literal["wide", "compact", "narrow"]


@dataclass(frozen=True, slots=True)
class LiveColumn:
    """A column that reads the live state (job, progress, GPUs, sync) rather than the Compute API."""

    key: str
    label: str
    cell: Callable[[Live], str | Text]
    sort_key: Callable[[Live], object]
    compact_cell: Callable[[Live], str | Text] | None = None  # no sparklines
    narrow_cell: Callable[[Live], str | Text] | None = None  # the bare figures

    def render(self, live: Live, form: Form) -> str | Text:
        """This column's cell of ``live`` in ``form`` (the wider form where none is narrower)."""
        if form == "narrow" and self.narrow_cell is not None:
            return self.narrow_cell(live)
        if form != "wide" and self.compact_cell is not None:
            return self.compact_cell(live)
        return self.cell(live)


# What a machine's live cells read before anything is known (not reachable, not watched).
UNWATCHED = Text("-", "dim")

# Live sort keys: what a person compares (running jobs first, further along first is the reversed
# order); machines that are not watched sort after every watched one either way round.
JOB_ORDER = {"running": 0, "exited": 1, "killed": 2, "none": 3}


def _job_key(live: Live) -> object:
    return JOB_ORDER.get(live.job.state, 4) if live.job is not None else 5


def _progress_key(live: Live) -> object:
    fraction = live.progress.fraction if live.progress is not None else None
    return -1.0 if fraction is None else fraction


def _checkpoint_key(live: Live) -> object:
    progress = live.progress
    disk = progress.last_checkpoint if progress is not None else None
    return -1 if disk is None or disk.step is None else disk.step


def _gpu_key(live: Live) -> object:
    latest = live.gpu.latest
    utils = [g.util for g in latest.gpus if g.util is not None] if latest is not None else []
    return sum(utils) / len(utils) if utils else -1.0


LIVE_COLUMNS: tuple[LiveColumn, ...] = (
    LiveColumn(
        "job",
        "Job",
        lambda live: live.job_text(),
        _job_key,
        narrow_cell=lambda live: live.job_text(narrow=True),
    ),
    LiveColumn(
        "progress",
        "Progress",
        lambda live: live.progress_text(),
        _progress_key,
        lambda live: live.progress_text(compact=True),
        lambda live: live.progress_text(narrow=True),
    ),
    LiveColumn(
        "gpu",
        "GPU util",
        lambda live: live.gpu_text(),
        _gpu_key,
        lambda live: live.gpu_text(compact=True),
        lambda live: live.gpu_text(narrow=True),
    ),
    LiveColumn("checkpoint", "Checkpoint", lambda live: live.checkpoint_text(), _checkpoint_key),
    LiveColumn(
        "sync",
        "Sync",
        lambda live: live.sync_text(),
        lambda live: live.sync_state or "~",
        narrow_cell=lambda live: live.sync_text(narrow=True),
    ),
    LiveColumn(
        "keepalive",
        "Keep-alive",
        lambda live: live.keepalive_text(),
        lambda live: live.keepalive_text().plain,
        narrow_cell=lambda live: live.keepalive_text(narrow=True),
    ),
)

# The CLI's `ls` shows what the API knows; the TUI adds the live columns.
COLUMNS = INSTANCE_COLUMNS

# Every column the fleet table can sort by, in table order: (key, label).
SORTABLE: tuple[tuple[str, str], ...] = tuple((c.key, c.label) for c in INSTANCE_COLUMNS) + tuple(
    (c.key, c.label) for c in LIVE_COLUMNS
)


def matches(instance: Instance, query: str) -> bool:
    """A case-insensitive filter over the text a person sees in the row (and the labels)."""
    if not query:
        return True
    haystack = " ".join(
        [
            instance.name,
            instance.zone,
            status_word(instance),
            instance.machine_type,
            instance.gpu_summary,
            "spot" if instance.spot else "on-demand",
            instance.external_ip or "",
            instance.internal_ip or "",
            instance.source,
            *(f"{k}={v}" for k, v in instance.labels.items()),
        ]
    ).lower()
    return all(term in haystack for term in query.lower().split())
