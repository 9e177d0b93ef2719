"""One job watch per machine, whoever in the process follows it.

The TUI's job column and keep-alive's notice watcher both follow the job on every machine they
watch. Each ``watch_job`` is one long-lived command on the machine and one channel to it, so two
followers would cost two of each per machine (128 remote processes for 64 VMs). ``JobWatches`` runs
one ``watch_job`` per machine (its name and where its channel reaches) and hands every event to each
follower. A follower that joins late first gets what a watch of its own would have said first: the
latest ``state``, the current run's ``preempted`` notice if it has one, and the ``lost`` of an
outage not over yet. The watch ends when its last follower leaves (the remote command with it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from gcptui.remote.compute.exec_channel import ExecChannel
from gcptui.remote.jobs.watch import JobEvent, watch_job

MAX_BACKLOG = 256  # events a slow follower may fall behind; beyond it, its oldest are dropped


class _Ended:
    """What a follower gets when the shared watch itself failed: the error, raised in the follower."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Shared:
    """One running ``watch_job`` and its followers' queues."""

    def __init__(self, channel: ExecChannel, name: str, remote_home: str | None) -> None:
        self.followers: list[asyncio.Queue[JobEvent | _Ended]] = []
        self.state: JobEvent | None = None  # the latest snapshot, for a follower that joins late
        self.outage: JobEvent | None = None  # the ``lost`` of an outage not over yet, likewise
        self.task = asyncio.create_task(self._run(channel, name, remote_home), name=f"job watch {name}")

    async def _run(self, channel: ExecChannel, name: str, remote_home: str | None) -> None:
        try:
            async for event in watch_job(channel, name, remote_home=remote_home):
                self._keep(event)
                for queue in self.followers:
                    _put(queue, event)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - each follower raises it, as its own watch would
            for queue in self.followers:
                _put(queue, _Ended(err))

    def _keep(self, event: JobEvent) -> None:
        if event.kind == "lost":
            self.outage = event
        elif event.kind == "state":
            self.state, self.outage = event, None

    def follow(self) -> asyncio.Queue[JobEvent | _Ended]:
        queue: asyncio.Queue[JobEvent | _Ended] = asyncio.Queue()
        # What a watch of its own would say first: the snapshot, then the notice it records (as
        # ``watch_job`` does for a notice from before it began), then an outage not over yet.
        state = self.state
        said = [state] if state is not None else []
        if state is not None and state.status is not None and state.status.preempted_at:
            said.append(JobEvent(state.name, "preempted", state.status, state.at))
        for event in [*said, *([self.outage] if self.outage is not None else [])]:
            _put(queue, event)
        self.followers.append(queue)
        return queue


def _put(queue: asyncio.Queue[JobEvent | _Ended], item: JobEvent | _Ended) -> None:
    if queue.qsize() >= MAX_BACKLOG:
        with contextlib.suppress(asyncio.QueueEmpty):
            queue.get_nowait()
    queue.put_nowait(item)


class JobWatches:
    """The process's job watches, shared per machine (``Services.job_watches``). ``remote_home``
    replaces ``$HOME`` on the machines, as in ``JobRunner`` (tests isolate runs with it)."""

    def __init__(self, remote_home: str | None = None) -> None:
        self.remote_home = remote_home
        self._shared: dict[tuple[str, str], _Shared] = {}

    def running(self) -> int:
        """How many machines have a watch running now."""
        return len(self._shared)

    async def watch(self, channel: ExecChannel, name: str) -> AsyncIterator[JobEvent]:
        """``watch_job``'s events for ``name``, from the one watch of that machine (started now when
        none runs) until the caller stops iterating."""
        key = (name, channel.where)
        shared = self._shared.get(key)
        if shared is None or shared.task.done():
            shared = self._shared[key] = _Shared(channel, name, self.remote_home)
        queue = shared.follow()
        try:
            while True:
                item = await queue.get()
                if isinstance(item, _Ended):
                    raise item.error
                yield item
        finally:
            shared.followers.remove(queue)
            if not shared.followers:
                if self._shared.get(key) is shared:
                    del self._shared[key]
                shared.task.cancel()

    async def close(self) -> None:
        """Stop every watch (their followers' iterations end with the process)."""
        tasks = [shared.task for shared in self._shared.values()]
        self._shared.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
