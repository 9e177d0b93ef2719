"""``gcptui job``, ``logs`` and ``gpu``: commands that act on machines over SSH."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.text import Text

from gcptui.remote.jobs.protocol import JobStatus, log_path
from gcptui.remote.safe_text import one_line
from gcptui.remote.services import Services
from gcptui.tui.cli.common import with_services
from gcptui.tui.cli.tables import print_table

STATE_STYLES = {"running": "bold green", "exited": "cyan", "killed": "yellow", "none": "dim"}


JOB_HEADERS = ("Name", "State", "PID", "Exit", "Started", "Command")


def job_rows(statuses: list[JobStatus]) -> list[list[str | Text]]:
    rows: list[list[str | Text]] = []
    for s in statuses:
        # Every field comes from files on the VM: plain Text (never markup), sanitized.
        state = s.state + (f" ({s.detail})" if s.detail else "")
        rows.append([
            Text(one_line(s.name)), Text(one_line(state), STATE_STYLES.get(s.state, "")), str(s.pid or "-"),
            "-" if s.exit_code is None else str(s.exit_code), Text(one_line(s.started_at or "-")),
            Text(one_line(s.command or "-")),
        ])  # fmt: skip
    return rows


def run_job(args: argparse.Namespace) -> int:
    async def body(services: Services) -> int:
        if args.action in ("start", "restart") and not services.config.job.command.strip():
            raise_usage(
                "[job].command is empty: set the training command in gcptui.toml ([job] command = ...)"
            )
        if args.names:
            instances = await services.resolve(args.names, running=True)
        elif args.action == "status":
            instances = await services.reachable()
        else:
            raise_usage(f"job {args.action} needs at least one NAME (see `gcptui ls`)")
        if args.action in ("start", "restart") and not args.no_sync:
            from gcptui.tui.cli.sync import sync_before_job

            await sync_before_job(services, instances)  # the VM holds the current tree first
        results = await services.jobs.run_all(args.action, [services.target(i) for i in instances])
        ok = [r.value for r in results if r.ok and r.value is not None]
        errors = Console(stderr=True, soft_wrap=True)
        for result in results:
            if not result.ok:
                message = str(result.error)
                prefix = "" if message.startswith(result.name) else f"{result.name}: "
                errors.print("[red]✗[/]", Text(one_line(f"{prefix}{message}")), highlight=False)
        if args.json:
            json.dump([s.to_json() for s in ok], sys.stdout, indent=2)
            sys.stdout.write("\n")
        elif ok:
            print_table(JOB_HEADERS, job_rows(ok))  # plain tab-separated rows when piped
        return 0 if len(ok) == len(results) else 1

    return with_services(args, body)


def run_logs(args: argparse.Namespace) -> int:
    from gcptui.tui.cli.logs import run_logs as print_logs

    async def body(services: Services) -> int:
        paths = (log_path(), *services.config.logs.files)
        if args.raw and (len(args.names) > 1 or len(paths) > 1):
            raise_usage(
                "--raw prints one file's bytes exactly: give one NAME (and no [logs] files), "
                "or leave --raw out to merge several sources line by line"
            )
        instances = await services.resolve(args.names, running=True)
        lines = args.n if args.n is not None else services.config.logs.history_lines
        return await print_logs(
            {i.name: services.follow(i) for i in instances},
            paths,
            follow=args.f,
            lines=lines,
            raw=True if args.raw else None,
        )

    return with_services(args, body)


def run_gpu(args: argparse.Namespace) -> int:
    from gcptui.tui.cli.logs import run_gpu as print_gpu

    async def body(services: Services) -> int:
        instances = await services.resolve(args.names, running=True)
        return await print_gpu(
            {i.name: services.follow(i) for i in instances}, json_output=args.json, once=args.once
        )

    return with_services(args, body)


def raise_usage(message: str) -> None:
    from gcptui.remote.errors import ConfigError

    raise ConfigError(message)
