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

from gcptui.remote.aio import cancel_and_wait
from gcptui.remote.compute.backend import Capability
from gcptui.remote.errors import GcptuiError
from gcptui.remote.sweep.reconcile import Reconciler, _preempted
from gcptui.remote.sweep.recovery import sweep_keepalive
from gcptui.remote.sweep.scheduler_base import SweepError
from gcptui.remote.sweep.state import ACTIVE, SweepState
from gcptui.remote.sweep.trial_start import TrialStarts

# Importable from here, where callers (and tests) have always found them.
__all__ = ["Scheduler", "SweepError", "_preempted"]


class Scheduler(TrialStarts, Reconciler):
    """Drives one sweep to its end over shared ``Services``; ``run()`` returns the final state.

    Its parts: the state and the VMs' view (scheduler_base.py), starting trials (trial_start.py),
    following them (reconcile.py); the loop and the end are here.
    """

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
            try:
                backend = self.services.compute.of(instance)
                action = backend.stop if self.spec.at_end == "stop" else backend.delete
                await asyncio.to_thread(action, instance)
            except GcptuiError as err:
                self.say(f"warning: could not {self.spec.at_end} {vm}: {err}")
                continue
            self.state.vms_done.append(vm)
            self._save()
            self.say(f"{vm}: {'stopped' if self.spec.at_end == 'stop' else 'deleted'} (its last trial ended)")
