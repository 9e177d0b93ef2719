"""``gcptui keepalive [NAME...]``: the headless preemption watcher, for a tmux on a bastion host.

One log line per event (``HH:MM:SS.mmm NAME: kind - detail``) and a summary line per recovery,
until Ctrl-C or SIGTERM. Without names it watches every Spot row (VMs, TPU nodes, GKE workloads). With ``[storage]
bucket``, a ``keep-alive lease: ...`` line each time the lease changes hands (this laptop, the keeper).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable
from datetime import datetime

from gcptui.remote.aio import cancel_and_wait
from gcptui.remote.compute.backend import Capability
from gcptui.remote.config import load_config
from gcptui.remote.errors import ConfigError
from gcptui.remote.keepalive.lease_gate import Standing, standing_listener
from gcptui.remote.keepalive.recovery import KeepAlive, RecoveryEvent, Timeline, recoverable
from gcptui.remote.keepalive.service import build_service
from gcptui.remote.services import Services


def summary(timeline: Timeline) -> str:
    """One line per finished recovery: when it was preempted, detected, running again, and what was lost."""

    def after(moment: datetime | None) -> str:
        return plus(
            (moment - timeline.detected_at).total_seconds() if moment and timeline.detected_at else None
        )

    def plus(seconds: float | None) -> str:
        return "-" if seconds is None else f"+{seconds:.1f}s"

    start = timeline.preempted_at or timeline.detected_at
    parts = [
        f"preempted {start.astimezone().strftime('%H:%M:%S') if start else '?'}",
        f"detected {plus(timeline.detection_seconds)} by {timeline.detected_by or '?'}",
        f"restarted {after(timeline.restarted_at)}", f"running {after(timeline.running_at)}",
        f"job started {after(timeline.started_at)}",
        f"resumed at step {timeline.resumed_step if timeline.resumed_step is not None else '?'}",
        f"{timeline.steps_lost if timeline.steps_lost is not None else '?'} steps lost",
    ]  # fmt: skip
    return f"{timeline.name}: {timeline.outcome_text}: " + ", ".join(parts)


def said_once(write: Callable[[str], None]) -> Callable[[Standing], None]:
    """A line each time the lease changes hands (``Standing.kind``), not each time a count in its
    words moves: ``keep-alive lease: keeper holds the lease``."""
    last: list[str] = []

    def say(standing: Standing) -> None:
        if last != [standing.kind]:
            last[:] = [standing.kind]
            write(f"keep-alive lease: {standing.text}")

    return say


async def watched_names(services: Services, names: list[str]) -> list[str]:
    """The rows ``names`` stand for, checked: a row keep-alive can bring back (a VM, a TPU node, a
    GKE workload); a worker's ``ROW/WORKER`` (a pod, a TPU worker) stands for its row, which is what is
    recovered. One line naming what keep-alive cannot recover, or what nothing stops: a row not on
    Spot whose provider records no maintenance stop (GCE does: host maintenance stops GPU VMs)."""
    rows = await services.resolve(list(dict.fromkeys(name.split("/", 1)[0] for name in names)))
    fixed: list[str] = []
    on_demand: list[str] = []
    for row in rows:
        if not recoverable(services.compute, row):
            fixed.append(row.name)
        elif not (
            services.compute.can(row, Capability.PREEMPTIBLE)
            or services.compute.can(row, Capability.STOPS_RECORDED)
        ):
            on_demand.append(row.name)
    if fixed:
        raise ConfigError(
            f"nothing for keep-alive to recover (not a VM the cloud stops): {', '.join(fixed)} (see `gcptui ls`)"
        )
    if on_demand:
        raise ConfigError(
            f"nothing preempts {', '.join(on_demand)} (not on Spot): keep-alive recovers Spot TPU nodes "
            "and GKE workloads on Spot nodes"
        )
    return [row.name for row in rows]


async def keep_alive(
    services: Services,
    names: list[str] | None,
    write: Callable[[str], None],
    stop: asyncio.Event,
    recover_unwatched: bool = False,
    **options: float,
) -> int:
    """Watch and recover until ``stop`` is set; ``write`` gets one line per event. Returns 0."""
    if names:
        names = await watched_names(services, names)
    keepalive: KeepAlive | None = None

    def on_event(event: RecoveryEvent) -> None:
        write(event.line())
        if (
            event.kind in ("resumed", "gave_up")
            and keepalive is not None
            and event.name in keepalive.timelines
        ):
            write(summary(keepalive.timelines[event.name]))

    service = build_service(
        services, names=names or None, on_event=on_event, recover_unwatched=recover_unwatched,
        autostop_names=names or None, tuning=options,
    )  # fmt: skip
    keepalive, watchers = service.keepalive, service.watchers
    if service.gate is not None:
        keepalive.on_poll(standing_listener(service.gate, said_once(write)))
    autostop = services.config.autostop
    if service.autostopper is not None:
        write(
            f"auto-stop: {', '.join(names) if names else 'every running VM'}: "
            + (f"idle {autostop.idle_minutes:g} min -> stop" if autostop.idle_minutes else "no idle rule")
            + f"; job exit 0 -> {autostop.after_job}; {autostop.warn_seconds:g}s warning"
        )
    settings = services.config.keepalive
    write(
        f"keep-alive: watching {', '.join(names) if names else 'every Spot VM'}; polling every "
        f"{keepalive.poll_seconds:g}s, at most {keepalive.max_restarts} restarts per VM; VM notices "
        f"{'on' if watchers is not None and watchers.notices else 'off (no gcptui.remote.jobs.watch)'}"
        f"{'' if settings.enabled else '; [keepalive] enabled = false only affects the TUI'}; Ctrl-C stops"
    )
    runner = asyncio.create_task(service.run(), name="keep-alive")  # every kind's rows
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({runner, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if runner.done():
            runner.result()  # a bug in the loop: let it surface
    finally:
        await cancel_and_wait(runner, stopper)
        await service.close()
    write("keep-alive: stopped")
    return 0


def run_keepalive(args: argparse.Namespace) -> int:
    """The ``keepalive`` subcommand: ``args.names`` (may be empty), ``args.config``."""

    def write(line: str) -> None:
        print(line, flush=True)

    async def main() -> int:
        services = Services(load_config(getattr(args, "config", None)))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        try:
            names = list(args.names or [])
            recover = bool(getattr(args, "recover_unwatched", False))
            return await keep_alive(services, names, write, stop, recover_unwatched=recover)
        finally:
            await services.close()

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        print("keep-alive: stopped", file=sys.stderr)
        return 0
