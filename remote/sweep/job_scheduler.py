"""Run a sweep's trials as jobs of an engine that queues them itself (``on = "vertex" | "gke"``).

The same level-triggered loop as the VMs' scheduler (scheduler.py), with the same state, study and
pruning: every ``poll_seconds`` each active trial's job is read (its phase and its new output lines,
whose progress records are the trial's metrics), then free slots (``slots``) are filled from the
queue or the study. A trial is saved ``starting`` before its job is submitted, and the job carries
the trial's id and attempt as labels: a run interrupted in between finds the job by them on the next
run (or queues the trial again when none was made), so no trial runs twice and none is lost.

Pruning is the engine's stop (a Vertex AI cancel, a Kubernetes Job delete), sent in the poll that
decided it, with the step saved before it. A preempted Spot worker is the engine's to restart (Vertex
restarts it, Kubernetes reschedules the Job's pod) with the trial's resume command.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from gcptui.remote.errors import GcptuiError
from gcptui.remote.safe_text import clip, sanitize
from gcptui.remote.services import Services
from gcptui.remote.sweep.engines import ENDED_PHASES, JobView, TrialEngine
from gcptui.remote.sweep.scheduler_base import PROGRESS_SAVE_SECONDS, SchedulerBase, SweepError
from gcptui.remote.sweep.state import ACTIVE, SweepState, Trial
from gcptui.remote.sweep.study import SweepStudy
from gcptui.remote.sweep.vmside import LOG_TAIL_LINES, metrics_of
from gcptui.remote.telemetry.progress import json_object

MAX_RECORDS = 20_000  # a trial's progress records kept in memory (its curve; the newest win)


class _Seen:
    """What the trial's job printed so far: the records naming the metric, the last record, the tail."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.last: dict[str, Any] | None = None
        self.tail: list[str] = []


class JobScheduler(SchedulerBase):
    """Drives one sweep to its end on ``engine``; ``run()`` returns the final state."""

    def __init__(
        self,
        services: Services,
        state: SweepState,
        engine: TrialEngine,
        *,
        say: Callable[[str], None] | None = None,
        poll_seconds: float | None = None,
        on_change: Callable[[SweepState], None] | None = None,
        study: SweepStudy | None = None,
    ) -> None:
        super().__init__(
            services, state, say=say, poll_seconds=poll_seconds, on_change=on_change, study=study
        )
        self.engine = engine
        self._seen: dict[str, _Seen] = {}

    async def run(self) -> SweepState:
        while True:
            active = [t for t in self.state.trials if t.state in ACTIVE]
            await asyncio.gather(*(self._follow(t) for t in active))
            await self._fill()
            if not any(t.state in (*ACTIVE, "queued") for t in self.state.trials) and not self._to_ask():
                break
            await asyncio.sleep(self.poll)
        self.state.finished_at = self.state.finished_at or time.time()
        self._save()
        return self.state

    # ---- starting ---------------------------------------------------------------------------

    async def _fill(self) -> None:
        busy = sum(t.state in ACTIVE for t in self.state.trials)
        free = max(0, self.spec.slots - busy)
        queued = [t for t in self.state.trials if t.state == "queued"]
        if self.study is not None and free > len(queued):
            asked = [self.study.ask(self.state) for _ in range(min(free - len(queued), self._to_ask()))]
            queued += asked
            if asked:
                self._save()
        await asyncio.gather(*(self._submit(trial) for trial in queued[:free]))

    async def _submit(self, trial: Trial) -> None:
        trial.state, trial.vm, trial.job, trial.slot, trial.devices = "starting", None, None, 0, None
        trial.attempts += 1
        self._seen.pop(trial.id, None)
        self._save()  # before the submit: an interrupt from here on finds the job by its labels
        command = trial.resume if trial.failures else trial.command
        try:
            trial.job, trial.vm = await asyncio.to_thread(self.engine.submit, trial, command)
        except GcptuiError as err:
            # The engine refused the job (quota, image, permission): every retry would repeat it.
            self._requeue(trial, f"{trial.id} could not be submitted to {self.engine.where}")
            raise SweepError(str(err)) from None
        self._save()
        self.say(f"{trial.id} submitted to {self.engine.where} as {trial.vm}: {_params_text(trial)}")

    # ---- following --------------------------------------------------------------------------

    async def _follow(self, trial: Trial) -> None:
        try:
            await self._follow_job(trial)
        except GcptuiError as err:
            self.say(f"warning: {trial.id}: {err} (trying again)")

    async def _follow_job(self, trial: Trial) -> None:
        if trial.job is None:  # interrupted between `starting` and the job's name: was it submitted?
            found = await asyncio.to_thread(self.engine.find, trial)
            if found is None:
                self._requeue(trial, f"{trial.id}: its job was never submitted: queued again")
                return
            trial.job, trial.vm = found
            self._save()
        job = trial.job
        view = await asyncio.to_thread(self.engine.view, job)
        lines = await asyncio.to_thread(self.engine.lines, job, final=view.phase in ENDED_PHASES)
        self._read(trial, lines)
        if view.preempted and not trial.preempted:
            trial.preempted = True
            self.say(f"{trial.id}: its Spot worker was preempted: {self.engine.where} restarts it (resume)")
            self._save()
        if trial.state == "starting" and view.phase != "pending":
            trial.state, trial.started_at = "running", trial.started_at or time.time()
            self._save()
        if trial.pruned_at_step is not None:
            # Decided: pruned, even when its job reached its end before the stop landed (the study
            # is told the same whatever the race, so the sampler's next points do not depend on it).
            await self._prune(trial, view, again=True)
        elif view.phase in ("pending", "running"):
            if self.study is not None and view.phase == "running" and self.study.report(trial):
                await self._prune(trial, view)
        elif view.phase == "succeeded":
            self._finish(trial)
        else:
            self._fail(trial, view)

    def _read(self, trial: Trial, lines: list[str]) -> None:
        seen = self._seen.setdefault(trial.id, _Seen())
        for line in lines:
            record = json_object(line)
            if record is None:
                seen.tail = [*seen.tail, clip(sanitize(line, colours=False), 500)][-LOG_TAIL_LINES:]
                continue
            seen.last = record
            if self.spec.metric in record:
                seen.records.append(record)
        del seen.records[:-MAX_RECORDS]
        if not lines:
            return
        found = metrics_of(seen.records, seen.last, self.spec.metric, self.spec.goal)
        changed = (found.step, found.last) != (trial.step, trial.metric)
        trial.step, trial.total_steps = found.step, found.total_steps or trial.total_steps
        trial.metric, trial.best_metric, trial.curve = found.last, found.best, found.curve
        if changed and time.monotonic() - self._saved_at >= PROGRESS_SAVE_SECONDS:
            self._save()
        elif changed and self.on_change is not None:
            self.on_change(self.state)

    def _finish(self, trial: Trial) -> None:
        trial.state, trial.exit_code, trial.ended_at = "finished", 0, time.time()
        trial.recovering = False
        self._save()
        self._tell(trial)
        self.say(f"{trial.id} finished ({trial.vm}): {self.spec.metric} {trial.metric}")

    async def _prune(self, trial: Trial, view: JobView, *, again: bool = False) -> None:
        """Stop a trial the pruner calls a loser: the step saved, then the job stopped (in this poll)."""
        if not again:
            decided = self.study.pruned_at(trial) if self.study is not None else None
            trial.pruned_at_step = (
                decided if decided is not None else (trial.curve[-1][0] if trial.curve else trial.step)
            )
            self._save()
        if view.phase not in ENDED_PHASES:
            try:
                await asyncio.to_thread(self.engine.stop, trial.job or "")
            except GcptuiError as err:
                self.say(f"warning: {trial.id}: could not stop {trial.vm} ({err}): trying again")
                return
        trial.state, trial.ended_at, trial.recovering = "pruned", time.time(), False
        self._save()
        self._tell(trial)
        self.say(
            f"{trial.id} pruned ({trial.vm}) at step {trial.pruned_at_step}: {self.spec.metric} {trial.metric}"
        )

    def _fail(self, trial: Trial, view: JobView) -> None:
        seen = self._seen.get(trial.id)
        trial.log_tail = list(seen.tail) if seen is not None else []
        trial.failures += 1
        trial.recovering = False
        trial.exit_code = None
        job = trial.vm
        why = view.detail or view.phase
        if trial.failures < self.spec.max_failures:
            trial.state, trial.job = "queued", None
            self.say(
                f"{trial.id} failed ({job}: {why}): queued again ({trial.failures}/{self.spec.max_failures})"
            )
        else:
            trial.state, trial.ended_at = "failed", time.time()
            self._tell(trial)
            self.say(f"{trial.id} failed ({job}: {why}): given up after {trial.failures} failure(s)")
        self._save()


def engine_for(services: Services, spec: Any, say: Callable[[str], None]) -> TrialEngine:
    """The engine of ``spec.on`` over ``services``' configured backends (one line when missing)."""
    if spec.on == "vertex":
        from gcptui.remote.sweep.vertex_trials import vertex_trials

        return vertex_trials(services, spec, say)
    from gcptui.remote.sweep.gke_trials import gke_trials

    return gke_trials(services, spec, say)


def _params_text(trial: Trial) -> str:
    return " ".join(f"{k}={v}" for k, v in trial.params.items())
