"""Keep-alive for a sweep's VMs: a preempted VM is restarted and its trial resumed, not restarted.

The sweep runs the one keep-alive service (``keepalive/service.py``) over its own VMs with a launcher
that resumes the trial the VM was running: its job runner is the sweep's ``TrialJobRunner`` (whose
``restart`` runs the trial's resume command with the trial's environment), and the steps-lost
bookkeeping reads the trial's own metrics file.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

from gcptui.remote.jobs.protocol import metrics_path
from gcptui.remote.keepalive.recovery import RecoveryEvent, ResumePoint, StepReporter
from gcptui.remote.keepalive.relaunch import JobLauncher
from gcptui.remote.keepalive.service import KeepAliveService, build_service
from gcptui.remote.models import Instance
from gcptui.remote.services import Services
from gcptui.remote.sweep.vmside import TrialJobRunner, current_slot, in_slot

# The VM a relaunch works on: KeepAlive runs one task per VM, so each sees its own value.
_current_vm: contextvars.ContextVar[str | None] = contextvars.ContextVar("sweep_relaunch_vm", default=None)


class TrialLauncher(JobLauncher):
    """``JobLauncher`` that reads the metrics file of the trial on the VM being relaunched."""

    def __init__(self, services: Services, runner: TrialJobRunner) -> None:
        super().__init__(services, jobs=runner)
        self.runner = runner

    @property
    def metrics_file(self) -> str:
        vm = _current_vm.get()
        job = self.runner.trial_jobs.get((vm, current_slot())) if vm else None
        if job is None:
            return super().metrics_file
        return metrics_path(job, self.runner.dest)

    async def relaunch(self, instance: Instance, report: StepReporter | None = None) -> ResumePoint:
        """Resume every trial the VM was running (one per slot); the point returned is the one that
        lost the most steps, so keep-alive's timeline never understates a loss."""
        slots = self.runner.slots_of(instance.name)
        if not slots:
            return ResumePoint()  # the VM had no trial running: nothing to resume (nor [job] to start)
        token = _current_vm.set(instance.name)
        try:
            points = []
            for slot in slots:
                with in_slot(slot):
                    points.append(await super().relaunch(instance, report))
        finally:
            _current_vm.reset(token)
        return max(points, key=_lost)

    __call__ = relaunch


def _lost(point: ResumePoint) -> int:
    if point.step is None or point.last_step is None:
        return 0
    return point.last_step - point.step


def sweep_keepalive(
    services: Services,
    runner: TrialJobRunner,
    vms: list[str],
    on_event: Callable[[RecoveryEvent], None] | None = None,
) -> KeepAliveService:
    """The one keep-alive service over ``vms``, resuming each VM's trial through ``runner`` (its
    ``restart`` runs the trial's resume command). Failover and the ledger as everywhere; no notice
    watchers (trials run in job slots), no auto-stop and no "job ended, stop it again" check: the
    sweep's scheduler decides what a VM runs next."""
    return build_service(
        services, names=vms, on_event=on_event, launcher=TrialLauncher(services, runner), check_jobs=False,
        notices=False, autostop=False,
    )  # fmt: skip
