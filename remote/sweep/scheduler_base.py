"""The sweep scheduler's state and its view of the sweep's VMs: which are listed, RUNNING, reachable,
coming back, how many trial slots each has; the trial bookkeeping its parts share (save, requeue, tell).

``Scheduler`` (scheduler.py) is this plus ``TrialStarts`` (trial_start.py) and ``Reconciler``
(reconcile.py); the loop's design is in scheduler.py's docstring.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from gcptui.remote.compute.exec_channel import Reach
from gcptui.remote.config import JobConfig
from gcptui.remote.errors import GcptuiError
from gcptui.remote.jobs.protocol import JobStatus
from gcptui.remote.models import Instance, State
from gcptui.remote.services import Services
from gcptui.remote.sweep.state import ACTIVE, SweepState, Trial, save_state
from gcptui.remote.sweep.study import SweepStudy, journal_path
from gcptui.remote.sweep.vmside import TrialJobRunner, VmReader, trial_job

Say = Callable[[str], None]
PROGRESS_SAVE_SECONDS = 1.0


class SweepError(GcptuiError):
    """The sweep cannot go on (no VM of it can run a trial)."""


class SchedulerBase:
    """What every part of the scheduler shares: its ``Services``, the sweep's state, the VMs as last listed."""

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
        self.runner = TrialJobRunner(services.config, remote_home=services.jobs.remote_home)
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

    def _gpus(self, vm: str) -> int:
        instance = self.instances.get(vm)
        return sum(g.count for g in instance.gpus) if instance is not None else 0

    def slots(self, vm: str) -> int:
        """Trials at once on ``vm``: ``trials_per_vm``, or (0) one per GPU of the VM, 1 without GPUs."""
        return self.spec.trials_per_vm or max(1, self._gpus(vm))

    def _trial_job(self, trial: Trial, vm: str) -> JobConfig:
        config = self.services.config
        url = config.storage.checkpoint_url(vm)
        return trial_job(config.job, self.spec, trial, self.runner.dest, checkpoint_url=url)

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

    def _tell(self, trial: Trial) -> None:
        # After the save: a crash between the two is told when the study is opened again (once).
        if self.study is not None:
            self.study.report(trial, check=False)
            self.study.tell(trial)
