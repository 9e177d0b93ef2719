"""The job supervisor's protocol: where it keeps its state on the VM, how it is invoked, what it says.

``remote/vm/gcptui-job.sh`` is the VM side; this module is everything the laptop needs to talk to
it, shared by the runner (start, restart, kill, status) and the watch stream.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Final, Literal

from gcptui.remote.config import JobConfig
from gcptui.remote.config.work import ENV_NAME_PATTERN
from gcptui.remote.dest_path import in_dest
from gcptui.remote.safe_text import sanitize, vm_field
from gcptui.remote.vm import vm_file

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

GROUP_STOP: Final = "group-stop"  # `kill`'s BY (and then status's detail): keep-alive's kill for a lost node
ALREADY_RUNNING = 3  # exit codes of gcptui-job.sh
NOT_INSTALLED = 97


def log_path(slot: int = 0) -> str:
    """The output log of job slot ``slot`` (0: the VM's one job), relative to the remote home."""
    return LOG_FILE if slot == 0 else f"{slot_dir(slot)}/output.log"


def slot_dir(slot: int) -> str:
    """The state directory of job slot ``slot`` (0: the VM's one job; N >= 1: ``job-N`` beside it)."""
    return JOB_DIR if slot == 0 else f"{JOB_DIR}-{slot}"


def metrics_path(job: JobConfig, dest: str) -> str:
    """Where the job writes its progress lines: ``[job].env.GCPTUI_METRICS`` (relative to ``dest``)
    when set, else ``~/.gcptui/job/metrics.jsonl``. Relative results are relative to the remote home."""
    override = job.env.get("GCPTUI_METRICS")
    if not override:
        return METRICS_FILE
    return in_dest(dest, override)


@dataclass(frozen=True, slots=True)
class JobStatus:
    """The job on one host, as the VM's state directory tells it.

    ``detail`` is ``vanished`` (gone without an exit code: rebooted, killed from outside) or
    ``preempted`` (the VM's notice watcher saw GCE's preemption notice and sent the job SIGTERM;
    ``preempted_at`` says when, in UTC), for an exited one ``terminated`` (the supervisor itself got
    SIGTERM, not from ``kill``: the VM shutting down, mostly) or, for a killed job, ``group-stop`` (keep-alive stopped it
    because another node of its group was lost); ``phase`` is ``setup`` or ``command`` while it runs.
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
        """The ``job status --json`` object of docs/REFERENCE.md (plus pgid, ended_at, phase, detail)."""
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


@cache
def supervisor_script() -> tuple[bytes, str]:
    """The VM-side script and the versioned file name it is installed under."""
    data = vm_file("gcptui-job.sh")
    return data, f"gcptui-job-{hashlib.sha256(data).hexdigest()[:12]}.sh"


def env_file(env: Mapping[str, str]) -> str:
    """``[job].env`` as the shell file the supervisor sources: one quoted ``export`` per variable.

    Names go in unquoted (a shell cannot quote them): anything but a variable name is refused, since
    it would run as a command on the VM or end the supervisor that sources the file.
    """
    for name in env:
        if not re.fullmatch(ENV_NAME_PATTERN, name):
            raise ValueError(f"{name!r} is not a valid environment variable name")
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in env.items())


def supervisor_command(
    op: str,
    args: Sequence[str],
    *,
    install: bool,
    remote_home: str | None = None,
    env_end: str | None = None,
    slot: int = 0,
) -> str:
    """The remote command line that runs ``gcptui-job.sh op args``.

    With ``env_end`` the job's environment comes first on stdin (``env_file(...)``, then the line
    ``env_end``): it lands in a 0600 file the supervisor reads, never in argv where ``ps`` shows it.
    With ``install`` the script follows on stdin (send ``supervisor_script()[0]``, then EOF) and is
    installed first; without, the command exits 97 when it is not installed. ``remote_home``
    replaces ``$HOME`` on the VM; ``slot`` N >= 1 acts on the job in ``~/.gcptui/job-N`` (a sweep's
    second, third, ... trial on the VM) instead of ``~/.gcptui/job``. Everything it creates under ``~/.gcptui`` is private (umask 077).
    """
    _, file_name = supervisor_script()
    home = f"HOME={shlex.quote(remote_home)}; export HOME; " if remote_home else ""
    script = f'umask 077; {home}S="$HOME/{BIN_DIR}/{file_name}"; '
    if slot:
        script += f"GCPTUI_JOB_SLOT={int(slot)}; export GCPTUI_JOB_SLOT; "
    if env_end is not None:
        # ``read`` takes stdin a line at a time, so the script's bytes stay for ``cat`` below.
        script += (
            f'mkdir -p "$HOME/{JOB_DIR}" && E="$HOME/{JOB_DIR}/.env.$$" && : > "$E" || exit 98; '
            f'while IFS= read -r l && [ "$l" != {shlex.quote(env_end)} ]; do printf "%s\\n" "$l" >> "$E"; done; '
            'GCPTUI_ENV_IN="$E"; export GCPTUI_ENV_IN; '
        )
    if install:
        # Written under a temporary name and renamed: a concurrent client never runs half a file.
        script += f'mkdir -p "$HOME/{BIN_DIR}" && cat > "$S.$$" && mv -f "$S.$$" "$S" || exit 98; '
    else:
        script += f'[ -f "$S" ] || exit {NOT_INSTALLED}; '
    script += 'exec sh "$S" "$@"'
    # The login shell only sees quoted words; the sh we name does the work (any login shell works).
    return shlex.join(["sh", "-c", script, "gcptui-job", op, *args])


MAX_STATUS_CHARS = 262_144  # the state files are a few lines; the command at most a long script
MAX_FIELD = 200


def parse_status(name: str, text: str) -> JobStatus:
    """Parse the supervisor's ``key=value`` lines, then ``command:`` and the raw command.

    Every file of the job's state directory is the VM's: the text is bounded, sanitized here (it
    reaches the terminal from `job status`, `sweep run` and the TUI) and numbers range-checked."""
    text = text[:MAX_STATUS_CHARS]
    head, sep, command = text.partition("\ncommand:\n")
    if not sep and text.startswith("command:\n"):
        head, command = "", text.removeprefix("command:\n")
    fields = {
        key: vm_field(value, MAX_FIELD)
        for key, value in (line.split("=", 1) for line in head.splitlines() if "=" in line)
    }
    state = fields.get("state", "none")
    if state not in ("running", "exited", "killed", "none"):
        state = "none"

    def number(key: str) -> int | None:
        value = fields.get(key, "").strip()
        digits = value.removeprefix("-")
        return int(value) if digits.isdigit() and digits.isascii() and len(digits) <= 18 else None

    return JobStatus(
        name=name,
        state=state,  # type: ignore[arg-type]
        pid=number("pid"),
        pgid=number("pgid"),
        exit_code=number("exit_code"),
        started_at=fields.get("started_at") or None,
        ended_at=fields.get("ended_at") or None,
        command=sanitize(command.removesuffix("\n"), colours=False) if sep or command else None,
        phase=fields.get("phase") or None,
        detail=fields.get("detail") or None,
        preempted_at=fields.get("preempted_at") or None,
    )
