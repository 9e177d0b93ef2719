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
    from gcptui.remote.keepalive.service import build_service

    await asyncio.to_thread(services.fleet.reader)  # google-auth's import, off the UI thread
    names: set[str] | None = None if config.keepalive.enabled else set()
    service = build_service(services, names=names, on_event=on_event)
    started(service.keepalive, service.autostopper)
    try:
        await service.run()
    finally:
        await service.close()
