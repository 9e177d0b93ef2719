"""What ``gcptui sync`` shows while it works: a bar per machine (the local scan's count, then the
transfer), plain lines where stderr is no terminal, and the line an interrupted sync ends with."""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    Task,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from gcptui.remote.sync import (
    BatchApplied,
    FullSyncProgress,
    ScanProgress,
    SyncEvent,
    SyncStateChanged,
    SyncWarning,
)

PROBLEM_STATES = ("error", "reconnecting", "incomplete")
# Without a terminal the scan's count is a line, at most this often per machine (a log stays short).
PLAIN_SCAN_EVERY_S = 1.0


def human_bytes(count: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if count < 1000 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} GB"


class _SentColumn(DownloadColumn):
    """Bytes sent of the total, once a transfer has a total; nothing before (never ``0/?``)."""

    def render(self, task: Task) -> Text:
        return super().render(task) if task.fields.get("sending") else Text("")


class _LeftColumn(TimeRemainingColumn):
    """The time left of a transfer; nothing while there is none, or once all is sent (the VM's
    writing has no estimate)."""

    def render(self, task: Task) -> Text:
        shown = task.fields.get("sending") and not task.fields.get("writing")
        return super().render(task) if shown else Text("")


@dataclass
class _Machine:
    """What one machine's sync got to: for its bar, and for the line after a Ctrl-C."""

    bar: TaskID
    files_done: int = 0
    files_total: int = 0
    sending: bool = False
    in_sync: bool = False
    quiet_scan: bool = False  # in sync once: the periodic re-check's scan is no news
    said_scan_at: float = 0.0


class SyncView:
    """Turns each session's events into the bars (a terminal) or lines (a pipe, a log)."""

    def __init__(self, console: Console, names: list[str], *, once: bool) -> None:
        self.console = console
        self.once = once
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), _SentColumn(), _LeftColumn(),
            console=console, transient=not once,
        )  # fmt: skip
        self.machines = {
            name: _Machine(self.progress.add_task(name, total=None, sending=False, writing=False))
            for name in names
        }
        self._said: set[str] = set()  # warnings about the local tree: every session has them, said once

    def on_event(self, event: SyncEvent) -> None:
        machine = self.machines[event.name]
        if isinstance(event, ScanProgress):
            self._scanned(event, machine)
        elif isinstance(event, FullSyncProgress):
            machine.files_done, machine.files_total = event.files_done, event.files_total
            machine.sending, machine.in_sync = True, False
            # All sent is not all written: the VM creates them meanwhile (seconds for 30,000 files).
            writing = event.files_done == event.files_total
            words = "files, VM writing" if writing else "files sent"
            self.progress.update(
                machine.bar,
                total=event.bytes_total,
                completed=event.bytes_done,
                description=f"{event.name} {event.files_done}/{event.files_total} {words}",
                sending=True,
                writing=writing,
            )
        elif isinstance(event, BatchApplied) and not event.full:
            self.progress.console.print(
                f"{event.name}: {event.files} file{'s' if event.files != 1 else ''}"
                f"{f', {event.deleted} deleted' if event.deleted else ''}, "
                f"{human_bytes(event.bytes)}, {event.ms:.0f} ms"
            )
        elif isinstance(event, SyncWarning) and event.local:
            if event.message not in self._said:
                self._said.add(event.message)
                self.progress.console.print(f"[yellow]![/] {escape(event.message)}")
        elif isinstance(event, SyncWarning):
            self.progress.console.print(f"[yellow]![/] {escape(f'{event.name}: {event.message}')}")
        elif isinstance(event, SyncStateChanged):
            self._state(event, machine)

    def _scanned(self, event: ScanProgress, machine: _Machine) -> None:
        if machine.quiet_scan:
            return
        if self.console.is_terminal:  # one line, updated in place, drawn now (not at the next tick)
            words = f"scanned {event.entries:,} files" if event.done else f"scanning: {event.entries:,} files"
            self.progress.update(machine.bar, description=f"{event.name} {words}", refresh=True)
            return
        now = time.monotonic()
        if event.done:
            self.console.print(
                f"{event.name}: scanned {event.entries:,} files", highlight=False, markup=False
            )
        elif now - machine.said_scan_at >= PLAIN_SCAN_EVERY_S:
            machine.said_scan_at = now
            self.console.print(
                f"{event.name}: scanning, {event.entries:,} files so far", highlight=False, markup=False
            )

    def _state(self, event: SyncStateChanged, machine: _Machine) -> None:
        if event.state in PROBLEM_STATES:
            self.progress.console.print(f"[red]✗[/] {escape(f'{event.name}: {event.state}: {event.reason}')}")
        if event.state in ("connecting", "reconnecting"):
            machine.quiet_scan = False
        elif event.state == "syncing":
            machine.in_sync = False
        elif event.state == "in_sync":
            if not self.once and not self.console.is_terminal and not machine.quiet_scan:
                # A log has no bar to read: the moment following starts (and again after a reconnect).
                self.console.print(f"{event.name}: in sync, following changes", highlight=False, markup=False)
            machine.in_sync = machine.quiet_scan = True
            if not machine.sending:  # nothing was sent: a full bar that says so, no byte count
                self.progress.update(machine.bar, total=1, completed=1, description=f"{event.name} in sync")
            else:
                sent = f", {machine.files_total} files sent" if self.once else ""
                self.progress.update(machine.bar, description=f"{event.name} in sync{sent}", writing=False)

    def interrupted(self, config: str | None, named: list[str]) -> str:
        """The line after Ctrl-C: what each machine got, and the command that carries on (a new
        sync sends only what differs)."""
        said = []
        for name, machine in self.machines.items():
            if machine.in_sync:
                said.append(f"{name} in sync")
            elif machine.sending:
                said.append(f"{name} {machine.files_done}/{machine.files_total} files sent")
            else:
                said.append(f"{name} nothing sent yet")
        behind = [name for name, machine in self.machines.items() if not machine.in_sync]
        if self.once and not behind:
            return f"interrupted: {', '.join(said)}"
        again = behind if self.once else list(self.machines)
        names = [] if not named and again == list(self.machines) else again
        words = [
            "gcptui",
            *(["--config", config] if config else []),
            "sync",
            *(["--once"] if self.once else []),
            *names,
        ]
        carry = "sends what is missing" if self.once else "follows again (only what differs is sent)"
        return f"interrupted: {', '.join(said)}; `{shlex.join(words)}` {carry}"
