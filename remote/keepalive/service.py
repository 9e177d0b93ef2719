"""The one keep-alive service: built here for the TUI, `gcptui keepalive` and sweeps alike.

``KeepAlive`` (detection and recovery, with failover, idle restarts and the job ledger), the VM
notice watchers that tell it of a preemption before the API does, and, with ``[autostop]``, the
auto-stopper that runs after each poll. The three faces differ only in the arguments they pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from gcptui.remote.compute.registry import FLEET_SOURCE_KINDS
from gcptui.remote.keepalive.autostop import AutoStopper
from gcptui.remote.keepalive.notify import WebhookNotifier
from gcptui.remote.keepalive.recovery import KeepAlive, RecoveryEvent
from gcptui.remote.keepalive.relaunch import JobLauncher, build_keepalive
from gcptui.remote.keepalive.rows import RowKeepAlive
from gcptui.remote.keepalive.watch import NoticeWatchers
from gcptui.remote.services import Services


@dataclass
class KeepAliveService:
    """A running keep-alive's parts; ``run()`` until cancelled, then ``close()``."""

    keepalive: KeepAlive
    watchers: NoticeWatchers | None
    autostopper: AutoStopper | None
    rows: RowKeepAlive | None = None  # the other kinds of compute (TPU nodes), over the seam
    notifier: WebhookNotifier | None = None  # [notify] webhook: each recovery's outcome POSTed

    async def run(self) -> None:
        if self.rows is None:
            await self.keepalive.run()
            return
        await asyncio.gather(self.keepalive.run(), self.rows.run())

    async def close(self) -> None:
        if self.notifier is not None:
            await asyncio.to_thread(self.notifier.close)
        if self.rows is not None:
            await self.rows.close()
        if self.watchers is not None:
            await self.watchers.close()
        if self.autostopper is not None:
            await self.autostopper.close()
        await self.keepalive.close()


def build_service(
    services: Services,
    *,
    names: Iterable[str] | None = None,
    on_event: Callable[[RecoveryEvent], None] | None = None,
    recover_unwatched: bool = False,
    launcher: JobLauncher | None = None,
    check_jobs: bool = True,
    notices: bool = True,
    autostop: bool = True,
    autostop_names: Iterable[str] | None = None,
    tuning: Mapping[str, float] | None = None,
    other_kinds: bool = True,
) -> KeepAliveService:
    """Keep-alive over ``names`` (None: every Spot VM; an empty set: none until switched on per VM).

    ``notices``: VM notice watchers (a sweep's VMs run trials in job slots the watchers do not
    follow); ``autostop``: the auto-stopper when ``[autostop]`` is active (over ``autostop_names``,
    default every running VM); ``tuning`` overrides ``KeepAlive``'s timings (``poll_seconds``, ...).
    The rest goes to ``build_keepalive``. ``other_kinds``: also keep the rows of the other kinds of
    compute alive (a TPU node's workers: ``rows.RowKeepAlive``) when the config has any.
    """
    notifier: WebhookNotifier | None = None
    if services.config.notify.webhook:
        notifier = WebhookNotifier(services.config.notify.webhook)
        on_event = _both(on_event, notifier)
    keepalive = build_keepalive(
        services, names=names, on_event=on_event, recover_unwatched=recover_unwatched, launcher=launcher,
        check_jobs=check_jobs, **dict(tuning or {}),  # type: ignore[arg-type]  # timings only: floats
    )  # fmt: skip
    watchers: NoticeWatchers | None = None
    if notices:
        watchers = NoticeWatchers(services, keepalive)
        keepalive.on_poll(watchers.track)
    autostopper: AutoStopper | None = None
    settings = services.config.autostop
    if autostop and settings.active:
        scope = list(autostop_names) if autostop_names else None
        autostopper = AutoStopper(services, settings, keepalive, names=scope)
        keepalive.on_poll(autostopper.track)
    rows: RowKeepAlive | None = None
    if other_kinds and any(b.kind not in FLEET_SOURCE_KINDS for b in services.compute):
        timings = dict(tuning or {})
        rows = RowKeepAlive(
            services, names=names, on_event=on_event, poll_seconds=timings.get("poll_seconds"),
            backoff_base=timings.get("backoff_base", 1.0),
        )  # fmt: skip
    return KeepAliveService(keepalive, watchers, autostopper, rows, notifier)


def _both(
    first: Callable[[RecoveryEvent], None] | None, second: Callable[[RecoveryEvent], None]
) -> Callable[[RecoveryEvent], None]:
    def both(event: RecoveryEvent) -> None:
        if first is not None:
            first(event)
        second(event)

    return both
