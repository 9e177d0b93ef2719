"""``gcptui sync``: a full sync with a progress bar, then one line per change batch while following."""

from __future__ import annotations

import argparse
import asyncio
import sys

from rich.console import Console
from rich.markup import escape

from gcptui.remote.models import Instance
from gcptui.remote.services import Services
from gcptui.remote.sync import BatchApplied, SyncSession
from gcptui.tui.cli.common import with_services
from gcptui.tui.cli.sync_view import SyncView


async def sync_before_job(services: Services, instances: list[Instance]) -> None:
    """The barrier of ``job start|restart``: each VM holds the current tree before the job runs."""
    sessions, relay = services.sync_sessions(instances)
    for instance in instances:
        print(f"sync {services.sync_line(instance)}", file=sys.stderr, flush=True)
    try:
        # complete: a failed operation (a file the VM refused) stops the job from starting too.
        await asyncio.gather(*(s.full_sync(complete=True) for s in sessions))
    finally:
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
        if relay is not None:
            relay.close()


def run_sync(args: argparse.Namespace) -> int:
    console = Console(stderr=True, soft_wrap=True)
    view: SyncView | None = None  # once the machines are known: what each got, for a Ctrl-C

    async def body(services: Services) -> int:
        nonlocal view
        instances = (
            await services.machines(args.names, running=True) if args.names else await services.reachable()
        )
        if not instances:
            console.print("nothing to sync to: no running VM and no static host (see `gcptui ls`)")
            return 1
        fleet, relay = services.sync_sessions(instances)  # one upload for all when they can share it
        sessions = {i.name: s for i, s in zip(instances, fleet, strict=True)}
        for instance in instances:  # what goes where, before anything moves
            console.print(services.sync_line(instance), highlight=False, markup=False)
        view = SyncView(console, list(sessions), once=args.once)
        with view.progress:
            for session in sessions.values():
                session.subscribe(view.on_event)
            work = [(s.full_sync() if args.once else s.follow()) for s in sessions.values()]
            try:
                results = await _gather_closing(list(sessions.values()), work)
            finally:
                if relay is not None:
                    relay.close()
        failed: list[tuple[str, object]] = [
            (name, r) for name, r in zip(sessions, results, strict=True) if isinstance(r, BaseException)
        ]
        failed += [
            (name, f"{r.failed} operation{'s' if r.failed != 1 else ''} failed: the VM is not in sync")
            for name, r in zip(sessions, results, strict=True)
            if isinstance(r, BatchApplied) and r.failed
        ]
        for name, error in failed:
            console.print(f"[red]✗[/] {escape(f'{name}: {error}')}", highlight=False)  # [gcp] is text
        if args.once and not failed:
            relayed = sum(r.relayed for r in results if isinstance(r, BatchApplied))
            via = f" ({relayed} files machine-to-machine from {relay.name})" if relay and relayed else ""
            console.print(f"[green]✓[/] {len(sessions)} in sync{via}", highlight=False)
        return 1 if failed else 0

    try:
        return with_services(args, body)
    except KeyboardInterrupt:
        if view is None:  # still listing the machines
            console.print("interrupted: nothing was sent", highlight=False, markup=False)
            return 130
        line = view.interrupted(getattr(args, "config", None), list(args.names or []))
        console.print(line, highlight=False, markup=False)
        return 130


async def _gather_closing(sessions: list[SyncSession], work: list) -> list[object]:  # type: ignore[type-arg]
    try:
        return await asyncio.gather(*work, return_exceptions=True)
    finally:
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
