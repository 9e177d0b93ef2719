"""Reconciling running trials from their VMs' job records: each poll reads a busy VM's job state and
settles the trial from it (running, finished, pruned, failed and queued again, or preempted and resumed).
"""

from __future__ import annotations

import time

from gcptui.remote.compute.exec_channel import Reach
from gcptui.remote.errors import GcptuiError
from gcptui.remote.jobs.protocol import JobStatus
from gcptui.remote.keepalive.resume_rule import CUT_SHORT
from gcptui.remote.sweep.scheduler_base import PROGRESS_SAVE_SECONDS, SchedulerBase
from gcptui.remote.sweep.state import Trial
from gcptui.remote.sweep.vmside import in_slot


class Reconciler(SchedulerBase):
    """The scheduler's following half: ``_follow`` each active trial once per poll."""

    async def _follow(self, trial: Trial) -> None:
        with in_slot(trial.slot):
            await self._follow_in_slot(trial)

    async def _follow_in_slot(self, trial: Trial) -> None:
        vm = trial.vm or ""
        if not self._running(vm):
            if not trial.recovering and vm in self.instances:
                trial.preempted = trial.recovering = True
                self.say(f"{trial.id}: {vm} is {self.instances[vm].status}: waiting for it to come back")
                self._save()
            return
        reach = self._reach(vm)
        if reach is None:
            return
        try:
            status = await self.runner.status(reach)
        except GcptuiError as err:
            self.say(f"warning: {trial.id}: {err}")
            return
        if not self._is_trial(status, trial):
            if trial.state == "starting":  # the start never reached the VM: the trial is still to do
                self._requeue(trial, f"{trial.id}: its start did not reach {vm}: queued again")
            else:
                await self._fail(trial, reach, None, f"{vm} now runs another job ({status.command})")
            return
        if trial.state == "starting":
            self._mark_running(trial, status)
        if trial.pruned_at_step is not None and not (status.state == "exited" and status.exit_code == 0):
            # Pruned before an interrupt (on this laptop or another) cut the kill or its record short.
            await self._prune(trial, reach, again=True)
            return
        if status.state == "running":
            self._down_since.pop(trial.id, None)
            if trial.recovering:  # resumed: the screen's "running (preempted)" is over
                trial.recovering = False
                self._save()
            await self._update_metrics(trial, reach)
            if self.study is not None and self.study.report(trial):
                await self._prune(trial, reach)
        elif status.state == "exited" and status.exit_code == 0:
            await self._finish(trial, reach)
        elif _preempted(status, trial):
            await self._maybe_relaunch(trial, reach)
        else:
            code = status.exit_code if status.exit_code is not None else 137
            await self._fail(trial, reach, code, status.detail or status.state)

    async def _update_metrics(self, trial: Trial, reach: Reach) -> None:
        try:
            found = await self.reader.metrics(reach, trial, self.spec.metric, self.spec.goal)
        except (GcptuiError, OSError):
            return
        changed = (found.step, found.last) != (trial.step, trial.metric)
        trial.step, trial.total_steps = found.step, found.total_steps or trial.total_steps
        trial.metric, trial.best_metric, trial.curve = found.last, found.best, found.curve
        # Progress reaches the state file at most once a second (`sweep status` reads it from there).
        if changed and time.monotonic() - self._saved_at >= PROGRESS_SAVE_SECONDS:
            self._save()
        elif changed and self.on_change is not None:
            self.on_change(self.state)

    async def _finish(self, trial: Trial, reach: Reach) -> None:
        await self._update_metrics(trial, reach)
        trial.state, trial.exit_code, trial.ended_at = "finished", 0, time.time()
        trial.recovering = False  # settled: nothing is waiting for its VM any more
        self.runner.trial_jobs.pop((trial.vm or "", trial.slot), None)
        self._save()
        self._tell(trial)
        self.say(f"{trial.id} finished on {trial.vm}: {self.spec.metric} {trial.metric}")

    async def _prune(self, trial: Trial, reach: Reach, *, again: bool = False) -> None:
        """Stop a trial the pruner calls a loser: its job killed (SIGTERM, so the trainer keeps its
        checkpoint), the trial recorded ``pruned`` at its last reported step, the study told.

        The step is saved before the kill: a run interrupted before the kill or its record is
        finished by the next one (``again``: kill it if it still runs, then record it pruned),
        never taken for a failure (the killed job's exit code)."""
        if not again:
            decided = self.study.pruned_at(trial) if self.study is not None else None
            trial.pruned_at_step = (
                decided if decided is not None else (trial.curve[-1][0] if trial.curve else trial.step)
            )
            self._save()
        try:
            status = await self.runner.kill(reach)
        except GcptuiError as err:
            self.say(f"warning: {trial.id}: could not stop it on {trial.vm} ({err}): trying again")
            return
        if status.state == "exited" and status.exit_code == 0:  # it reached its end first
            trial.pruned_at_step = None
            await self._finish(trial, reach)
            return
        trial.state, trial.ended_at = "pruned", time.time()
        trial.recovering = False
        self.runner.trial_jobs.pop((trial.vm or "", trial.slot), None)
        self._save()
        self._tell(trial)
        self.say(
            f"{trial.id} pruned on {trial.vm} at step {trial.pruned_at_step}: {self.spec.metric} {trial.metric}"
        )

    async def _fail(self, trial: Trial, reach: Reach, code: int | None, why: str) -> None:
        await self._update_metrics(trial, reach)
        try:
            trial.log_tail = await self.reader.log_tail(reach)
        except (GcptuiError, OSError):
            trial.log_tail = []
        trial.failures += 1
        trial.recovering = False
        trial.exit_code = code
        vm = trial.vm
        self.runner.trial_jobs.pop((vm or "", trial.slot), None)
        if trial.failures < self.spec.max_failures:
            trial.state, trial.vm, trial.slot, trial.devices = "queued", None, 0, None
            self.say(
                f"{trial.id} failed on {vm} (exit code {code}, {why}): queued again ({trial.failures}/{self.spec.max_failures})"
            )
        else:
            trial.state, trial.ended_at = "failed", time.time()
            self._tell(trial)
            self.say(
                f"{trial.id} failed on {vm} (exit code {code}, {why}): given up after {trial.failures} failure(s)"
            )
        self._save()

    async def _maybe_relaunch(self, trial: Trial, reach: Reach) -> None:
        """The VM is back but the trial's job lies preempted: give keep-alive ``relaunch_after``
        seconds to resume it, then resume it here (same resume command, same run directory)."""
        trial.preempted = trial.recovering = True
        first = self._down_since.setdefault(trial.id, time.monotonic())
        if time.monotonic() - first < self.relaunch_after:
            return
        self._down_since.pop(trial.id, None)
        try:
            await self.runner.restart(reach)
        except GcptuiError as err:
            self.say(f"warning: {trial.id}: could not resume on {trial.vm}: {err}")
            return
        self.say(f"{trial.id} resumed on {trial.vm} after a preemption")
        self._save()


def _preempted(status: JobStatus, trial: Trial) -> bool:
    """The job ended because its VM went away (not by its own failure): resume it, don't count it."""
    if status.detail in CUT_SHORT or status.preempted_at:
        return True
    # SIGTERM at a preemption: the trainer saves and exits 143 (or the job died with the VM). Only
    # while the trial recovers from one: a 143 after its resume (the user's `job kill`) is a failure.
    return trial.recovering and status.exit_code in (None, 143)
