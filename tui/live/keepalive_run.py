"""The TUI's keep-alive: ``KeepAlive`` with its notice watchers and, with ``[autostop]``, the
auto-stopper, run until cancelled (the app runs it as a worker)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gcptui.remote.config import Config
from gcptui.remote.keepalive.autostop import AutoStopper
from gcptui.remote.keepalive.recovery import KeepAlive, RecoveryEvent
from gcptui.remote.services import Services


async def run_keepalive(
    services: Services,
    config: Config,
    on_event: Callable[[RecoveryEvent], None],
    started: Callable[[KeepAlive, AutoStopper | None], None],
) -> None:
    """Watch for preemptions and recover: every Spot VM from the start when ``[keepalive] enabled``,
    else none until switched on per VM. ``started`` hears the objects once they exist."""
    from gcptui.remote.keepalive.relaunch import build_keepalive
    from gcptui.remote.keepalive.watch import NoticeWatchers

    await asyncio.to_thread(services.fleet.reader)  # google-auth's import, off the UI thread
    names: set[str] | None = None if config.keepalive.enabled else set()
    keepalive = build_keepalive(services, names=names, on_event=on_event)
    watchers = NoticeWatchers(services, keepalive)
    keepalive.on_poll(watchers.track)
    autostopper: AutoStopper | None = None
    if config.autostop.active:
        autostopper = AutoStopper(services, config.autostop, keepalive)
        keepalive.on_poll(autostopper.track)
    started(keepalive, autostopper)
    try:
        await keepalive.run()
    finally:
        await watchers.close()
        if autostopper is not None:
            await autostopper.close()
        await keepalive.close()
