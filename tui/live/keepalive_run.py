"""The TUI's keep-alive (for any config with a kind that can bring rows back): ``KeepAlive`` with its notice watchers and, with ``[autostop]``, the
auto-stopper, run until cancelled (the app runs it as a worker). With ``[storage] bucket``, the lease's
standing (who recovers: this laptop or the keeper) is told after each poll that changes it."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable

from gcptui.remote.config import Config
from gcptui.remote.keepalive.lease_gate import Standing, standing_listener
from gcptui.remote.keepalive.recovery import RecoveryEvent
from gcptui.remote.keepalive.service import KeepAliveService
from gcptui.remote.services import Services


async def run_keepalive(
    services: Services,
    config: Config,
    on_event: Callable[[RecoveryEvent], None],
    started: Callable[[KeepAliveService], None],
    on_standing: Callable[[Standing], None] | None = None,
) -> None:
    """Watch for preemptions and recover: every Spot VM from the start when ``[keepalive] enabled``,
    else none until switched on per VM. ``started`` hears the objects once they exist; ``on_standing``
    the lease's standing whenever its words change (never without a lease)."""
    from gcptui.remote.keepalive.service import build_service

    await asyncio.to_thread(importlib.import_module, "google.auth.transport.requests")  # off the UI thread
    names: set[str] | None = None if config.keepalive.enabled else set()
    service = build_service(services, names=names, on_event=on_event)
    if service.gate is not None and on_standing is not None:
        service.keepalive.on_poll(standing_listener(service.gate, on_standing))
    started(service)
    try:
        await service.run()
    finally:
        await service.close()
