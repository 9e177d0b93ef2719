"""Follow the job on one machine over its exec channel: state changes and the preemption notice.

``watch_job`` runs ONE long-lived remote command, ``gcptui-job.sh watch``, which polls the VM's
state directory with shell builtins every ``interval`` and prints a record whenever the state
changes (``key=value`` lines, the command as ``|`` lines, then ``--``) and a ``.`` heartbeat when
nothing changes. The notice watcher beside the job writes ``~/.gcptui/job/preempted`` the moment the
metadata server says TRUE, so the client hears of a preemption about ``interval`` after the VM does,
without any API poll.

A dropped connection (or a watch that ended on the VM, or one silent for ``stall_timeout``) yields
one ``lost`` event, which keep-alive uses to poll the API at once; the watch then starts the command
on its ``ExecChannel`` again (over SSH the pool reconnects with backoff) until the consumer stops
iterating. The VM's output is read as bytes, each line decoded on its own (bad UTF-8 replaced) and
cut at ``exec_lines.MAX_LINE`` bytes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

import asyncssh

from gcptui.remote.aio import within
from gcptui.remote.backoff import Backoff
from gcptui.remote.compute.exec_channel import ExecChannel, ExecProcess
from gcptui.remote.compute.exec_lines import LineReader
from gcptui.remote.errors import CloudError
from gcptui.remote.jobs.protocol import JobStatus, parse_status, supervisor_command, supervisor_script
from gcptui.remote.safe_text import vm_field
from gcptui.remote.ssh.errors import SshError

JobEventKind = Literal["state", "preempted", "ended", "lost"]

# What ends one watch command and makes the next attempt wait for a (re)connection (CloudError: a
# pod's exec that could not open, its API server unreachable or the pod not running).
_DROPS = (SshError, CloudError, asyncssh.Error, OSError, EOFError, TimeoutError, asyncio.IncompleteReadError)


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One thing the watch learned about the job on ``name``.

    - ``state``: a fresh snapshot: the first one after every (re)connect, then one per change.
    - ``preempted``: the VM's notice watcher recorded GCE's preemption notice (``status.preempted_at``)
      and sent the job SIGTERM; also for a notice recorded before the watch began (it stays until the
      next start). Once per start.
    - ``ended``: the job stopped running (``status`` says how) while this watch followed it.
    - ``lost``: the connection dropped or the watch ended on the VM; ``status`` is the last one
      known, ``reason`` says what happened. Once per outage; a ``state`` follows when it is back.

    ``at`` is when the client saw it (UTC).
    """

    name: str
    kind: JobEventKind
    status: JobStatus | None
    at: datetime
    reason: str = ""


async def watch_job(
    channel: ExecChannel,
    name: str,
    *,
    remote_home: str | None = None,
    interval: float = 0.2,
    heartbeat: float = 1.0,
    stall_timeout: float = 5.0,
    retry_delay: float = 0.2,
    retry_max: float = 5.0,
) -> AsyncIterator[JobEvent]:
    """Yield ``JobEvent``s for the job on host ``name`` (reached by ``channel``) until the consumer stops iterating.

    ``interval`` is the VM-side poll period (the notice latency is about this plus one round trip);
    a heartbeat every ``heartbeat`` seconds proves the link alive, and ``stall_timeout`` without one
    counts as a drop. Between attempts the watch waits ``retry_delay``, doubling up to ``retry_max``.
    ``remote_home`` replaces ``$HOME`` on the VM, as in ``JobRunner``.
    """
    polls = max(1, round(heartbeat / interval))
    command = supervisor_command(
        "watch", [f"{interval:g}", str(polls)], install=True, remote_home=remote_home
    )
    tracker = _Tracker(name)
    pauses = Backoff(retry_delay, retry_max)
    outage = False
    while True:
        reason = "the watch ended on the VM"
        tracker.reconnected()
        try:
            # aclosing: a consumer that stops mid-record closes the remote command at once, not at GC.
            async with aclosing(_records(channel, name, command, stall_timeout)) as records:
                async for status in records:
                    outage = False
                    pauses.reset()
                    for event in tracker.update(status):
                        yield event
        except _DROPS as err:
            reason = _describe(err)
        if not outage:
            outage = True
            yield JobEvent(name, "lost", tracker.last, _now(), reason)
        await asyncio.sleep(pauses.pause())


class _Tracker:
    """Turns a stream of snapshots into events: what changed since the last one seen."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.last: JobStatus | None = None
        self._fresh = True  # the next snapshot is the first of a (re)connection: always a "state"
        self._notice: tuple[str | None, str] | None = None  # (started_at, preempted_at) reported

    def reconnected(self) -> None:
        self._fresh = True

    def update(self, status: JobStatus) -> list[JobEvent]:
        at = _now()
        events: list[JobEvent] = []
        previous, self.last = self.last, status
        if self._fresh or status != previous:
            events.append(JobEvent(self.name, "state", status, at))
        self._fresh = False
        if status.preempted_at and (status.started_at, status.preempted_at) != self._notice:
            self._notice = (status.started_at, status.preempted_at)
            events.append(JobEvent(self.name, "preempted", status, at))
        if previous is not None and previous.state == "running" and status.state != "running":
            events.append(JobEvent(self.name, "ended", status, at))
        return events


MAX_RECORD_LINES = 10_000  # a record is ~10 lines and its command; the rest of a longer one is dropped


async def _records(
    channel: ExecChannel, name: str, command: str, stall_timeout: float
) -> AsyncGenerator[JobStatus, None]:
    """Run the watch command once; yield each record as a ``JobStatus`` until it ends or stalls."""
    process = await channel.start(command)
    try:
        # The command installs the supervisor from stdin first (cheap, and always the right version).
        process.stdin.write(supervisor_script()[0])
        process.stdin.write_eof()
        lines: list[str] = []
        # Bounded lines: a state file's 2 MiB command is cut, never a ValueError or held whole.
        stdout = LineReader(process.stdout)
        while True:
            raw = await within(stall_timeout, stdout.readline())
            if not raw.endswith(b"\n"):
                raise EOFError(await _ending(process))
            line = raw[:-1].decode("utf-8", errors="replace")
            if line == ".":
                continue  # heartbeat
            if line == "--":
                yield parse_record(name, lines)
                lines = []
            elif len(lines) < MAX_RECORD_LINES:  # the VM's output: a record never grows without end
                lines.append(line)
    finally:
        process.close()


def parse_record(name: str, lines: Sequence[str]) -> JobStatus:
    """One ``watch`` record (without its ``--``) as a ``JobStatus``."""
    head = [line for line in lines if not line.startswith("|")]
    command = [line[1:] for line in lines if line.startswith("|")]
    text = "".join(f"{line}\n" for line in head)
    if command:
        text += "command:\n" + "".join(f"{line}\n" for line in command)
    return parse_status(name, text)


MAX_STDERR = 4096  # the watch's last words, quoted in one line


async def _ending(process: ExecProcess) -> str:
    """Why the watch's output ended: the connection (or a signal), or the command's own exit."""
    try:
        await within(1.0, process.wait_closed())
    except (asyncssh.Error, OSError, TimeoutError):
        pass
    if process.exit_status is None:
        return "the connection closed"
    try:
        raw = await within(0.5, process.stderr.read(MAX_STDERR))
    except (asyncssh.Error, OSError, TimeoutError):
        raw = b""
    stderr = (
        vm_field(raw.decode("utf-8", errors="replace").strip().splitlines()[-1], 300) if raw.strip() else ""
    )
    return f"the watch on the VM ended (status {process.exit_status}{': ' + stderr if stderr else ''})"


def _describe(err: BaseException) -> str:
    if isinstance(err, TimeoutError):
        return "no word from the VM (not even a heartbeat): the link is down or the VM is stuck"
    return str(err) or type(err).__name__


def _now() -> datetime:
    return datetime.now(UTC)


__all__ = ["JobEvent", "JobEventKind", "parse_record", "watch_job"]
