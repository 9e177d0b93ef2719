"""``gcptui sync``: a full sync with a progress bar, then one line per change batch while following."""

from __future__ import annotations

import argparse
import asyncio
import sys

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

from gcptui.remote.models import Instance
from gcptui.remote.services import Services
from gcptui.remote.sync import (
    BatchApplied,
    FullSyncProgress,
    SyncEvent,
    SyncSession,
    SyncStateChanged,
    SyncWarning,
)
from gcptui.tui.cli.common import with_services

PROBLEM_STATES = ("error", "reconnecting", "incomplete")


def human_bytes(count: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if count < 1000 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} GB"


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

    async def body(services: Services) -> int:
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
        with Progress(
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
            console=console, transient=not args.once,
        ) as progress:  # fmt: skip
            bars: dict[str, TaskID] = {name: progress.add_task(name, total=None) for name in sessions}
            said: set[str] = set()  # warnings about the local tree: every session has them, said once

            def on_event(event: SyncEvent) -> None:
                if isinstance(event, FullSyncProgress):
                    progress.update(
                        bars[event.name],
                        total=event.bytes_total,
                        completed=event.bytes_done,
                        description=f"{event.name} {event.files_done}/{event.files_total} files",
                    )
                elif isinstance(event, BatchApplied) and not event.full:
                    progress.console.print(
                        f"{event.name}: {event.files} file{'s' if event.files != 1 else ''}"
                        f"{f', {event.deleted} deleted' if event.deleted else ''}, "
                        f"{human_bytes(event.bytes)}, {event.ms:.0f} ms"
                    )
                elif isinstance(event, SyncWarning) and event.local:
                    if event.message not in said:
                        said.add(event.message)
                        progress.console.print(f"[yellow]![/] {escape(event.message)}")
                elif isinstance(event, SyncWarning):
                    progress.console.print(f"[yellow]![/] {escape(f'{event.name}: {event.message}')}")
                elif isinstance(event, SyncStateChanged) and event.state in PROBLEM_STATES:
                    progress.console.print(
                        f"[red]✗[/] {escape(f'{event.name}: {event.state}: {event.reason}')}"
                    )
                elif isinstance(event, SyncStateChanged) and event.state == "in_sync" and not args.once:
                    progress.update(bars[event.name], description=f"{event.name} in sync")

            for session in sessions.values():
                session.subscribe(on_event)
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

    return with_services(args, body)


async def _gather_closing(sessions: list[SyncSession], work: list) -> list[object]:  # type: ignore[type-arg]
    try:
        return await asyncio.gather(*work, return_exceptions=True)
    finally:
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
