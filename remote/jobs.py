"""Start, restart, kill and inspect the training job on a VM, detached from SSH.

The VM side is ``remote/vm_side/gcptui-job.sh``, a POSIX sh supervisor installed on first use under
``~/.gcptui/bin/``. It leads the job's process group (setsid), runs ``[job].setup`` once per disk and
then ``[job].command`` in ``[sync].dest``, appends output to ``~/.gcptui/job/output.log`` and records
pid, pgid, times, exit code and how it ended in ``~/.gcptui/job/``: every client reads the same truth.
Each operation is one SSH exec round trip; the user's command travels as one ``shlex.quote``d
argument and runs as ``sh -c COMMAND``, exactly as typed.
"""

from __future__ import annotations

import asyncio
import hashlib
import posixpath
import shlex
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import asyncssh

from remote.config import Config, JobConfig
from remote.errors import ConfigError, GcptuiError
from remote.ssh_errors import SshError, SshUnreachableError
from remote.ssh_pool import SshPool
from remote.ssh_target import SshTarget

if TYPE_CHECKING:
    from remote.job_watch import JobEvent

# ---- the VM-side layout (paths relative to the remote home, as SFTP and a login shell see them) ----
GCPTUI_DIR = ".gcptui"
JOB_DIR = f"{GCPTUI_DIR}/job"
LOG_FILE = f"{JOB_DIR}/output.log"  # stdout+stderr of every start, appended, a banner line per start
METRICS_FILE = f"{JOB_DIR}/metrics.jsonl"  # default $GCPTUI_METRICS (exported as an absolute path)
PREEMPTED_FILE = f"{JOB_DIR}/preempted"  # UTC time of the metadata server's preemption notice
SETUP_MARKER = f"{GCPTUI_DIR}/setup.done"  # written once [job].setup succeeded on this disk
BIN_DIR = f"{GCPTUI_DIR}/bin"
STATE_FILES = ("pid", "pgid", "command", "started_at", "ended_at", "exit_code", "state", "phase")

JobState = Literal["running", "exited", "killed", "none"]
JobAction = Literal["start", "restart", "kill", "status"]
T = TypeVar("T")

_ALREADY_RUNNING = 3  # exit codes of gcptui-job.sh
_NOT_INSTALLED = 97


def log_path() -> str:
    """The job's output log, relative to the remote home."""
    return LOG_FILE


def metrics_path(job: JobConfig, dest: str) -> str:
    """Where the job writes its progress lines: ``[job].env.GCPTUI_METRICS`` (relative to ``dest``)
    when set, else ``~/.gcptui/job/metrics.jsonl``. Relative results are relative to the remote home."""
    override = job.env.get("GCPTUI_METRICS")
    if not override:
        return METRICS_FILE
    if override.startswith("/"):
        return override
    base = dest.removeprefix("~/") if dest.startswith("~/") else dest
    return posixpath.normpath(posixpath.join(base, override))


class JobError(GcptuiError):
    """A job operation failed on the VM (no project directory, no setsid, a stuck lock, ...)."""


class JobAlreadyRunningError(JobError):
    """``start`` refused: a job runs already; ``status`` is what runs."""

    def __init__(self, message: str, status: JobStatus) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class JobStatus:
    """The job on one host, as the VM's state directory tells it.

    ``detail`` is ``vanished`` (gone without an exit code: rebooted, killed from outside) or
    ``preempted`` (the VM's notice watcher saw GCE's preemption notice and sent the job SIGTERM;
    ``preempted_at`` says when, in UTC); ``phase`` is ``setup`` or ``command`` while it runs.
    """

    name: str
    state: JobState
    pid: int | None = None
    pgid: int | None = None
    exit_code: int | None = None
    started_at: str | None = None
    ended_at: str | None = None
    command: str | None = None
    phase: str | None = None
    detail: str | None = None
    preempted_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``job status --json`` object of DESIGN.md (plus pgid, ended_at, phase, detail)."""
        return {
            "name": self.name,
            "state": self.state,
            "pid": self.pid,
            "exit_code": self.exit_code,
            "started_at": self.started_at,
            "command": self.command,
            "pgid": self.pgid,
            "ended_at": self.ended_at,
            "phase": self.phase,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class HostResult(Generic[T]):
    """One host's outcome of a fleet-wide operation: ``value`` or the ``error`` to print."""

    name: str
    value: T | None = None
    error: GcptuiError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@cache
def supervisor_script() -> tuple[bytes, str]:
    """The VM-side script and the versioned file name it is installed under."""
    data = (resources.files("remote") / "vm_side" / "gcptui-job.sh").read_bytes()
    return data, f"gcptui-job-{hashlib.sha256(data).hexdigest()[:12]}.sh"


def supervisor_command(op: str, args: Sequence[str], *, install: bool, remote_home: str | None = None) -> str:
    """The remote command line that runs ``gcptui-job.sh op args``.

    With ``install`` the script is read from stdin (send ``supervisor_script()[0]``, then EOF) and
    installed first; without, the command exits 97 when it is not installed. ``remote_home``
    replaces ``$HOME`` on the VM.
    """
    _, file_name = supervisor_script()
    home = f"HOME={shlex.quote(remote_home)}; export HOME; " if remote_home else ""
    script = f'{home}S="$HOME/{BIN_DIR}/{file_name}"; '
    if install:
        # Written under a temporary name and renamed: a concurrent client never runs half a file.
        script += f'mkdir -p "$HOME/{BIN_DIR}" && cat > "$S.$$" && mv -f "$S.$$" "$S" || exit 98; '
    else:
        script += f'[ -f "$S" ] || exit {_NOT_INSTALLED}; '
    script += 'exec sh "$S" "$@"'
    # The login shell only sees quoted words; the sh we name does the work (any login shell works).
    return shlex.join(["sh", "-c", script, "gcptui-job", op, *args])


def parse_status(name: str, text: str) -> JobStatus:
    """Parse the supervisor's ``key=value`` lines, then ``command:`` and the raw command."""
    head, sep, command = text.partition("\ncommand:\n")
    if not sep and text.startswith("command:\n"):
        head, command = "", text.removeprefix("command:\n")
    fields = dict(line.split("=", 1) for line in head.splitlines() if "=" in line)
    state = fields.get("state", "none")
    if state not in ("running", "exited", "killed", "none"):
        state = "none"

    def number(key: str) -> int | None:
        value = fields.get(key, "").strip()
        return int(value) if value.lstrip("-").isdigit() else None

    return JobStatus(
        name=name,
        state=state,  # type: ignore[arg-type]
        pid=number("pid"),
        pgid=number("pgid"),
        exit_code=number("exit_code"),
        started_at=fields.get("started_at") or None,
        ended_at=fields.get("ended_at") or None,
        command=command.removesuffix("\n") if sep or command else None,
        phase=fields.get("phase") or None,
        detail=fields.get("detail") or None,
        preempted_at=fields.get("preempted_at") or None,
    )


class JobRunner:
    """Job control for the configured ``[job]`` over a shared ``SshPool``.

    ``remote_home`` replaces ``$HOME`` on the VM for our commands and the job (tests isolate runs
    with it); None uses the login's own home. Every method raises a one-line ``GcptuiError``.
    """

    def __init__(
        self,
        pool: SshPool,
        job: JobConfig,
        dest: str,
        *,
        remote_home: str | None = None,
        command_timeout: float = 60.0,
    ) -> None:
        self.pool = pool
        self.job = job
        self.dest = dest
        self.remote_home = remote_home
        self.command_timeout = command_timeout
        # Connections that have the supervisor installed: send the script once per connection.
        self._installed: weakref.WeakSet[asyncssh.SSHClientConnection] = weakref.WeakSet()

    @classmethod
    def from_config(cls, pool: SshPool, config: Config) -> JobRunner:
        """A runner for ``config.job`` running in ``config.sync.dest``."""
        return cls(pool, config.job, config.sync.dest)

    # ---- one host ---------------------------------------------------------------------------

    async def status(self, target: SshTarget) -> JobStatus:
        """The job's state on ``target`` (``none`` where nothing ever ran)."""
        return (await self._call(target, "status", []))[1]

    async def start(self, target: SshTarget) -> JobStatus:
        """Run setup (once per disk) and ``[job].command``; refuses while a job runs."""
        return await self._launch(target, "start", self._require(self.job.command, "command"))

    async def restart(self, target: SshTarget) -> JobStatus:
        """Kill the job if it runs, then start ``[job].resume`` (default: ``[job].command``)."""
        return await self._launch(target, "restart", self._require(self.job.resume_command, "command"))

    async def kill(self, target: SshTarget) -> JobStatus:
        """SIGTERM the job's process group, SIGKILL after ``stop_grace_seconds``; nothing else."""
        return (await self._call(target, "kill", [self._grace_tenths()], self._kill_timeout()))[1]

    def watch(self, target: SshTarget, **options: Any) -> AsyncIterator[JobEvent]:
        """``watch_job`` on ``target`` through this runner's pool and remote home (see job_watch)."""
        from remote.job_watch import watch_job  # job_watch builds on this module

        return watch_job(self.pool.getter(target), target.name, remote_home=self.remote_home, **options)

    # ---- many hosts at once -----------------------------------------------------------------

    async def run_all(self, action: JobAction, targets: Sequence[SshTarget]) -> list[HostResult[JobStatus]]:
        """``action`` on every target concurrently; one ``HostResult`` per target, in order."""
        operation: Callable[[SshTarget], Awaitable[JobStatus]] = getattr(self, action)
        return await gather_hosts(operation, targets)

    # ---- internals --------------------------------------------------------------------------

    @staticmethod
    def _require(command: str, key: str) -> str:
        if not command.strip():
            raise ConfigError(f"[job].{key} is empty: set the training command in gcptui.toml")
        return command

    def _grace_tenths(self) -> str:
        return str(max(0, round(self.job.stop_grace_seconds * 10)))

    def _kill_timeout(self) -> float:
        return self.command_timeout + self.job.stop_grace_seconds + 10.0

    async def _launch(self, target: SshTarget, op: str, command: str) -> JobStatus:
        args = [self.dest, command, self.job.setup, *(f"{k}={v}" for k, v in self.job.env.items())]
        if op == "restart":
            args.insert(0, self._grace_tenths())
        rc, status, output = await self._call(
            target, op, args, self._kill_timeout(), allowed=(_ALREADY_RUNNING,)
        )
        if rc == _ALREADY_RUNNING:
            raise JobAlreadyRunningError(
                f"a job is already running on {target.name} (pid {status.pid}, started {status.started_at}): "
                f"use `gcptui job restart {target.name}` or `gcptui job kill {target.name}`",
                status,
            )
        return status

    def _remote_command(self, op: str, args: list[str], install: bool) -> str:
        return supervisor_command(op, args, install=install, remote_home=self.remote_home)

    async def _call(
        self,
        target: SshTarget,
        op: str,
        args: list[str],
        timeout: float | None = None,
        allowed: tuple[int, ...] = (),
    ) -> tuple[int, JobStatus, str]:
        """Run ``gcptui-job.sh op args`` on ``target``; returns exit code, parsed status, raw output."""
        timeout = timeout or self.command_timeout
        for attempt in range(3):
            conn = await self.pool.connection(target)
            install = conn not in self._installed
            command = self._remote_command(op, args, install)
            try:
                result = await conn.run(
                    command, input=supervisor_script()[0].decode() if install else None, timeout=timeout
                )
            except asyncssh.ChannelOpenError:
                # The session never opened (a connection that just died): nothing ran, so try again.
                if attempt == 2:
                    raise SshUnreachableError(
                        target.name, f"{target.name}: SSH connection lost: try again"
                    ) from None
                continue
            except asyncssh.TimeoutError:
                raise JobError(
                    f"{target.name}: `job {op}` got no answer within {timeout:g}s: "
                    f"check `gcptui job status {target.name}`"
                ) from None
            except (asyncssh.Error, OSError) as err:
                raise SshUnreachableError(
                    target.name,
                    f"{target.name}: SSH connection lost during `job {op}` ({err}): "
                    f"check `gcptui job status {target.name}`",
                ) from None
            rc = result.exit_status
            if rc == _NOT_INSTALLED:
                self._installed.discard(conn)  # someone removed ~/.gcptui: install again
                continue
            self._installed.add(conn)
            output = str(result.stdout or "")
            if rc == 0 or (rc is not None and rc in allowed):
                return rc, parse_status(target.name, output), output
            raise JobError(_failure(target, op, rc, output, str(result.stderr or "")))
        raise JobError(f"{target.name}: could not install the job supervisor under ~/{BIN_DIR}")


def _failure(target: SshTarget, op: str, rc: int | None, output: str, stderr: str) -> str:
    """One line for a failed supervisor call: its own ``error=`` line, else the tail of stderr."""
    for line in output.splitlines():
        if line.startswith("error="):
            reason = line.removeprefix("error=")
            if rc == 5:
                reason += f" (`gcptui sync {target.name} --once`)"
            return f"{target.name}: job {op} failed: {reason}"
    tail = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit status {rc}"
    return f"{target.name}: job {op} failed on the VM: {tail}"


async def gather_hosts(
    operation: Callable[[SshTarget], Awaitable[T]], targets: Sequence[SshTarget]
) -> list[HostResult[T]]:
    """Run ``operation`` on every target concurrently; errors become per-host results, not raises."""

    async def one(target: SshTarget) -> HostResult[T]:
        try:
            return HostResult(target.name, value=await operation(target))
        except GcptuiError as err:
            return HostResult(target.name, error=err)

    return list(await asyncio.gather(*(one(target) for target in targets)))


__all__ = [
    "JOB_DIR", "LOG_FILE", "METRICS_FILE", "PREEMPTED_FILE", "SETUP_MARKER", "HostResult", "JobAction",
    "JobAlreadyRunningError", "JobError", "JobRunner", "JobState", "JobStatus", "SshError", "gather_hosts",
    "log_path", "metrics_path", "parse_status", "supervisor_command", "supervisor_script",
]  # fmt: skip
