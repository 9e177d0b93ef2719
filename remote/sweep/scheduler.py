"""Run a sweep's trials across its VMs: queue, start as slots free up, follow to the end, shut down.

The loop is level-triggered: every ``poll_seconds`` it reads each busy VM's job state (the
supervisor's own record on the VM) and settles the trial from it, so an interrupted ``sweep run``
resumes by simply looping again. A trial is marked ``starting`` (and saved) before its start command
is sent; afterwards the VM's recorded command, which names the trial's run directory, tells whether
the start happened. Nothing finished or running is ever started twice.

With ``sync``, a VM gets the local tree (one full sync) before its first trial of this run, whenever it
becomes usable: a VM that is down when the sweep starts, or preempted in the middle of that sync,
holds its trials until it is back and synced, while the other VMs go on.

A VM that is not RUNNING while its trial runs was preempted (or stopped): the trial stays running;
keep-alive (or, after ``relaunch_after`` seconds, this loop) restarts its job with the trial's
resume command once the VM is back.

A model-based sweep (``search = "tpe" | "cmaes" | "gp"``) has a study (remote/sweep/study.py): a trial
is asked from it when a slot frees (up to ``count``), told how it ended, and fed its metric at every
step it logs; one the pruner calls a loser is killed (SIGTERM: its checkpoints stay) and recorded as
``pruned`` in the same poll, and its slot goes to the next trial.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from gcptui.remote.aio import cancel_and_wait
from gcptui.remote.compute.backend import Capability
from gcptui.remote.compute.exec_channel import Reach
from gcptui.remote.config import JobConfig
from gcptui.remote.errors import GcptuiError
from gcptui.remote.jobs.protocol import JobStatus
from gcptui.remote.jobs.runner import JobAlreadyRunningError
from gcptui.remote.keepalive.resume_rule import CUT_SHORT
from gcptui.remote.models import Instance, State
from gcptui.remote.services import Services
from gcptui.remote.ssh.errors import SshUnreachableError
from gcptui.remote.sweep.recovery import sweep_keepalive
from gcptui.remote.sweep.state import ACTIVE, SweepState, Trial, save_state
from gcptui.remote.sweep.study import SweepStudy, journal_path
from gcptui.remote.sweep.vmside import TrialJobRunner, VmReader, in_slot, pinned_devices, trial_job
from gcptui.remote.sync import SyncError, SyncLostError

Say = Callable[[str], None]
PROGRESS_SAVE_SECONDS = 1.0


class SweepError(GcptuiError):
    """The sweep cannot go on (no VM of it can run a trial)."""


class Scheduler:
    """Drives one sweep to its end over shared ``Services``; ``run()`` returns the final state."""

    def __init__(
        self,
        services: Services,
        state: SweepState,
        *,
        say: Say | None = None,
        poll_seconds: float | None = None,
        relaunch_after: float = 60.0,
        on_change: Callable[[SweepState], None] | None = None,
        sync: bool = False,
        study: SweepStudy | None = None,
    ) -> None:
        self.services = services
        self.state = state
        self.spec = state.spec
        self.say: Say = say or (lambda _line: None)
        self.poll = poll_seconds if poll_seconds is not None else self.spec.poll_seconds
        self.relaunch_after = relaunch_after
        self.on_change = on_change
        self.runner = TrialJobRunner(services.pool, services.config, remote_home=services.jobs.remote_home)
        self.reader = VmReader(self.runner)
        self.instances: dict[str, Instance] = {}
        self._down_since: dict[str, float] = {}  # trial id -> when its job was first seen preempted
        self._warned: set[str] = set()
        self._saved_at = 0.0
        self.sync = sync
        self._synced: set[str] = set()  # VMs that got the tree in this run
        self._sync_locks: dict[str, asyncio.Lock] = {}
        self.study = study
        if study is None and self.spec.model_based:
            self.study = SweepStudy.open(state, journal_path(state.name))

    # ---- the loop ---------------------------------------------------------------------------

    async def run(self) -> SweepState:
        """Run every queued trial to its end, then stop (or delete) the VMs as ``at_end`` says.

        With ``keepalive`` in the spec and ``[gcp]`` in the config, a keep-alive over the sweep's VMs
        runs alongside, resuming preempted trials.
        """
        for trial in self.state.trials:
            if trial.state in ACTIVE and trial.vm:
                self.runner.trial_jobs[(trial.vm, trial.slot)] = self._trial_job(trial, trial.vm)
        if not self.keepalive_on:
            return await self._loop()
        keepalive = sweep_keepalive(
            self.services,
            self.runner,
            self.spec.vm_names,
            on_event=lambda e: self.say(f"keep-alive: {e.line()}"),
        )
        task = asyncio.create_task(keepalive.run(), name="sweep keep-alive")
        try:
            return await self._loop()
        finally:
            await cancel_and_wait(task)
            await keepalive.close()

    async def _loop(self) -> SweepState:
        while True:
            await self._refresh_instances()
            active = [t for t in self.state.trials if t.state in ACTIVE]
            await asyncio.gather(*(self._follow(t) for t in active))
            await self._fill()
            await self._shut_down_idle()
            if not any(t.state in (*ACTIVE, "queued") for t in self.state.trials) and not self._to_ask():
                break
            idle = not any(t.state in ACTIVE for t in self.state.trials)
            if idle and not self._usable() and not any(self._coming_back(vm) for vm in self.spec.vm_names):
                raise SweepError(
                    f"sweep {self.spec.name}: trials are queued but none of its VMs "
                    f"({', '.join(self.spec.vm_names)}) is RUNNING: start them (`gcptui vm start NAME`) and run it again"
                )
            await asyncio.sleep(self.poll)
        self.state.finished_at = self.state.finished_at or time.time()
        self._save()
        return self.state

    def _to_ask(self) -> int:
        """Trials the study is still to be asked for (0 without a study)."""
        return self.study.budget_left(self.state) if self.study is not None else 0

    def _save(self) -> None:
        save_state(self.state)
        self._saved_at = time.monotonic()
        if self.on_change is not None:
            self.on_change(self.state)

    async def _refresh_instances(self) -> None:
        # Also a VM taken out of the sweep file since (VMs may change between runs) while a trial
        # still runs there: it is followed to its end, else the sweep would wait for it forever.
        # Nothing new starts there (_usable takes the file's VMs).
        names = list(self.spec.vm_names)
        names += sorted({t.vm for t in self.state.trials if t.state in ACTIVE and t.vm and t.vm not in names})
        try:
            found = await self.services.resolve(names)
        except GcptuiError as err:
            if not self.instances:  # the first listing: an unknown name or no access is for the user to fix
                raise
            self.say(f"warning: could not list the sweep's VMs ({err}): trying again")
            return
        self.instances = {i.name: i for i in found}

    def _running(self, vm: str) -> bool:
        instance = self.instances.get(vm)
        return instance is not None and instance.state.reachable

    def _reach(self, vm: str) -> Reach | None:
        """How the runner and the reader reach ``vm`` (SSH to its address, or its backend's channel);
        None when nothing does now (no address, no shell)."""
        instance = self.instances.get(vm)
        if instance is None:
            return None
        try:
            return self.services.reach(instance)
        except GcptuiError:
            return None

    def _coming_back(self, vm: str) -> bool:
        """The VM is on its way up, or down after a preemption that keep-alive recovers: wait for it."""
        instance = self.instances.get(vm)
        if instance is None or vm in self.state.vms_done:
            return False
        if instance.state in (State.PROVISIONING, State.STOPPING):
            return True
        return instance.preempted and self.keepalive_on

    @property
    def keepalive_on(self) -> bool:
        return self.spec.keepalive and self.services.config.gcp is not None

    def _usable(self) -> list[str]:
        return [vm for vm in self.spec.vm_names if vm not in self.state.vms_done and self._running(vm)]

    # ---- starting trials --------------------------------------------------------------------

    def _gpus(self, vm: str) -> int:
        instance = self.instances.get(vm)
        return sum(g.count for g in instance.gpus) if instance is not None else 0

    def slots(self, vm: str) -> int:
        """Trials at once on ``vm``: ``trials_per_vm``, or (0) one per GPU of the VM, 1 without GPUs."""
        return self.spec.trials_per_vm or max(1, self._gpus(vm))

    async def _fill(self) -> None:
        free: list[tuple[str, int]] = []
        for vm in self._usable():
            taken = {t.slot for t in self.state.on_vm(vm)}
            # Slot by slot across the VMs: a short queue spreads over the VMs before doubling up.
            free.extend((vm, slot) for slot in range(self.slots(vm)) if slot not in taken)
        free.sort(key=lambda pair: pair[1])
        queued = [t for t in self.state.trials if t.state == "queued"]
        if self.study is not None and len(free) > len(queued):
            asked = [self.study.ask(self.state) for _ in range(min(len(free) - len(queued), self._to_ask()))]
            queued += asked
            if asked:
                self._save()
        await asyncio.gather(
            *(self._start(trial, vm, slot) for trial, (vm, slot) in zip(queued, free, strict=False))
        )

    def _trial_job(self, trial: Trial, vm: str) -> JobConfig:
        config = self.services.config
        url = config.storage.checkpoint_url(vm)
        return trial_job(config.job, self.spec, trial, self.runner.dest, checkpoint_url=url)

    async def _start(self, trial: Trial, vm: str, slot: int) -> None:
        reach = self._reach(vm)
        if reach is None or not await self._holds_the_tree(vm):
            return
        trial.state, trial.vm, trial.slot = "starting", vm, slot
        trial.devices = pinned_devices(slot, self.slots(vm), self._gpus(vm))
        trial.attempts += 1
        job = self._trial_job(trial, vm)
        self.runner.trial_jobs[(vm, slot)] = job
        self._save()  # before the command: an interrupt from here on is settled from the VM's record
        try:
            with in_slot(slot):
                status = await self.runner.start(reach)
        except JobAlreadyRunningError as err:
            if self._is_trial(err.status, trial):
                status = err.status
            else:
                busy = f"{vm} runs another job ({err.status.command}): its trials wait"
                self._requeue(trial, "" if vm in self._warned else busy)
                self._warned.add(vm)
                return
        except SshUnreachableError as err:
            # The VM may be booting or going down: try again next poll, saying so once per VM.
            self._requeue(trial, "" if vm in self._warned else f"warning: {err} (its trials wait)")
            self._warned.add(vm)
            return
        except GcptuiError as err:
            # The VM refused the start (no project directory, a stuck lock, ...): retrying every poll
            # would only repeat it, so the sweep stops with the VM's reason.
            self._requeue(trial, f"{trial.id} could not start on {vm}")
            raise SweepError(str(err)) from None
        self._warned.discard(vm)
        self._mark_running(trial, status)
        where = (
            vm if self.slots(vm) == 1 else f"{vm} (slot {slot}, CUDA_VISIBLE_DEVICES={trial.devices or '-'})"
        )
        self.say(f"{trial.id} started on {where}: {_params_text(trial)}")

    async def _holds_the_tree(self, vm: str) -> bool:
        """Sync ``vm`` before its first trial of this run (once, however many slots start at once).

        False while the VM cannot be reached or goes away mid-sync (its trials wait for the next poll,
        said once per VM); any other sync failure is the user's to fix and stops the sweep.
        """
        if not self.sync or vm in self._synced:
            return True
        async with self._sync_locks.setdefault(vm, asyncio.Lock()):
            if vm in self._synced:
                return True
            instance = self.instances[vm]
            self.say(f"sync {self.services.sync_line(instance)}")
            session = self.services.sync_session(instance)
            try:
                await session.full_sync()
            except SyncLostError as err:
                if vm not in self._warned:
                    self.say(f"warning: {err} (its trials wait)")
                    self._warned.add(vm)
                return False
            except SyncError as err:
                raise SweepError(str(err)) from None
            finally:
                await session.close()
            self._synced.add(vm)
            return True

    def _requeue(self, trial: Trial, why: str) -> None:
        self.runner.trial_jobs.pop((trial.vm or "", trial.slot), None)
        trial.state, trial.vm, trial.slot, trial.devices = "queued", None, 0, None
        trial.attempts -= 1
        if why:
            self.say(why)
        self._save()

    def _mark_running(self, trial: Trial, status: JobStatus) -> None:
        trial.state = "running"
        trial.started_at = trial.started_at or time.time()
        self._save()

    @staticmethod
    def _is_trial(status: JobStatus, trial: Trial) -> bool:
        return status.command in (trial.command, trial.resume)

    # ---- following trials -------------------------------------------------------------------

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
            trial.pruned_at_step = trial.curve[-1][0] if trial.curve else trial.step
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

    def _tell(self, trial: Trial) -> None:
        # After the save: a crash between the two is told when the study is opened again (once).
        if self.study is not None:
            self.study.report(trial)
            self.study.tell(trial)

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

    # ---- the end ----------------------------------------------------------------------------

    async def _shut_down_idle(self) -> None:
        """Stop (or delete) each VM whose last trial ended, once nothing is left in the queue."""
        if self.spec.at_end == "none" or any(t.state == "queued" for t in self.state.trials):
            return
        if self._to_ask():
            return
        for vm in self.spec.vm_names:
            instance = self.instances.get(vm)
            if vm in self.state.vms_done or instance is None or self.state.on_vm(vm):
                continue
            if not self.services.compute.can(instance, Capability.STOP):
                self.state.vms_done.append(vm)  # a static host cannot be stopped: just done with it
                continue
            gce = self.services.fleet.gce()
            action = gce.stop if self.spec.at_end == "stop" else gce.delete
            try:
                await asyncio.to_thread(action, instance.name, instance.zone)
            except GcptuiError as err:
                self.say(f"warning: could not {self.spec.at_end} {vm}: {err}")
                continue
            self.state.vms_done.append(vm)
            self._save()
            self.say(f"{vm}: {'stopped' if self.spec.at_end == 'stop' else 'deleted'} (its last trial ended)")


def _preempted(status: JobStatus, trial: Trial) -> bool:
    """The job ended because its VM went away (not by its own failure): resume it, don't count it."""
    if status.detail in CUT_SHORT or status.preempted_at:
        return True
    # SIGTERM at a preemption: the trainer saves and exits 143 (or the job died with the VM). Only
    # while the trial recovers from one: a 143 after its resume (the user's `job kill`) is a failure.
    return trial.recovering and status.exit_code in (None, 143)


def _params_text(trial: Trial) -> str:
    return " ".join(f"{k}={v}" for k, v in trial.params.items())
