"""Keep-alive over the seam for the rows of other kinds of compute: a Cloud TPU node today.

``KeepAlive`` (``recovery.py``) watches GCE instances. This watches the rows of every other
configured backend whose workers each run a shell and that the provider may take back
(``Capability.PREEMPTIBLE`` and ``RECOVER``, ``Backend.worker_rows``), reading only neutral states:
one listing per poll through the registry; while a row runs, whether its job runs (worker 0's
supervisor); a row that was running its job and now reads ``preempted`` is brought back by its
backend (a TPU node: deleted and created anew like itself, READY, keys pinned), synced on every
worker, and the job relaunched on all workers at once with ``[job].resume`` (each worker resumes
from its own place in the bucket: the new node's disks are empty). Every step is a ``RecoveryEvent``
to the same listeners as ``KeepAlive``'s, so the TUI's cell and timeline and ``gcptui keepalive``'s
lines show it alike.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

import asyncssh

from gcptui.remote.aio import cancel_and_wait
from gcptui.remote.backoff import Backoff
from gcptui.remote.compute.backend import Backend, Capability, Recovery
from gcptui.remote.errors import GcptuiError
from gcptui.remote.jobs.protocol import JobStatus
from gcptui.remote.jobs.workers import WorkerJobRunner
from gcptui.remote.keepalive.events import EventKind, RecoveryEvent, now
from gcptui.remote.keepalive.lease import LeaseLost
from gcptui.remote.keepalive.relaunch import JobLauncher
from gcptui.remote.keepalive.resume_rule import nothing_to_resume
from gcptui.remote.models import Instance, State, StopCause
from gcptui.remote.safe_text import one_line, vm_field
from gcptui.remote.services import Services

log = logging.getLogger(__name__)
RELAUNCH_ATTEMPTS = 8  # SSH to a node just made may take a while to answer
# How long an adopted recovery waits for its row to run again: a node made anew takes minutes. While
# it waits it keeps the lease busy, so the lease is not given back with the recovery unfinished.
ADOPT_WAIT_S = 600.0


# What a row needs for keep-alive to recover it here: taken back by its provider, brought back through
# the seam, and a shell on its workers to relaunch the job in (a Spot TPU node, a GKE workload on Spot).
ROW_NEEDS = frozenset({Capability.PREEMPTIBLE, Capability.RECOVER, Capability.SHELL})


def watchable(backend: Backend, row: Instance) -> bool:
    """Whether ``RowKeepAlive`` watches ``row`` when named (``gcptui keepalive NAME`` asks first)."""
    return ROW_NEEDS <= backend.capabilities(row)


class RowKeepAlive:
    """Watches the recoverable worker rows (``names``: those only; None: every one) and recovers them."""

    def __init__(
        self,
        services: Services,
        *,
        names: Iterable[str] | None = None,
        on_event: Callable[[RecoveryEvent], None] | None = None,
        poll_seconds: float | None = None,
        max_restarts: int | None = None,
        backoff_base: float = 1.0,
        resume_timeout: float = 120.0,
    ) -> None:
        settings = services.config.keepalive
        self.services = services
        self.names = set(names) if names is not None else None
        self.on_event = on_event or (lambda _event: None)
        self.poll_seconds = settings.poll_seconds if poll_seconds is None else poll_seconds
        self.max_restarts = settings.max_restarts if max_restarts is None else max_restarts
        self.backoff_base = backoff_base
        self.resume_timeout = resume_timeout
        self.polls = 0
        self.restarts: dict[str, int] = {}
        self.outcomes: dict[str, str] = {}  # name -> how its last recovery ended
        self._job_ran: dict[str, bool] = {}  # name -> its job ran at the last look while it was up
        self._recovering: dict[str, asyncio.Task[None]] = {}
        self._disabled: set[str] = set()  # switched off by the user (the TUI's k), whatever ``names`` says
        # The lease (service.py): False while another keep-alive holds it; this one then only watches.
        self.may_recover: Callable[[], bool] = lambda: True
        # Checked again right before the job is restarted (``LeaseGate.fence``): a recovery that began
        # while this keep-alive held the lease stops there if the lease passed on meanwhile.
        self.fence: Callable[[], Awaitable[None]] | None = None
        # And before a recovery acts: the lease names it (``LeaseGate.record_intent``).
        self.intent: Callable[[], Awaitable[None]] | None = None
        # Recoveries a previous lease holder left unfinished (``adopt``): name -> (holder, until when).
        self._adopted: dict[str, tuple[str, float]] = {}

    # -- watching ----------------------------------------------------------------------------------

    def enabled(self, name: str) -> bool:
        """Whether ``name`` is watched when its row can be (named, or all; not switched off)."""
        return name not in self._disabled and (self.names is None or name in self.names)

    def enable(self, name: str) -> None:
        """Watch ``name`` (switched on by the user, as ``KeepAlive.enable``), its restart count anew."""
        self._disabled.discard(name)
        if self.names is not None:
            self.names.add(name)
        self.restarts.pop(name, None)

    def disable(self, name: str) -> None:
        """Stop watching ``name``; a recovery in flight is cancelled (the user takes over)."""
        self._disabled.add(name)
        task = self._recovering.get(name)
        if task is not None:
            task.cancel()

    def _watched(self, backend: Backend, row: Instance) -> bool:
        return watchable(backend, row) and bool(row.workers) and self.enabled(row.name)

    def _rows(self) -> list[tuple[Backend, Instance]]:
        """The watched rows of the kinds ``KeepAlive`` does not poll itself (its GCE listing)."""
        rows, _notes = self.services.compute.rows_beyond_fleet()
        found = []
        for row in rows:
            backend = self.services.compute.of(row)
            if self._watched(backend, row):
                found.append((backend, row))
        return found

    async def run(self) -> None:
        """Poll until cancelled (a failed poll is logged and the next one tries again)."""
        while True:
            try:
                await self.poll()
            except GcptuiError as err:
                log.warning("keep-alive poll of the other kinds of compute failed: %s", err)
            await asyncio.sleep(self.poll_seconds)

    def adopt(self, holder: str, names: Iterable[str]) -> None:
        """This keep-alive took the lease over from ``holder``, which stopped renewing it while it was
        recovering ``names`` (``KeepAlive.adopt`` for the VMs). Its node may be made anew already, so no
        poll here would see a preemption: a row among them that runs with its job not running on
        worker 0 (a node made anew has no job record at all) gets its job relaunched here."""
        until = asyncio.get_running_loop().time() + self.resume_timeout + ADOPT_WAIT_S
        for name in names:
            # Only a row whose job this keep-alive saw run (the lease lists VMs too; a job seen killed
            # or finished has nothing a recovery may bring back).
            if self._job_ran.get(name):
                self._adopted[name] = (holder, until)

    def in_flight(self) -> list[str]:
        """The rows whose recovery this keep-alive has begun, or adopted and not decided yet."""
        return [*self._recovering, *self._adopted]

    async def poll(self) -> None:
        rows = await asyncio.to_thread(self._rows)
        self.polls += 1
        for backend, row in rows:
            if row.name in self._recovering:
                continue
            if row.name in self._adopted and self.may_recover():
                if await self._finish_adopted(backend, row):
                    continue
            if row.state is State.RUNNING:
                ran = await self._job_running(backend, row)
                if ran is not None:
                    self._job_ran[row.name] = ran
            elif row.state is State.PREEMPTED or (
                row.state.down and await asyncio.to_thread(backend.why_stopped, row) is StopCause.PREEMPTED
            ):
                if not self._job_ran.get(row.name):
                    continue  # nothing ran there: a preempted idle node is left (ls names it)
                if not self.may_recover():
                    continue  # another keep-alive holds the lease and recovers it
                if self.restarts.get(row.name, 0) >= self.max_restarts:
                    continue
                self.restarts[row.name] = self.restarts.get(row.name, 0) + 1
                task = asyncio.create_task(self._recover(backend, row), name=f"recover {row.name}")
                self._recovering[row.name] = task
                task.add_done_callback(self._forget(row.name))

    async def _finish_adopted(self, backend: Backend, row: Instance) -> bool:
        """Decide an adopted row once it runs; True when its relaunch started here."""
        holder, until = self._adopted[row.name]
        if asyncio.get_running_loop().time() > until or row.state.down:
            del self._adopted[row.name]  # a row that is down again: this poll's own rules decide
            return False
        if row.state is not State.RUNNING:
            return False  # still being made: asked again at the next poll
        status = await self._worker0_status(backend, row)
        if status is None:
            return False  # its workers do not answer yet
        del self._adopted[row.name]
        # Relaunched only when a preemption cut the job short (the rule of every recovery), or the
        # node was made anew (no job record at all where this keep-alive saw the job run): never a
        # job the user killed or that finished, whatever a lease (or a replay of one) says.
        made_anew = status.state == "none" and self._job_ran.get(row.name, False)
        if status.state == "running" or (nothing_to_resume(status) is not None and not made_anew):
            return False  # the previous holder's relaunch landed after all, or nothing was cut short
        self.restarts[row.name] = self.restarts.get(row.name, 0) + 1
        task = asyncio.create_task(self._finish(backend, row, holder), name=f"finish {row.name}")
        self._recovering[row.name] = task
        task.add_done_callback(self._forget(row.name))
        return True

    async def _finish(self, backend: Backend, row: Instance, holder: str) -> None:
        self._emit(
            row.name,
            "preempted",
            f"{vm_field(holder, 80)} stopped renewing the lease mid-recovery: finishing its recovery",
        )
        await self._relaunch_until_started(backend, row)

    def _forget(self, name: str) -> Callable[[asyncio.Task[None]], None]:
        def forget(_task: asyncio.Task[None]) -> None:
            self._recovering.pop(name, None)

        return forget

    async def _job_running(self, backend: Backend, row: Instance) -> bool | None:
        """Whether the row's job has something to resume: it runs on the first worker, or it was cut
        short by the machine going away (the node still reads READY during a preemption's grace, while
        the job has already checkpointed and exited 143: ``resume_rule``); None when it cannot be read."""
        status = await self._worker0_status(backend, row)
        if status is None:
            return None
        if status.state == "none" and self._job_ran.get(row.name):
            # No record at all: a node made anew by a recovery (this one's or a previous lease
            # holder's, not relaunched yet): the job that ran before it still has something to resume.
            return True
        return nothing_to_resume(status) is None

    async def _worker0_status(self, backend: Backend, row: Instance) -> JobStatus | None:
        """The job's record on the row's first worker; None when it cannot be read."""
        workers = backend.worker_rows(row)
        if not workers:
            return None
        try:
            return await self.services.jobs.status(self.services.reach(workers[0]))  # SSH, or a pod's exec
        except (GcptuiError, OSError, asyncssh.Error, TimeoutError):
            return None

    def recovering(self, name: str) -> bool:
        return name in self._recovering

    async def close(self) -> None:
        await cancel_and_wait(*self._recovering.values())

    # -- recovering -----------------------------------------------------------------------------------

    def _emit(self, name: str, kind: EventKind, detail: str = "") -> None:
        self.on_event(RecoveryEvent(name, kind, now(), detail))

    async def _recover(self, backend: Backend, row: Instance) -> None:
        name = row.name
        self._emit(name, "preempted", f"{row.source} row reads {one_line(row.status)}")
        self._emit(
            name, "restarting", "bringing it back like itself (a preempted TPU node, or a pod, is made anew)"
        )
        try:
            if self.intent is not None:
                await self.intent()
            how: Recovery = await asyncio.to_thread(backend.recover, row)
        except Exception as err:  # noqa: BLE001 - any failure is this recovery's, said and logged
            log.warning("recovering %s failed", name, exc_info=not isinstance(err, GcptuiError))
            self.outcomes[name] = "failed"
            self._emit(name, "failed", one_line(str(err) or type(err).__name__))  # the next poll tries again
            return
        fresh = await asyncio.to_thread(backend.get, row)
        if fresh is None:
            self.outcomes[name] = "failed"
            self._emit(name, "failed", f"{name} is gone after its recovery")
            return
        self._emit(name, "running", f"{how}: {len(fresh.workers)} workers up")
        await self._relaunch_until_started(backend, fresh)

    async def _relaunch_until_started(self, backend: Backend, fresh: Instance) -> None:
        name = fresh.name
        pauses = Backoff(self.backoff_base, 30.0)
        for attempt in range(1, RELAUNCH_ATTEMPTS + 1):
            self._emit(name, "relaunching", f"attempt {attempt}")
            try:
                step = await self._relaunch(backend, fresh)
            except LeaseLost as err:
                # Another keep-alive holds the lease now and recovers this node: never retried here.
                self.outcomes[name] = "failed"
                self._emit(name, "failed", one_line(str(err)))
                return
            except (GcptuiError, OSError, asyncssh.Error, TimeoutError) as err:
                # SSH to a node just made, a sync that lost its agent: tried again after a pause.
                self._emit(name, "retry", one_line(str(err) or type(err).__name__))
                await asyncio.sleep(pauses.pause())
                continue
            self.outcomes[name] = "resumed"
            self._job_ran[name] = True
            self._emit(name, "resumed", "step unknown" if step is None else f"from step {step}")
            return
        self.outcomes[name] = "failed"
        self._emit(name, "failed", f"the job did not start again after {RELAUNCH_ATTEMPTS} attempts")

    async def _relaunch(self, backend: Backend, row: Instance) -> int | None:
        """The job relaunched on every worker at once, as every recovery relaunches one
        (``JobLauncher.relaunch_members``); the step worker 0 resumed from."""
        workers = backend.worker_rows(row)
        if not workers:
            raise GcptuiError(f"{row.name} has no workers up yet")
        runner = WorkerJobRunner(self.services.config)
        runner.prepare(row.name, workers)  # each worker's job: [job] with its rank and the others' addresses
        launcher = JobLauncher(self.services, jobs=runner, resume_timeout=self.resume_timeout)
        point = await launcher.relaunch_members(
            workers, lambda kind, detail: self._emit(row.name, kind, detail), fence=self.fence
        )
        return point.step
