"""The one keep-alive service: built here for the TUI, `gcptui keepalive`, sweeps and the keeper alike.

``KeepAlive`` (the one recovery engine, over every kind's rows: detection and recovery, with failover,
idle restarts and the job ledger), the notice watchers that tell it of a preemption before the API does, and, with ``[autostop]``, the
auto-stopper that runs after each poll. With ``[storage] bucket`` set, the lease (``lease_gate.py``)
decides once per poll whether this keep-alive or another one (the keeper, ``gcptui keeper``)
recovers: one actor per recovery. The faces differ only in the arguments they pass.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gcptui.remote.keepalive.autostop import AutoStopper
from gcptui.remote.keepalive.known_keepers import KnownKeepers
from gcptui.remote.keepalive.lease import DEFAULT_TTL, Lease, lease_key
from gcptui.remote.keepalive.lease_gate import (
    KeeperStatus,
    LeaseGate,
    Role,
    Standing,
    holder_name,
    standing_listener,
)
from gcptui.remote.keepalive.notify import WebhookNotifier
from gcptui.remote.keepalive.recovery import KeepAlive, RecoveryEvent
from gcptui.remote.keepalive.relaunch import JobLauncher, build_keepalive
from gcptui.remote.keepalive.watch import NoticeWatchers
from gcptui.remote.services import Services


@dataclass
class KeepAliveService:
    """A running keep-alive's parts; ``run()`` until cancelled, then ``close()``."""

    keepalive: KeepAlive
    watchers: NoticeWatchers | None
    autostopper: AutoStopper | None
    notifier: WebhookNotifier | None = None  # [notify] webhook: each recovery's outcome POSTed
    gate: LeaseGate | None = None  # the lease, with [storage] bucket: who recovers

    async def run(self) -> None:
        await self.keepalive.run()

    async def close(self) -> None:
        if self.notifier is not None:
            await asyncio.to_thread(self.notifier.close)
        if self.watchers is not None:
            await self.watchers.close()
        if self.autostopper is not None:
            await self.autostopper.close()
        await self.keepalive.close()
        if self.gate is not None:
            await asyncio.to_thread(self.gate.close)  # the lease given back: the other side need not wait


def default_lease_key_path() -> Path:
    """Where the lease's signing key lives: the user state dir (``GCPTUI_STATE_DIR`` overrides), never
    the project tree; ``keeper deploy`` copies it to the keeper's own state dir."""
    import platformdirs

    override = os.environ.get("GCPTUI_STATE_DIR")
    base = Path(override).expanduser() if override else platformdirs.user_state_path("gcptui")
    return base / "keeper" / "lease.key"


def known_keepers() -> KnownKeepers:
    """The buckets this laptop knows a keeper for (``known_keepers.py``), beside the lease key."""
    return KnownKeepers(default_lease_key_path().with_name("known-keepers.json"))


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
    lease: Role | None = "laptop",
    lease_ttl: float = DEFAULT_TTL,
    keeper_name: str | None = None,
) -> KeepAliveService:
    """Keep-alive over ``names`` (None: every Spot row of every kind; an empty set: none until switched
    on per row).

    ``notices``: VM notice watchers (a sweep's VMs run trials in job slots the watchers do not
    follow); ``autostop``: the auto-stopper when ``[autostop]`` is active (over ``autostop_names``,
    default every running VM); ``tuning`` overrides ``KeepAlive``'s timings (``poll_seconds``, ...).
    The rest goes to ``build_keepalive``.

    ``lease``: this keep-alive's role in the lease when ``[storage] bucket`` is set (``"laptop"`` defers
    to a live keeper, ``"keeper"`` is the keeper), ``lease_ttl`` seconds by this process's own clock
    before a silent holder counts as gone; None, or a ``launcher`` of the caller's own (a sweep resumes
    trials, which the keeper does not know how to), recovers without asking anyone; so does
    ``[keepalive] lease = false``.
    """
    notifier: WebhookNotifier | None = None
    if services.config.notify.webhook:
        notifier = WebhookNotifier(services.config.notify.webhook)
        on_event = _both(on_event, _own(notifier))
    gate: LeaseGate | None = None
    bucket = services.config.storage.bucket
    if lease is not None and bucket and launcher is None and services.config.keepalive.lease:
        # The engine's own lists (its recoveries in flight, what it watches), read once it exists.
        gate = _gate(services, lambda: keepalive, lease, lease_ttl, keeper_name)
    keepalive = build_keepalive(
        services, names=names, on_event=on_event, recover_unwatched=recover_unwatched, launcher=launcher,
        check_jobs=check_jobs, lease=gate, **dict(tuning or {}),  # type: ignore[arg-type]  # timings only: floats
    )  # fmt: skip
    if gate is not None and notifier is not None:
        keepalive.on_poll(standing_listener(gate, _standing_posted(notifier)))
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
    return KeepAliveService(keepalive, watchers, autostopper, notifier, gate)


def _gate(
    services: Services,
    engine: Callable[[], KeepAlive],
    role: Role,
    ttl: float,
    name: str | None,
) -> LeaseGate:
    """The lease the engine is built with (``KeepAlive(lease=...)``: asked each poll, checked again
    before each relaunch); it lists the engine's recoveries in flight (a successor that takes the
    lease over finishes them: ``adopt``) and the rows it watches."""
    bucket = services.config.storage.bucket
    key = lease_key(default_lease_key_path())

    def in_flight() -> list[str]:
        keepalive = engine()
        return [m.name for m in keepalive.machines.values() if m.busy] + keepalive.taking_over()

    def watched() -> list[str]:
        keepalive = engine()
        return [i.name for i in keepalive.instances() if keepalive.watched(i)]

    return LeaseGate(
        Lease(bucket, holder_name(role, name), key, ttl=ttl), KeeperStatus(bucket, key, ttl=ttl), role,
        in_flight=in_flight, watched=watched, known=known_keepers() if role == "laptop" else None,
    )  # fmt: skip


def _both(
    first: Callable[[RecoveryEvent], None] | None, second: Callable[[RecoveryEvent], None]
) -> Callable[[RecoveryEvent], None]:
    def both(event: RecoveryEvent) -> None:
        if first is not None:
            first(event)
        second(event)

    return both


# The standings a user must hear of while nobody watches: recovery paused, or running without the lease.
_POSTED = frozenset({"paused", "unleased"})


def _standing_posted(notifier: WebhookNotifier) -> Callable[[Standing], None]:
    """POST the lease's standing when it enters (or leaves) one of ``_POSTED``: once per change."""
    last: list[str] = []

    def post(standing: Standing) -> None:
        before = last[0] if last else None
        last[:] = [standing.kind]
        if before != standing.kind and (standing.kind in _POSTED or before in _POSTED):
            notifier.lease(standing.kind, standing.text)

    return post


def _own(notifier: WebhookNotifier) -> Callable[[RecoveryEvent], None]:
    """The notifier for this keep-alive's own events: the keeper's, mirrored here, it POSTs itself."""
    from gcptui.remote.keepalive.lease_gate import KEEPER_PREFIX

    def own(event: RecoveryEvent) -> None:
        if not event.detail.startswith(KEEPER_PREFIX.strip()):
            notifier(event)

    return own
