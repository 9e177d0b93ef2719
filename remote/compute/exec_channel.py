"""The exec channel: how gcptui runs a process on a machine, whatever reaches it.

Jobs, sync, log following, telemetry and pulls need only this: start a command, write its stdin,
read its stdout and stderr, learn its exit status. SSH is one implementation (``ssh_exec.py``);
Kubernetes exec (GKE) is another. The shapes below are the subset of asyncssh's process API that
gcptui uses, in bytes, so an asyncssh process opened with ``encoding=None`` already is an
``ExecProcess``; another implementation adapts its own streams to the same few methods.

Rules every implementation keeps:
- the command is one POSIX ``sh`` command line, already quoted by the caller (``shlex.quote``);
- nothing secret travels in the command line (secrets go over stdin);
- errors reaching the machine raise ``gcptui.remote.errors.GcptuiError`` subclasses with one line
  saying what to do (SSH raises ``SshError``, whose ``retryable`` says whether to try again);
- closing a process ends the remote command's session (for SSH: the channel; the supervisor kills
  only the job's own process group, never more).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gcptui.remote.ssh.capped import exec_capped

# A probe or short command whose output we read: the machine decides what it prints, never how much
# memory or time the laptop or keeper spends on it (``true`` answered with endless output once took
# the keep-alive from 41 MB to 1.5 GB).
PROBE_TIMEOUT = 30.0
PROBE_BYTES = 65_536


class ExecStdin(Protocol):
    """The process's standard input."""

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None:
        """Wait until the written data is accepted (flow control)."""

    def write_eof(self) -> None:
        """Close stdin: the command reads end of file."""


class ExecOutput(Protocol):
    """The process's standard output or error."""

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (all until end of file when -1); b"" at end of file."""
        ...

    async def readline(self) -> bytes:
        """One line with its newline; the partial rest (or b"") at end of file."""
        ...

    async def readexactly(self, n: int) -> bytes:
        """Exactly ``n`` bytes, or ``asyncio.IncompleteReadError`` at end of file."""
        ...

    def at_eof(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class ExecResult:
    """A finished command: its exit status (None when it died of a signal) and its output."""

    exit_status: int | None
    stdout: bytes
    stderr: bytes

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


@runtime_checkable
class ExecProcess(Protocol):
    """One running command on the machine."""

    @property
    def stdin(self) -> ExecStdin: ...

    @property
    def stdout(self) -> ExecOutput: ...

    @property
    def stderr(self) -> ExecOutput: ...

    @property
    def exit_status(self) -> int | None:
        """The exit status once it ended (None while it runs, or when a signal ended it)."""
        ...

    def close(self) -> None:
        """End the session (the command sees its stdin closed and a hangup)."""

    async def wait_closed(self) -> None:
        """Wait until the command ended and its session closed (``exit_status`` is then final)."""


@runtime_checkable
class ExecChannel(Protocol):
    """A way to run processes on one machine (one row, or one worker of a row).

    ``where`` names what it reaches now (an address, a pod), for "reconnecting to ..." lines.
    """

    @property
    def where(self) -> str: ...

    async def start(self, command: str) -> ExecProcess:
        """Start ``command`` and return at once; the caller reads and writes, then closes it."""
        ...

    async def run(self, command: str, *, input: bytes = b"", timeout: float | None = None) -> ExecResult:
        """Run ``command`` to its end with ``input`` on stdin and collect its output; past ``timeout``
        seconds (reaching the machine included) the command is closed and ``TimeoutError`` raised."""
        ...


@dataclass(frozen=True, slots=True)
class Reach:
    """A machine as jobs and telemetry see it: the row's ``name`` (for messages, per-machine state
    and the job's checkpoint place) and the ``channel`` that runs processes on it."""

    name: str
    channel: ExecChannel


async def run_capped(
    channel: ExecChannel, command: str, *, timeout: float = PROBE_TIMEOUT, max_bytes: int = PROBE_BYTES
) -> ExecResult:
    """``channel.run`` for a command whose output is read: at most ``max_bytes`` of stdout (and
    ``MAX_STDERR`` of stderr) kept, the process closed past them (``exit_status`` None then), and
    ``TimeoutError`` past ``timeout`` seconds, reaching the machine included."""
    async with asyncio.timeout(timeout):
        result = await exec_capped(channel, command, max_bytes=max_bytes, timeout=timeout)
    return ExecResult(result.exit_status, result.stdout.encode(), result.stderr.encode())
