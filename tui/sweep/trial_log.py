"""A sweep trial's own log: the part of its job slot's log (``~/.gcptui/job[-N]/output.log``) that
its runs wrote.

Every trial of a slot appends to the same file; each run starts with the supervisor's banner
(``==== gcptui: ... job started in DIR ====``) and, after any setup, ``==== gcptui: command: CMD``.
A run is the trial's when CMD is its command or its resume command (each names the trial's own run
directory); its lines go on until the next run's banner. The slice is cut from a stream of the slot's
log (one pane of the logs screen, which the app makes of it: tui/sweep does not import tui/logs),
so a running trial's lines keep coming.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable

from gcptui.remote.compute.exec_channel import ExecChannel
from gcptui.remote.config import LogsConfig
from gcptui.remote.jobs.protocol import log_path
from gcptui.remote.models import FleetSnapshot
from gcptui.remote.services import Services
from gcptui.remote.sweep.state import Trial
from gcptui.remote.sweep.vmside import BANNER
from gcptui.remote.telemetry.log_stream import LogChunk, LogEvent, LogStream

COMMAND_LINE = f"{BANNER}command: "
HISTORY_LINES = 20_000  # the slot's log from well before the trial's start (trials before it share it)
MAX_PREAMBLE = 2_000  # lines kept between a banner and its command line (a long setup's output)


class TrialSlice:
    """Feeds on the slot log's lines; passes on those of the trial's runs."""

    def __init__(self, commands: tuple[str, ...]) -> None:
        self.commands = {c for c in commands if c}
        self.inside = False
        self._pending: list[str] | None = None  # a run's first lines, until its command line tells whose

    def feed(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        for line in lines:
            if line.startswith(BANNER) and "job started" in line:
                self.inside, self._pending = False, [line]
            elif self._pending is not None:
                self._pending.append(line)
                if line.startswith(COMMAND_LINE):
                    if line.removeprefix(COMMAND_LINE).strip() in self.commands:
                        out.extend(self._pending)
                        self.inside = True
                    self._pending = None
                elif len(self._pending) > MAX_PREAMBLE:
                    self._pending = None  # no command line after all that: not a run to show
            elif self.inside:
                out.append(line)
        return out


async def trial_events(events: AsyncIterator[LogEvent], commands: tuple[str, ...]) -> AsyncIterator[LogEvent]:
    """``events`` of the slot's log with only the trial's lines (notices pass as they are)."""
    cut = TrialSlice(commands)
    async for event in events:
        if not isinstance(event, LogChunk) or event.data:
            yield event
            continue
        lines = cut.feed(event.lines)
        partial = event.partial if cut.inside else None
        if lines or partial is not None:
            yield LogChunk(lines, partial, event.offset)


def _open(
    channel: ExecChannel, path: str, commands: tuple[str, ...], history: int
) -> AsyncIterator[LogEvent]:
    stream = LogStream(channel, path, history_lines=history)
    return trial_events(stream.events(), commands)


TrialLog = tuple[str, Callable[[], AsyncIterator[LogEvent]]]


def trial_log(services: Services, snapshot: FleetSnapshot, trial: Trial, logs: LogsConfig) -> TrialLog | None:
    """(pane title, stream opener) of ``trial``'s own log; None when its VM is not known or nothing
    reaches it (its exec channel follows it across restarts)."""
    instance = snapshot.find(trial.vm or "")
    channel = services.channel_or_none(instance) if instance is not None else None
    if channel is None:
        return None
    history = max(logs.history_lines, HISTORY_LINES)
    opener = functools.partial(_open, channel, log_path(trial.slot), (trial.command, trial.resume), history)
    return f"{trial.id} on {trial.vm}", opener
