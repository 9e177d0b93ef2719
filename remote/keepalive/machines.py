"""What keep-alive knows of each machine, as one record with an explicit phase.

A machine moves between these phases, and only through the methods below:

    WATCHING ──suspect()──► SUSPECT ──calm() (time up)──► WATCHING
        │                      │
        └──────start()─────────┴──► RECOVERING ──finished()──► WATCHING
                                        │  ▲
                      (stopped again after up()) supersede() + start(): a new recovery
                                        │
    give_up() (max_restarts) ──► GAVE_UP ──reset() / enable()──► WATCHING

``disabled`` is the user's switch beside the phase (``disable()`` ends a suspicion and hands back
the recovery in flight to cancel; a relaunch by hand still works on a disabled machine).

SUSPECT means "polled fast until ``suspect_until``" (a preemption notice, a dropped connection, a
VM seen STOPPING); RECOVERING that a recovery task runs (``busy`` while it has not ended, even after
a ``disable()`` cancelled it; ``up`` once the recovery brought the VM back, so that a stop seen
from then on is a new preemption, whose recovery supersedes this one); GAVE_UP that ``max_restarts`` was reached. Beside the phase, the
record keeps the machine as last listed, the job last seen on it, the settings to recreate it and
the runs already left stopped.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from gcptui.remote.models import Instance

if TYPE_CHECKING:
    from gcptui.remote.jobs.protocol import JobStatus

Run = tuple[str, str | None, str | None]  # (name, instance id, last start): one run of a VM


class Phase(StrEnum):
    WATCHING = "watching"
    SUSPECT = "suspect"
    RECOVERING = "recovering"
    GAVE_UP = "gave-up"


def run_of(instance: Instance) -> Run:
    """One run of a VM: a new start (or a recreated VM) is a new run, whose stop is decided anew."""
    return instance.name, instance.instance_id, instance.last_start


@dataclass
class Machine:
    """Keep-alive's record of one machine."""

    name: str
    phase: Phase = Phase.WATCHING
    disabled: bool = False  # the user switched keep-alive off for it
    instance: Instance | None = None  # as last listed (or as recovered); None once gone for good
    job: JobStatus | None = None  # the job's last state seen, before a preemption
    record: Instance | None = None  # a VM whose disk does not outlive a stop, remembered by its backend
    restarts: int = 0  # recoveries started (max_restarts bounds them)
    suspect_until: float | None = None  # SUSPECT: polled fast until this loop time
    dropped: bool = False  # SUSPECT because its connection dropped (detected_by "lost")
    task: asyncio.Task[None] | None = None  # the recovery in flight
    up: Run | None = None  # the run the recovery in flight brought back: its stop is a new preemption
    left: set[Run] = field(default_factory=set)  # stops decided by leaving the VM stopped
    # The stopped run whose start (or insert) was reported failed: GCE may have gone on with it (a 503
    # on the operation's wait), and a later run found up is that recovery's, its job to relaunch.
    unconfirmed: Run | None = None
    # The job's notice last told (its start, the notice's time): a watcher started anew on a VM still
    # up reads the same notice again, and must not tell it again (the campaign's seed 12: 10,523 times).
    noticed: tuple[str | None, str | None] | None = None

    @property
    def busy(self) -> bool:
        """A recovery task has not ended yet."""
        return self.task is not None and not self.task.done()

    # -- transitions ---------------------------------------------------------------------------

    def suspect(self, until: float, *, dropped: bool = False) -> bool:
        """WATCHING or SUSPECT -> SUSPECT until ``until``; True when it was not suspect before.
        A machine recovering or given up is not made suspect."""
        if self.phase not in (Phase.WATCHING, Phase.SUSPECT):
            return False
        fresh = self.phase is Phase.WATCHING
        self.phase, self.suspect_until = Phase.SUSPECT, until
        self.dropped = self.dropped or dropped
        return fresh

    def calm(self, now: float) -> None:
        """SUSPECT -> WATCHING once its time is up."""
        if self.phase is Phase.SUSPECT and (self.suspect_until is None or self.suspect_until <= now):
            self._unsuspect()
            self.phase = Phase.WATCHING

    def end_suspicion(self) -> bool:
        """A recovery is being decided: the suspicion ends; True when it came from a dropped connection."""
        dropped = self.dropped
        self._unsuspect()
        if self.phase is Phase.SUSPECT:
            self.phase = Phase.WATCHING
        return dropped

    def start(self, task: asyncio.Task[None]) -> None:
        """-> RECOVERING with ``task``; ``finished`` is called when the task ends."""
        self.phase, self.task, self.unconfirmed = Phase.RECOVERING, task, None
        task.add_done_callback(lambda _task: self.finished(task))

    def finished(self, task: asyncio.Task[None]) -> None:
        """RECOVERING -> WATCHING when ``task`` (the current one) ended."""
        if self.task is task:
            self.task, self.up = None, None
            if self.phase is Phase.RECOVERING:
                self.phase = Phase.WATCHING

    def running(self, task: asyncio.Task[None] | None, instance: Instance) -> None:
        """The recovery ``task`` (when current) brought the VM back: this run of it."""
        if task is not None and self.task is task:
            self.up = run_of(instance)

    def interruptible(self) -> bool:
        """No recovery in flight, or one whose VM is back up in the run last listed: a stop seen
        now is a new one (a listing older than the recovery's start still shows the previous run)."""
        if not self.busy:
            return True
        return self.up is not None and self.instance is not None and run_of(self.instance) == self.up

    def supersede(self) -> asyncio.Task[None] | None:
        """Preempted again after the recovery brought it back: returns that recovery, no longer the
        current one, for the caller to cancel before ``start`` begins the next (still RECOVERING)."""
        task = self.task if self.busy and self.up else None
        if task is not None:
            self.task, self.up = None, None
        return task

    def give_up(self) -> None:
        """-> GAVE_UP: max_restarts reached; only ``reset`` or ``enable`` bring it back."""
        self.phase = Phase.GAVE_UP

    def reset(self) -> None:
        """A relaunch by hand: GAVE_UP -> WATCHING, and the restart count starts over."""
        if self.phase is Phase.GAVE_UP:
            self.phase = Phase.WATCHING
        self.restarts = 0

    def disable(self) -> asyncio.Task[None] | None:
        """The user takes over: no suspicion; returns the recovery in flight, for the caller to cancel."""
        self.disabled = True
        if self.phase is Phase.SUSPECT:
            self.phase = Phase.WATCHING
        self._unsuspect()
        return self.task if self.busy else None

    def enable(self) -> None:
        """Watched again: GAVE_UP -> WATCHING, and the restart count starts over."""
        self.disabled = False
        self.reset()

    def _unsuspect(self) -> None:
        self.suspect_until, self.dropped = None, False
