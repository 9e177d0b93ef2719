"""What the sweep reads and runs on a VM: each trial's job, its metrics file and its log tail.

Each trial runs through the ordinary job supervisor in a *slot* of its VM: slot 0 is the VM's one
job (``~/.gcptui/job``), slots 1, 2, ... keep further trials beside it (``~/.gcptui/job-N``) when the
sweep runs several trials per VM. ``TrialJobRunner`` gives each (VM, slot) its trial's command,
resume command and environment, so ``job restart`` and keep-alive's relaunch (which call
``restart``) continue the trial, not the ``[job]`` of ``gcptui.toml``. The slot an operation acts
on is a context variable (``in_slot``): each asyncio task (one per trial) sees its own.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gcptui.remote.compute.exec_channel import Reach
from gcptui.remote.config import Config, JobConfig
from gcptui.remote.dest_path import in_dest
from gcptui.remote.jobs.protocol import slot_dir, supervisor_command
from gcptui.remote.jobs.runner import JobRunner
from gcptui.remote.safe_text import clip, sanitize
from gcptui.remote.ssh.capped import exec_capped
from gcptui.remote.sweep.spec import SweepSpec
from gcptui.remote.sweep.state import Trial
from gcptui.remote.telemetry.progress import json_records

TRIAL_ENV = "GCPTUI_TRIAL"
PARAMS_ENV = "GCPTUI_PARAMS"
CHECKPOINT_URL_ENV = "GCPTUI_CHECKPOINT_URL"
LOG_TAIL_LINES = 30
BANNER = "==== gcptui: "

_slot: contextvars.ContextVar[int] = contextvars.ContextVar("sweep_job_slot", default=0)


@contextlib.contextmanager
def in_slot(slot: int) -> Iterator[None]:
    """Job operations inside act on job slot ``slot`` of their VM (in this task only)."""
    token = _slot.set(slot)
    try:
        yield
    finally:
        _slot.reset(token)


def current_slot() -> int:
    return _slot.get()


def pinned_devices(slot: int, slots: int, gpus: int) -> str | None:
    """``CUDA_VISIBLE_DEVICES`` for job slot ``slot`` of ``slots`` on a VM with ``gpus`` GPUs: an
    equal share of the GPUs per slot (GPU ``slot % gpus`` when there are more slots than GPUs);
    None without GPUs (nothing to pin)."""
    if gpus <= 0:
        return None
    share = max(1, gpus // max(1, slots))
    first = (slot * share) % gpus
    return ",".join(str(first + k) for k in range(share))


# Lines of the trial's metrics file that name the metric, then its last line. $1 relative to $HOME.
# Every line is cut to MAX_LINE bytes on the VM (a longer one is no record: its JSON no longer
# parses) and the laptop reads at most MAX_OUTPUT bytes whatever the VM sends (exec_capped).
MAX_LINE = 65_536
MAX_OUTPUT = 16 << 20
_METRICS = (
    'f=$1; case $f in /*) ;; *) f="$HOME/$f" ;; esac; [ -f "$f" ] || exit 0; '
    f'{{ grep -F -e "\\"$2\\"" "$f" | tail -n 5000; echo ---; tail -n 1 "$f"; }} | cut -b 1-{MAX_LINE}'
)
_TAIL = f'f="$HOME/$1"; [ -f "$f" ] && tail -n "$2" "$f" | cut -b 1-{MAX_LINE}; exit 0'


def trial_job(
    base: JobConfig, spec: SweepSpec, trial: Trial, dest: str, checkpoint_url: str | None = None
) -> JobConfig:
    """The job that runs ``trial``: its commands, ``[job]``'s setup and env plus the trial's own.

    A retried trial starts with its resume command, so it continues from its checkpoint. A trial
    given GPUs (``trial.devices``) sees only those, through ``CUDA_VISIBLE_DEVICES``.
    ``checkpoint_url`` (the VM's ``GCPTUI_CHECKPOINT_URL``) gets the sweep's name appended: the
    trainer mirrors to ``<url>/<run directory name>``, the trial id, which every sweep reuses, so
    without it a later sweep's trial would resume from an earlier sweep's checkpoints.
    """
    env = {
        **({CHECKPOINT_URL_ENV: f"{checkpoint_url}/{spec.name}"} if checkpoint_url else {}),
        **base.env,
        **spec.env,
        TRIAL_ENV: trial.id,
        PARAMS_ENV: trial.params_json,
        "GCPTUI_METRICS": f"{trial.run_dir}/metrics.jsonl",
    }
    if trial.devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = trial.devices
    command = trial.resume if trial.failures else trial.command
    return JobConfig(
        setup=base.setup,
        command=command,
        resume=trial.resume,
        env=env,
        stop_grace_seconds=base.stop_grace_seconds,
    )


class TrialJobRunner(JobRunner):
    """A ``JobRunner`` whose job in each (VM, slot) is the trial running there (``[job]`` elsewhere).

    Every operation acts on the slot of ``in_slot`` (0 outside one)."""

    def __init__(self, config: Config, *, remote_home: str | None = None) -> None:
        super().__init__(config.job, config.sync.dest, remote_home=remote_home, storage=config.storage)
        self.trial_jobs: dict[tuple[str, int], JobConfig] = {}

    def job_for(self, name: str) -> JobConfig:
        return self.trial_jobs.get((name, current_slot()), self.job)

    def slots_of(self, vm: str) -> list[int]:
        """The slots of ``vm`` that hold a trial, in order."""
        return sorted(slot for name, slot in self.trial_jobs if name == vm)

    def _remote_command(self, op: str, args: list[str], install: bool, env_end: str | None = None) -> str:
        return supervisor_command(
            op, args, install=install, remote_home=self.remote_home, env_end=env_end, slot=current_slot()
        )


@dataclass(frozen=True, slots=True)
class TrialMetrics:
    """What a trial's metrics file says: the metric's curve, its last and best values, the last step."""

    curve: list[tuple[int, float]]
    last: float | None
    best: float | None
    step: int | None
    total_steps: int | None


def parse_metrics(text: str, metric: str, goal: str) -> TrialMetrics:
    """Parse the output of the metrics script: lines naming ``metric``, ``---``, the last line."""
    head, _, last_line = text.partition("\n---\n")
    last_records = json_records(last_line.splitlines())
    return metrics_of(
        json_records(head.splitlines()), last_records[-1] if last_records else None, metric, goal
    )


def metrics_of(
    records: list[dict[str, Any]], last_record: dict[str, Any] | None, metric: str, goal: str
) -> TrialMetrics:
    """A trial's metrics from its progress records (``records``: those naming ``metric``, in order;
    ``last_record``: its newest record of any kind, for the step)."""
    curve: list[tuple[int, float]] = []
    last: float | None = None
    for record in records:
        if metric not in record:
            continue
        value = record[metric]
        step = record.get("step")
        # NaN, an infinity or null (the reference trainer's word for those) is a run that diverged:
        # the trial ends unscored (last None) instead of leading the sweep with NaN, or with the
        # value it had before it diverged; only numbers go into the curve and the best.
        last = None
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            last = float(value)
            curve.append((step if isinstance(step, int) else len(curve), last))
    step = total = None
    if last_record is not None:
        raw_step, raw_total = last_record.get("step"), last_record.get("total_steps")
        step = raw_step if isinstance(raw_step, int) else None
        total = raw_total if isinstance(raw_total, int) else None
    values = [v for _, v in curve]
    best = (min(values) if goal == "min" else max(values)) if values else None
    return TrialMetrics(curve, last, best, step, total)


def log_tail(text: str) -> list[str]:
    """The last lines of the job log that the latest start wrote (after its start banner)."""
    lines = text.splitlines()
    for k in range(len(lines) - 1, -1, -1):
        if lines[k].startswith(BANNER) and "job started" in lines[k]:
            lines = lines[k + 1 :]
            break
    kept = [line for line in lines if not line.startswith(BANNER)][-LOG_TAIL_LINES:]
    # The job's own output: kept in the state, shown by `sweep status` and the sweep screen.
    return [clip(sanitize(line, colours=False), 500) for line in kept]


class VmReader:
    """Reads a trial's metrics and the job log over the machine's exec channel (one exec each)."""

    def __init__(self, runner: JobRunner) -> None:
        self.runner = runner

    def _home(self) -> str:
        home = self.runner.remote_home
        return f"HOME={shlex.quote(home)}; export HOME; " if home else ""

    def _in_dest(self, relative: str) -> str:
        # An absolute run_root (a data disk) is where the trial writes; a relative one is below dest.
        return in_dest(self.runner.dest, relative)

    async def metrics(self, reach: Reach, trial: Trial, metric: str, goal: str) -> TrialMetrics:
        script = self._home() + _METRICS
        path = self._in_dest(f"{trial.run_dir}/metrics.jsonl")
        command = shlex.join(["sh", "-c", script, "metrics", path, metric])
        result = await exec_capped(reach.channel, command, max_bytes=MAX_OUTPUT, timeout=60)
        return parse_metrics(result.stdout, metric, goal)

    async def log_tail(self, reach: Reach) -> list[str]:
        script = self._home() + _TAIL
        log = f"{slot_dir(current_slot())}/output.log"
        command = shlex.join(["sh", "-c", script, "tail", log, "400"])
        result = await exec_capped(reach.channel, command, max_bytes=MAX_OUTPUT, timeout=60)
        return log_tail(result.stdout)
