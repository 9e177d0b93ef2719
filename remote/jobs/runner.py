"""Start, restart, kill and inspect the training job on a VM, detached from SSH.

The VM side is ``remote/vm/gcptui-job.sh``, a POSIX sh supervisor installed on first use under
``~/.gcptui/bin/``. It leads the job's process group (setsid), runs ``[job].setup`` once per disk and
then ``[job].command`` in ``[sync].dest``, appends output to ``~/.gcptui/job/output.log`` and records
pid, pgid, times, exit code and how it ended in ``~/.gcptui/job/``: every client reads the same truth.
Each operation is one exec round trip over the machine's ``ExecChannel`` (SSH for a VM or host,
Kubernetes exec for a pod: the supervisor speaks only stdin/stdout, so it runs unchanged in both);
the user's command travels as one ``shlex.quote``d argument and runs as ``sh -c COMMAND``, exactly as
typed. A machine is a ``Reach`` (its name and channel: ``Services.reach(row)``, or
``compute.ssh_exec.pool_reach`` for an SSH target over the shared pool).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

import asyncssh

from gcptui.remote.compute.exec_channel import Reach
from gcptui.remote.config import Config, JobConfig, StorageConfig
from gcptui.remote.errors import ConfigError, GcptuiError
from gcptui.remote.jobs.protocol import (
    ALREADY_RUNNING,
    BIN_DIR,
    NOT_INSTALLED,
    JobStatus,
    env_file,
    parse_status,
    supervisor_command,
    supervisor_script,
)
from gcptui.remote.jobs.watch import JobEvent, watch_job
from gcptui.remote.safe_text import vm_field
from gcptui.remote.ssh.capped import exec_capped
from gcptui.remote.ssh.errors import SshUnreachableError

JobAction = Literal["start", "restart", "kill", "status"]
JobHost = Reach  # a machine to act on: its name and its channel
T = TypeVar("T")
MAX_ANSWER_BYTES = 1 << 20  # the supervisor's answer: a status and the command, far below this


class JobError(GcptuiError):
    """A job operation failed on the VM (no project directory, no setsid, a stuck lock, ...)."""


class JobAlreadyRunningError(JobError):
    """``start`` refused: a job runs already; ``status`` is what runs."""

    def __init__(self, message: str, status: JobStatus) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class HostResult(Generic[T]):
    """One host's outcome of a fleet-wide operation: ``value`` or the ``error`` to print."""

    name: str
    value: T | None = None
    error: GcptuiError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class Named(Protocol):
    """Anything named after its machine (a ``Reach``)."""

    @property
    def name(self) -> str: ...


H = TypeVar("H", bound=Named)


class JobRunner:
    """Job control for the configured ``[job]`` on any machine with an exec channel.

    Every machine comes as a ``Reach``, which brings its own channel, so the runner holds no SSH pool.

    ``remote_home`` replaces ``$HOME`` on the VM for our commands and the job (tests isolate runs
    with it); None uses the login's own home. Every method raises a one-line ``GcptuiError``.
    """

    def __init__(
        self,
        job: JobConfig,
        dest: str,
        *,
        remote_home: str | None = None,
        command_timeout: float = 60.0,
        storage: StorageConfig | None = None,
    ) -> None:
        self.job = job
        self.storage = storage or StorageConfig()
        self.dest = dest
        self.remote_home = remote_home
        self.command_timeout = command_timeout
        # Machines (name, where the channel reaches it) that have the supervisor installed: the
        # script travels once per machine, and again when a command finds it missing (a new disk).
        self._installed: set[tuple[str, str]] = set()

    @classmethod
    def from_config(cls, config: Config) -> JobRunner:
        """A runner for ``config.job`` running in ``config.sync.dest``."""
        return cls(config.job, config.sync.dest, storage=config.storage)

    # ---- one host ---------------------------------------------------------------------------

    async def status(self, host: JobHost) -> JobStatus:
        """The job's state on ``host`` (``none`` where nothing ever ran)."""
        return (await self._call(host, "status", []))[1]

    async def start(self, host: JobHost) -> JobStatus:
        """Run setup (once per disk) and ``[job].command``; refuses while a job runs."""
        return await self._launch(host, "start", self._require(self.job_for(host.name).command, "command"))

    async def restart(self, host: JobHost) -> JobStatus:
        """Kill the job if it runs, then start ``[job].resume`` (default: ``[job].command``)."""
        return await self._launch(
            host, "restart", self._require(self.job_for(host.name).resume_command, "command")
        )

    async def kill(self, host: JobHost, *, by: Literal["group-stop"] | None = None) -> JobStatus:
        """SIGTERM the job's process group, SIGKILL after ``stop_grace_seconds``; nothing else.

        ``by="group-stop"``: keep-alive stops a node because another node of its group was lost; the
        VM records it (status ``detail``), so this node's own preemption still resumes the job.
        """
        args = [self._grace_tenths(), *([by] if by else [])]
        return (await self._call(host, "kill", args, self._kill_timeout()))[1]

    async def running_slots(self, host: JobHost) -> int:
        """How many job slots on ``host`` (the VM's job, a sweep's trials beside it) run a job."""
        output = (await self._call(host, "busy", []))[2]
        for line in output.splitlines():
            if line.startswith("running=") and line.removeprefix("running=").isdigit():
                return int(line.removeprefix("running="))
        raise JobError(f"{host.name}: job busy gave no answer: {output.strip()[:200]!r}")

    def watch(self, host: JobHost, **options: Any) -> AsyncIterator[JobEvent]:
        """``watch_job`` on ``host`` over its channel, with this runner's remote home (see jobs/watch.py)."""
        return watch_job(host.channel, host.name, remote_home=self.remote_home, **options)

    # ---- many hosts at once -----------------------------------------------------------------

    async def run_all(self, action: JobAction, hosts: Sequence[JobHost]) -> list[HostResult[JobStatus]]:
        """``action`` on every host concurrently; one ``HostResult`` per host, in order."""
        operation: Callable[[JobHost], Awaitable[JobStatus]] = getattr(self, action)
        return await gather_hosts(operation, hosts)

    # ---- internals --------------------------------------------------------------------------

    @staticmethod
    def _require(command: str, key: str) -> str:
        if not command.strip():
            raise ConfigError(f"[job].{key} is empty: set the training command in gcptui.toml")
        return command

    def job_for(self, name: str) -> JobConfig:
        """The job run on machine ``name``: ``[job]`` here; a sweep's runner gives each VM its trial's."""
        return self.job

    def _job_env(self, name: str) -> dict[str, str]:
        """``[job].env`` plus what gcptui gives every job (a ``[job].env`` entry of the same name wins)."""
        url = self.storage.checkpoint_url(name)
        return {**({"GCPTUI_CHECKPOINT_URL": url} if url else {}), **self.job_for(name).env}

    def _grace_tenths(self) -> str:
        return str(max(0, round(self.job.stop_grace_seconds * 10)))

    def _kill_timeout(self) -> float:
        return self.command_timeout + self.job.stop_grace_seconds + 10.0

    async def _launch(self, host: JobHost, op: str, command: str) -> JobStatus:
        # The job's environment goes over stdin into a 0600 file, never into argv (where `ps` shows it).
        args = [self.dest, command, self.job_for(host.name).setup]
        if op == "restart":
            args.insert(0, self._grace_tenths())
        rc, status, output = await self._call(
            host, op, args, self._kill_timeout(), allowed=(ALREADY_RUNNING,), send_env=True
        )
        if rc == ALREADY_RUNNING:
            name = host.name
            whole = name.split("/", 1)[0]  # a TPU worker's job is its node's: restarted whole
            raise JobAlreadyRunningError(
                f"a job is already running on {name} (pid {status.pid}, started {status.started_at}): "
                f"use `gcptui job restart {whole}` or `gcptui job kill {whole}`",
                status,
            )
        return status

    def _remote_command(self, op: str, args: list[str], install: bool, env_end: str | None = None) -> str:
        return supervisor_command(op, args, install=install, remote_home=self.remote_home, env_end=env_end)

    async def _call(
        self,
        host: JobHost,
        op: str,
        args: list[str],
        timeout: float | None = None,
        allowed: tuple[int, ...] = (),
        send_env: bool = False,
    ) -> tuple[int, JobStatus, str]:
        """Run ``gcptui-job.sh op args`` on ``host``; returns exit code, parsed status, raw output.

        ``send_env``: the job's environment precedes the (optional) script on stdin.
        """
        timeout = timeout or self.command_timeout
        name = host.name
        for attempt in range(3):
            machine = (name, host.channel.where)
            install = machine not in self._installed
            env_end = f"#gcptui-env-end-{secrets.token_hex(8)}" if send_env else None
            command = self._remote_command(op, args, install, env_end)
            stdin = f"{env_file(self._job_env(name))}{env_end}\n" if env_end else ""
            if install:
                stdin += supervisor_script()[0].decode()
            try:
                # The VM's answer is read up to a cap: its state files (the command) are its to fill.
                result = await exec_capped(
                    host.channel, command, input=stdin or None, max_bytes=MAX_ANSWER_BYTES, timeout=timeout
                )
            except asyncssh.ChannelOpenError:
                # The session never opened (a connection that just died): nothing ran, so try again.
                if attempt == 2:
                    raise SshUnreachableError(name, f"{name}: SSH connection lost: try again") from None
                continue
            except TimeoutError:  # asyncio's (exec_capped) and asyncssh's alike
                raise JobError(
                    f"{name}: `job {op}` got no answer within {timeout:g}s: check `gcptui job status {name}`"
                ) from None
            except (asyncssh.Error, OSError) as err:
                raise SshUnreachableError(
                    name,
                    f"{name}: SSH connection lost during `job {op}` ({err}): check `gcptui job status {name}`",
                ) from None
            rc = result.exit_status
            if rc == NOT_INSTALLED:
                self._installed.discard(machine)  # a new disk, or someone removed ~/.gcptui: install again
                continue
            self._installed.add(machine)
            output = result.stdout
            if rc == 0 or (rc is not None and rc in allowed):
                return rc, parse_status(name, output), output
            raise JobError(_failure(name, op, rc, output, result.stderr))
        raise JobError(f"{name}: could not install the job supervisor under ~/{BIN_DIR}")


def _failure(name: str, op: str, rc: int | None, output: str, stderr: str) -> str:
    """One line for a failed supervisor call: its own ``error=`` line, else the tail of stderr."""
    for line in output.splitlines():
        if line.startswith("error="):
            reason = vm_field(line.removeprefix("error="), 500)  # the VM's words: one inert line
            if rc == 5:
                reason += f" (`gcptui sync {name} --once`)"
            return f"{name}: job {op} failed: {reason}"
    tail = vm_field(stderr.strip().splitlines()[-1], 500) if stderr.strip() else f"exit status {rc}"
    return f"{name}: job {op} failed on the VM: {tail}"


async def gather_hosts(operation: Callable[[H], Awaitable[T]], hosts: Sequence[H]) -> list[HostResult[T]]:
    """Run ``operation`` on every host concurrently; errors become per-host results, not raises."""

    async def one(host: H) -> HostResult[T]:
        try:
            return HostResult(host.name, value=await operation(host))
        except GcptuiError as err:
            return HostResult(host.name, error=err)

    return list(await asyncio.gather(*(one(host) for host in hosts)))
