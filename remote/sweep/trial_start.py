"""Starting trials: fill each usable VM's free slots from the queue (asking the study for more when it
has a budget), sync a VM's tree once before its first trial of the run, send the start command.
"""

from __future__ import annotations

import asyncio

from gcptui.remote.errors import GcptuiError
from gcptui.remote.jobs.runner import JobAlreadyRunningError
from gcptui.remote.ssh.errors import SshUnreachableError
from gcptui.remote.sweep.scheduler_base import SchedulerBase, SweepError
from gcptui.remote.sweep.state import Trial
from gcptui.remote.sweep.vmside import in_slot, pinned_devices
from gcptui.remote.sync import SyncError, SyncLostError


class TrialStarts(SchedulerBase):
    """The scheduler's starting half: ``_fill`` once per poll."""

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


def _params_text(trial: Trial) -> str:
    return " ".join(f"{k}={v}" for k, v in trial.params.items())
