"""GPU and training-progress rendering: Rich ``Text`` for fleet-table cells and the detail view.

Cells are pure functions of the data (``GpuHistory``, ``Progress``, idle state), so the app can put
them in a ``DataTable`` with ``update_cell`` on each sample without building widgets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from itertools import islice

from rich.text import Text

from gcptui.remote.telemetry.gpu import GpuHistory
from gcptui.remote.telemetry.progress import Checkpoint, Progress

_BLOCKS = " ▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int = 10, maximum: float | None = 100.0) -> str:
    """The last ``width`` values as block characters, scaled to ``maximum`` (None: to the largest)."""
    tail = list(islice(reversed(values), width))[::-1]  # not a copy of the whole series per cell
    if not tail:
        return ""
    top = maximum if maximum is not None else max(tail)
    bottom = 0.0 if maximum is not None else min(tail)
    span = (top - bottom) or 1.0
    steps = len(_BLOCKS) - 1
    return "".join(_BLOCKS[max(1, min(steps, round((v - bottom) / span * steps)))] for v in tail)


def util_style(util: float) -> str:
    """Busy green, part-used yellow, low dim: a low figure is an idle GPU, not an error (red read
    as one; the IDLE tag is the alarm for GPUs left idle too long)."""
    return "green" if util >= 70 else "yellow" if util >= 20 else "dim"


def format_duration(seconds: float | None) -> str:
    """``ETA`` style: 45s, 12m, 3h05m, 2d04h."""
    if seconds is None:
        return "?"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s" if s < 600 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def short_age(seconds: float) -> str:
    """An age in one unit, for a narrow cell: 45s, 12m, 3h, 2d (a future time reads 0s)."""
    s = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def this_runs(progress: Progress | None) -> Progress | None:
    """``progress`` without checkpoints ahead of its step: those are an earlier run's (the metrics
    file is appended across starts), and a fresh run showed the last run's ``ckpt 3000`` until its
    own first checkpoint. A running job never has a checkpoint beyond the step it is at; a resumed
    one continues from (at or above) the checkpoint it restored."""
    if progress is None or progress.step is None:
        return progress

    def ahead(checkpoint: Checkpoint | None) -> bool:
        return checkpoint is not None and checkpoint.step is not None and checkpoint.step > step

    step = progress.step

    disk = None if ahead(progress.last_checkpoint) else progress.last_checkpoint
    mirrored = None if ahead(progress.mirrored) else progress.mirrored
    if disk is progress.last_checkpoint and mirrored is progress.mirrored:
        return progress
    return replace(progress, last_checkpoint=disk, mirrored=mirrored)


def checkpoint_cell(progress: Progress | None, now: float) -> Text:
    """Fleet-table cell: the newest checkpoint step on the VM's disk, the newest in the bucket and
    how long ago it was mirrored (``ckpt 1200 · ☁ 1100 2m``); ``☁ off`` when the trainer turned
    mirroring off, a ``!`` when the last upload failed; ``—`` before any checkpoint (of this run)."""
    progress = this_runs(progress)
    if progress is None or (
        progress.last_checkpoint is None and progress.mirrored is None and not progress.mirror_off
    ):
        return Text("—", "dim")
    text = Text()
    disk = progress.last_checkpoint
    text.append(f"ckpt {disk.step if disk is not None and disk.step is not None else '?'}", "bold")
    mirrored = progress.mirrored
    if progress.mirror_off:
        return text.append(" · ☁ off", "bold red")
    if mirrored is None and not progress.mirror_problem:
        return text  # not mirrored (no bucket configured, or none done yet)
    text.append(" · ")
    if mirrored is not None:
        behind = disk is not None and disk.step is not None and (mirrored.step or 0) < disk.step
        text.append(
            f"☁ {mirrored.step if mirrored.step is not None else '?'}", "yellow" if behind else "cyan"
        )
        if mirrored.time is not None:
            text.append(f" {short_age(now - mirrored.time)}", "dim")
    else:
        text.append("☁ -", "dim")
    if progress.mirror_problem:
        text.append(" !", "bold red")
    return text


def checkpoint_detail(progress: Progress | None, now: float) -> Text:
    """The detail view's line: each copy with its step and place, and the last mirror problem."""
    progress = this_runs(progress)
    if progress is None or (
        progress.last_checkpoint is None and progress.mirrored is None and not progress.mirror_problem
    ):
        return Text("none reported yet", "dim")
    text = Text()
    disk = progress.last_checkpoint
    text.append("disk ", "bold")
    text.append(f"step {disk.step} {disk.path}" if disk is not None else "-")
    text.append("\nbucket ", "bold")
    mirrored = progress.mirrored
    if mirrored is not None:
        age = f", mirrored {short_age(now - mirrored.time)} ago" if mirrored.time is not None else ""
        text.append(f"step {mirrored.step}{age} {mirrored.path}".rstrip(), "cyan")
    else:
        text.append("off" if progress.mirror_off else "-", "bold red" if progress.mirror_off else "dim")
    if progress.mirror_problem:
        label = "mirroring is off: " if progress.mirror_off else "last upload failed: "
        text.append(f"\n{label}{progress.mirror_problem}", "red")
    return text


def gpu_cell(history: GpuHistory, width: int = 8, idle: bool = False) -> Text:
    """Fleet-table cell: per GPU, a util sparkline and the current util and memory use.

    ``no GPU`` for a VM without one; ``…`` before the first sample; a red ``IDLE`` flag when the
    GPUs have sat idle for the configured time.
    """
    latest = history.latest
    if latest is None:
        return Text("…", "dim")
    if latest.state == "no_gpu":
        return Text("no GPU", "dim")
    text = Text()
    if idle:
        text.append(" IDLE ", "bold white on red")
        text.append(" ")
    if latest.state == "reconnecting" and not latest.gpus:
        text.append("reconnecting…", "yellow")
        return text
    for number, gpu in enumerate(latest.gpus):
        if number:
            text.append(" ")
        util = gpu.util or 0.0
        text.append(sparkline(history.util.get(gpu.index, ()), width), util_style(util))
        text.append(f"{util:3.0f}%" if gpu.util is not None else "   ?", util_style(util))
        if gpu.mem_percent is not None:
            text.append(f" {gpu.mem_percent:2.0f}%m", "cyan")
    return text


def progress_cell(progress: Progress | None, loss_width: int = 10) -> Text:
    """Fleet-table cell: ``step/total pct rate ETA`` and a loss sparkline."""
    if progress is None or progress.step is None:
        return Text("—", "dim")
    text = Text()
    if progress.total_steps:
        text.append(f"{progress.step}/{progress.total_steps}", "bold")
        if progress.fraction is not None:
            text.append(f" {progress.fraction * 100:3.0f}%")
    else:
        text.append(f"step {progress.step}", "bold")
    if progress.steps_per_s:
        rate = progress.steps_per_s
        text.append(f" {rate:.2f} it/s" if rate < 10 else f" {rate:.0f} it/s", "cyan")
    if progress.eta_seconds is not None:
        text.append(f" ETA {format_duration(progress.eta_seconds)}", "magenta")
    if progress.losses:
        text.append(" ")
        text.append(sparkline(progress.losses, loss_width, maximum=None), "yellow")
        if progress.loss is not None:
            text.append(f" {progress.loss:.4g}", "yellow")
    return text


def gpu_panel_text(
    history: GpuHistory,
    progress: Progress | None,
    *,
    idle: bool = False,
    idle_minutes: float = 0,
    width: int = 30,
) -> Text:
    """The ``GpuPanel`` content as one ``Text`` (also usable in a CLI)."""
    text = Text()
    latest = history.latest
    if idle:
        text.append(
            f" GPUs idle for {idle_minutes:g}+ min while the VM runs: it is burning money \n",
            "bold white on red",
        )
    if progress is not None and progress.step is not None:
        text.append("Training  ", "bold")
        text.append_text(progress_cell(progress, loss_width=width))
        if progress.last_checkpoint is not None:
            text.append(
                f"\n          last checkpoint: step {progress.last_checkpoint.step} {progress.last_checkpoint.path}",
                "dim",
            )
        if progress.preemptions:
            text.append(f"\n          preempted {progress.preemptions}×", "yellow")
        text.append("\n")
    if latest is None:
        return text.append("GPU       waiting for the first sample…", "dim")
    if latest.state == "no_gpu":
        return text.append(
            f"GPU       no GPU ({latest.message})" if latest.message else "GPU       no GPU", "dim"
        )
    for gpu in latest.gpus:
        util = gpu.util or 0.0
        text.append(f"GPU {gpu.index}  ", "bold")
        text.append(f"{gpu.name}\n", "dim")
        text.append("  util ")
        text.append(sparkline(history.util.get(gpu.index, ()), width).ljust(width), util_style(util))
        text.append(f" {util:3.0f}%", util_style(util))
        text.append("\n  mem  ")
        text.append(sparkline(history.mem.get(gpu.index, ()), width).ljust(width), "cyan")
        if gpu.mem_used_mib is not None and gpu.mem_total_mib:
            text.append(f" {gpu.mem_used_mib / 1024:.1f}/{gpu.mem_total_mib / 1024:.1f} GiB", "cyan")
        temp = f"{gpu.temp_c:.0f}°C" if gpu.temp_c is not None else "?°C"
        power = f"{gpu.power_w:.0f} W" if gpu.power_w is not None else "? W"
        text.append(f"\n  {temp}  {power}\n")
    if latest.processes:
        text.append("Processes\n", "bold")
        for proc in latest.processes:
            used = f"{proc.used_mib:.0f} MiB" if proc.used_mib is not None else "?"
            text.append(f"  {proc.pid:>7}  {used:>10}  {proc.name}\n")
    if latest.state == "reconnecting":
        text.append("reconnecting…", "yellow")
    return text
