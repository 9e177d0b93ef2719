"""Why a watched machine stopped, asked of its backend (``Backend.why_stopped_many``): a preemption,
host maintenance, a user's stop or delete.

Providers keep their records for a while only (GCE: completed operations for as little as an hour), so
"no record" does not mean "no preemption": keep-alive treats a Spot machine it saw running that stops
with nothing saying why as stopped for an unknown cause, unless a user's stop or delete is still recorded.
Each question is one batched call per kind for all the machines of a poll (GCE: one zone-operations
listing). Only rows whose provider records stops (``Capability.STOPS_RECORDED``) are asked the
questions that need a user's stop told apart: elsewhere only a recorded preemption counts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from gcptui.remote.compute.backend import Capability
from gcptui.remote.models import SOURCE_TITLES, Instance, State, StopCause
from gcptui.remote.safe_text import one_line

if TYPE_CHECKING:
    from gcptui.remote.compute.backend import Backend
    from gcptui.remote.keepalive.job_ledger import JobLedger

UNKNOWN_CAUSE = "GCE: stopped, cause unknown (no operation says why; a preemption's record may have expired)"
UNWATCHED_CAUSE = (
    "stopped while unwatched, its job running: cause unknown (a preemption's record may have expired)"
)


class Causes:
    """Asks the backend why watched machines stopped, remembering what it saw between polls.

    Keeps which machines were seen running since their last stop was explained (a stop with no
    record is "unknown" only for those, once per run) and the last start of on-demand ones (a new one
    after host maintenance means the provider restarted the machine itself).
    """

    def __init__(self, of: Callable[[Instance], Backend]) -> None:
        self.of = of  # the backend of a row (``Compute.of``)
        self._seen_running: set[str] = set()
        self._starts: dict[str, str | None] = {}  # lastStartTimestamp of watched on-demand VMs, as last seen
        self._reported: set[tuple[str, str | None]] = set()  # (name, last start) found stopped unwatched

    def saw_running(self, name: str) -> None:
        self._seen_running.add(name)

    def explained(self, name: str) -> None:
        """Its stop has a cause now: a later stop needs a new run to count as unexplained."""
        self._seen_running.discard(name)

    async def _stopped_by(self, rows: list[Instance], cause: StopCause) -> dict[str, datetime | None]:
        """The rows ``cause`` stopped since their last start, and when (one batched call)."""
        if not rows:
            return {}
        causes: Collection[StopCause] = (cause,)
        by_backend: dict[int, tuple[Backend, list[Instance]]] = {}
        for row in rows:
            backend = self.of(row)
            by_backend.setdefault(id(backend), (backend, []))[1].append(row)
        stopped: dict[str, datetime | None] = {}
        for backend, some in by_backend.values():
            found = await asyncio.to_thread(backend.why_stopped_many, some, causes=causes)
            stopped.update({name: stop.at for name, stop in found.items() if stop.cause is cause})
        return stopped

    def recorded(self, row: Instance) -> bool:
        """Whether ``row``'s provider records who stopped it (a user's stop is told from a preemption)."""
        return self.of(row).can(row, Capability.STOPS_RECORDED)

    def words(self, row: Instance) -> str:
        """The ``preempted`` step's words for a row the provider says a preemption stopped."""
        if not self.recorded(row):
            return f"{SOURCE_TITLES.get(row.source, row.source)} reads {one_line(row.status)}"
        cause = "a preemption" if row.spot else "host maintenance"
        return f"GCE: {'deleted' if row.state is State.DELETING else 'stopped'} by {cause}"

    async def preempted_since_last_start(self, candidates: list[Instance]) -> dict[str, datetime | None]:
        """Spot machines a preemption stopped, on-demand ones host maintenance stopped, since their last start."""
        found = await self._stopped_by([i for i in candidates if i.spot], StopCause.PREEMPTED)
        on_demand = [i for i in candidates if not i.spot]
        if on_demand:
            found.update(await self._stopped_by(on_demand, StopCause.HOST_MAINTENANCE))
        return found

    def started(self, instance: Instance) -> None:
        """Keep-alive itself started this VM: its new start is not GCE's restart after maintenance."""
        self._starts[instance.name] = instance.last_start

    async def restarted_by_gce(self, instance: Instance, *, check: bool) -> tuple[bool, datetime | None]:
        """Whether GCE restarted this running on-demand VM after host maintenance since the last poll
        (automaticRestart), and when; ``check`` False only records its start."""
        name, before = instance.name, self._starts.get(instance.name)
        self._starts[name] = instance.last_start
        if not check or before is None or before == instance.last_start or not self.recorded(instance):
            return False, None
        since = replace(instance, last_start=before)  # records after the start keep-alive saw
        found = await self._stopped_by([since], StopCause.HOST_MAINTENANCE)
        return (name in found), found.get(name)

    async def stopped_unwatched(self, candidates: list[Instance], ledger: JobLedger) -> list[Instance]:
        """Stopped VMs this process never saw running whose job the ledger saw running in their last
        run, with no user's stop or delete listed: "stopped while unwatched", reported once per run."""
        ran = [
            i for i in candidates
            if self.recorded(i) and i.name not in self._seen_running and (i.name, i.last_start) not in self._reported
            and ledger.ran_since_start(i.name, i.instance_id or "", i.last_start)
        ]  # fmt: skip
        if not ran:
            return []
        by_user = await self._stopped_by(ran, StopCause.USER)
        self._reported.update((i.name, i.last_start) for i in ran)
        return [i for i in ran if i.name not in by_user]

    async def unexplained(self, candidates: list[Instance]) -> list[Instance]:
        """Spot VMs seen running that stopped with no operation saying why, and no user's stop."""
        seen = [i for i in candidates if i.name in self._seen_running and self.recorded(i)]
        if not seen:
            return []
        by_user = await self._stopped_by(seen, StopCause.USER)
        for instance in seen:
            self._seen_running.discard(instance.name)  # decided once per run of the VM
        return [i for i in seen if i.name not in by_user]
