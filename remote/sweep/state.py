"""A sweep's state on the laptop: one JSON file, replaced atomically on every change.

``~/.local/state/gcptui/sweeps/NAME/state.json`` (platformdirs' user state dir; ``GCPTUI_SWEEPS_DIR``
overrides the ``sweeps`` folder). The state holds the spec it was made from, so ``sweep status``,
``report`` and ``extend`` need only the name, and ``sweep run`` resumes from it after an interrupt.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from gcptui.remote.errors import ConfigError, GcptuiError
from gcptui.remote.sweep.spec import NAME_PATTERN, ParamValue, SweepSpec
from gcptui.remote.sweep.trials import TrialPlan, params_json, render

SWEEPS_ENV = "GCPTUI_SWEEPS_DIR"
TrialState = Literal["queued", "starting", "running", "finished", "failed", "pruned"]
ACTIVE: tuple[TrialState, ...] = ("starting", "running")


class Trial(BaseModel):
    """One trial's record. ``starting`` is written before the start command is sent, so an interrupt
    between the two is settled from the VM's own job state (its command names the trial's run dir)."""

    model_config = ConfigDict(extra="ignore")

    index: int
    id: str
    params: dict[str, ParamValue]
    run_dir: str
    command: str
    resume: str
    state: TrialState = "queued"
    vm: str | None = None
    slot: int = 0  # the job slot on its VM (0: ~/.gcptui/job; N: ~/.gcptui/job-N)
    job: str | None = (
        None  # on = "vertex" | "gke": its current attempt's job (resource name); vm: its short name
    )
    devices: str | None = None  # CUDA_VISIBLE_DEVICES given to it; None: not pinned (no GPUs)
    attempts: int = 0
    failures: int = 0
    exit_code: int | None = None
    log_tail: list[str] = []
    metric: float | None = None  # the last value of the sweep's metric the trial logged
    best_metric: float | None = None
    curve: list[tuple[int, float]] = []  # (step, metric) of every line that carried the metric
    step: int | None = None
    pruned_at_step: int | None = None  # stopped early by the sweep's pruner at this step
    total_steps: int | None = None
    preempted: bool = False  # its VM went away under it at least once
    recovering: bool = False  # preempted, and its job not seen running again since
    started_at: float | None = None
    ended_at: float | None = None

    @property
    def params_json(self) -> str:
        return params_json(self.params)

    @property
    def duration(self) -> float | None:
        if self.started_at is None:
            return None
        return (self.ended_at or time.time()) - self.started_at


class SweepState(BaseModel):
    """The whole sweep: its spec, every trial, and the VMs already shut down."""

    model_config = ConfigDict(extra="ignore")

    name: str
    spec: SweepSpec
    created_at: float
    trials: list[Trial]
    vms_done: list[str] = []  # stopped or deleted by the sweep at its end
    finished_at: float | None = None
    updated_at: float = 0.0  # when it was saved last: of the laptop's and the bucket's, the newer wins

    @field_validator("name")
    @classmethod
    def _name_is_a_file_name(cls, value: str) -> str:
        # It names the sweep's folder (save_state): never a path of its own.
        if not re.fullmatch(NAME_PATTERN, value):
            raise ValueError(f"{value[:80]!r} is not a sweep name (it names a folder)")
        return value

    def counts(self) -> dict[str, int]:
        """Trials per state, every state present."""
        out = {state: 0 for state in ("queued", "starting", "running", "finished", "failed", "pruned")}
        for trial in self.trials:
            out[trial.state] += 1
        return out

    def leader(self) -> Trial | None:
        """The finished trial with the best metric (``goal``), None before any has one."""
        done = [t for t in self.trials if t.state == "finished" and t.metric is not None]
        if not done:
            return None
        pick = min if self.spec.goal == "min" else max
        return pick(done, key=lambda t: t.metric)  # type: ignore[arg-type,return-value]

    def on_vm(self, vm: str) -> list[Trial]:
        return [t for t in self.trials if t.vm == vm and t.state in ACTIVE]

    def add(self, plans: list[TrialPlan]) -> list[Trial]:
        """Queue new trials from plans (commands rendered now, so a later edit cannot change them)."""
        added = [new_trial(self.spec, plan) for plan in plans]
        self.trials.extend(added)
        self.finished_at = None
        # New trials need the VMs again: one the sweep stopped (or deleted) at its end would otherwise
        # never count as usable, and `sweep run` would refuse with every VM RUNNING.
        self.vms_done = []
        return added

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def new_trial(spec: SweepSpec, plan: TrialPlan) -> Trial:
    run_dir = f"{spec.run_root.rstrip('/')}/{spec.name}/{plan.id}"
    return Trial(
        index=plan.index,
        id=plan.id,
        params=plan.params,
        run_dir=run_dir,
        command=render(spec.command, plan.params, run_dir),
        resume=render(spec.resume_template, plan.params, run_dir),
    )


def sweeps_dir() -> Path:
    override = os.environ.get(SWEEPS_ENV)
    return Path(override).expanduser() if override else platformdirs.user_state_path("gcptui") / "sweeps"


def check_name(name: str) -> str:
    """``name`` when it can name a sweep's folder; ``ConfigError`` (one line) when it cannot."""
    if not re.fullmatch(NAME_PATTERN, name):
        raise ConfigError(
            f"{name[:80]!r} is not a sweep name: letters, digits, '_', '.' or '-' (it names a folder)"
        )
    return name


def sweep_dir(name: str) -> Path:
    """The folder of sweep ``name``: always one directly inside ``sweeps_dir()``."""
    return sweeps_dir() / check_name(name)


def state_path(name: str) -> Path:
    return sweep_dir(name) / "state.json"


@contextlib.contextmanager
def run_lock(name: str) -> Iterator[None]:
    """Held while ``gcptui sweep run`` schedules sweep ``name`` on this machine: a second scheduler
    of the same sweep would start every trial twice and overwrite the first one's state.

    An flock on ``run.lock`` in the sweep's directory: the kernel drops it when the holder exits,
    however it exits, so it never goes stale. Raises GcptuiError (one line) when another holds it.
    """
    directory = sweep_dir(name)
    made = not directory.exists()
    path = directory / "run.lock"
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            raise GcptuiError(
                f"sweep {name} is already being run here"
                + (f" (pid {holder})" if holder.isdigit() else "")
                + f": stop that one (Ctrl-C) first, or watch it with `gcptui sweep status {name}`"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # and with it the lock
        if made and not (directory / "state.json").exists():
            # Nothing ran (a mistyped name, a refusal before the first save): leave no empty sweep
            # behind. Only the process that made the directory removes it, and only while it has no
            # state, which any scheduler of it writes first.
            with contextlib.suppress(OSError):
                path.unlink()
                directory.rmdir()


def newest_sweep() -> str | None:
    """The name of the sweep whose state changed last (None when there is none)."""
    try:
        found = [(p.stat().st_mtime, p.parent.name) for p in sweeps_dir().glob("*/state.json")]
    except OSError:
        return None
    return max(found)[1] if found else None


def load_state(name: str) -> SweepState | None:
    """The saved state of sweep ``name``, None when there is none."""
    path = state_path(name)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return parse_state(text, str(path))


def parse_state(text: str, where: str) -> SweepState:
    """A state from its JSON text; ``where`` names it in the one-line error."""
    try:
        return SweepState.model_validate(json.loads(text))
    except (ValueError, ValidationError) as err:
        raise ConfigError(
            f"{where}: not a readable sweep state ({str(err).splitlines()[0]}): move it away"
        ) from None


def require_state(name: str) -> SweepState:
    state = load_state(name)
    if state is None:
        raise ConfigError(
            f"no sweep named {name!r} under {sweeps_dir()}: start it with `gcptui sweep run FILE`"
        )
    return state


def save_state(state: SweepState) -> Path:
    """Write the state atomically: a temporary file in the same folder, flushed, then renamed."""
    path = state_path(state.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    state.updated_at = time.time()
    data = json.dumps(state.to_json(), indent=1).encode()
    fd, tmp = tempfile.mkstemp(prefix=".state.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
