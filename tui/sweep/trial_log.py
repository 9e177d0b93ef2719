"""A sweep trial's own log: the part of its job slot's log (``~/.gcptui/job[-N]/output.log``) that
its runs wrote.

Every trial of a slot appends to the same file; each run starts with the supervisor's banner
(``==== gcptui: ... job started in DIR ====``) and, after any setup, ``==== gcptui: command: CMD``.
A run is the trial's when CMD is its command or its resume command (each names the trial's own run
directory); its lines go on until the next run's banner. The slice is cut from a stream of the slot's
log (one pane of the logs screen, which the app makes of it: tui/sweep does not import tui/logs),
so a running trial's lines keep coming.

A trial of a job sweep (``on = "vertex" | "gke"``: ``Trial.job`` set) has its job's log instead, as
the logs screen shows that job's fleet row: a Vertex AI job's lines from Cloud Logging, a Kubernetes
Job's pods' output from the Kubernetes log API (the row's backend says which it can: no job has
another trial's lines).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable

from gcptui.remote.compute.backend import Capability
from gcptui.remote.compute.exec_channel import ExecChannel
from gcptui.remote.config import LogsConfig
from gcptui.remote.jobs.protocol import log_path
from gcptui.remote.models import FleetSnapshot, Instance
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
    """(pane title, stream opener) of ``trial``'s own log; None when its VM or job is not known or
    nothing reaches it (its exec channel follows it across restarts)."""
    instance = snapshot.find(trial.vm or "")
    if trial.job is not None:
        return _job_log(services, instance, trial, logs) if instance is not None else None
    channel = services.channel_or_none(instance) if instance is not None else None
    if channel is None:
        return None
    history = max(logs.history_lines, HISTORY_LINES)
    opener = functools.partial(_open, channel, log_path(trial.slot), (trial.command, trial.resume), history)
    return f"{trial.id} on {trial.vm}", opener


def _job_log(services: Services, row: Instance, trial: Trial, logs: LogsConfig) -> TrialLog | None:
    """The log of the job listed as ``row`` (the trial's job, by its id or name)."""
    title = f"{trial.id} job {trial.vm}"
    if services.compute.can(row, Capability.CLOUD_LOGS):
        from gcptui.remote.vertex_workflows import row_log_events, settle_seconds

        settle = settle_seconds(services.config)
        return title, functools.partial(
            row_log_events, services.compute, row, history_lines=logs.history_lines, settle_seconds=settle
        )
    if services.compute.can(row, Capability.CONTAINER_LOGS):
        from gcptui.remote.gke_workflows import container_log_events

        # The Job's row: its pods' output merged (a pod the Job made again after a failure included).
        return title, functools.partial(
            container_log_events, services.compute, row, history_lines=logs.history_lines
        )
    return None


def unreachable(trial: Trial) -> str:
    """The line said when ``trial_log`` finds nothing to open for ``trial``."""
    if trial.job is not None:
        return f"{trial.id}: job {trial.vm} is not in the fleet list (gone?): its logs cannot be opened"
    return f"{trial.vm}: not reachable over SSH"
