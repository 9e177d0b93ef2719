"""``gcptui job``, ``logs`` and ``gpu``: commands that act on machines over their exec channels."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

from gcptui.remote.errors import GcptuiError
from gcptui.remote.jobs.protocol import JobStatus, log_path
from gcptui.remote.jobs.runner import HostResult, JobAlreadyRunningError, JobError, JobHost, JobRunner
from gcptui.remote.models import Instance
from gcptui.remote.safe_text import one_line
from gcptui.remote.services import Services, down_error
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
        # Vertex AI jobs: cancel, resubmit, read (tui/cli/vertex.py)
        if await vertex_names(services, args.names):
            from gcptui.tui.cli.vertex import vertex_job

            return await vertex_job(services, args)
        no_command = not services.config.job.command.strip()
        image = getattr(args, "image", None)
        if args.action == "restart" and (no_command or image) and services.config.gke:
            # A GKE workload's training is its containers' own command: its pods are recreated.
            workloads = await gke_rows(services, args.names)
            if workloads:
                return await gke_restart(services, workloads, image)
        if image:
            raise_usage("--image rolls a GKE workload (job restart WORKLOAD --image URI): name one")
        if args.action in ("start", "restart") and no_command:
            raise_usage(
                "[job].command is empty: set the training command in gcptui.toml ([job] command = ...)"
            )
        group_names = [n for n in args.names if services.config.group(n) is not None]
        names = [n for n in args.names if n not in group_names]
        instances = []
        if names:
            instances = await services.machines(names, running=True)
        elif args.action == "status" and not group_names:
            instances = await reachable_saying_the_rest(services)
        elif not group_names:
            raise_usage(f"job {args.action} needs at least one NAME (see `gcptui ls`)")
        results: list[HostResult[JobStatus]] = []
        if args.action in ("start", "restart") and not args.no_sync and instances:
            from gcptui.tui.cli.sync import sync_before_job

            held = await stop_before_sync(services.jobs, args.action, [services.reach(i) for i in instances])
            results = list(held.values())
            instances = [i for i in instances if i.name not in held]
            if instances:
                await sync_before_job(services, instances)  # the VM holds the current tree first
        # A TPU node's workers run one job together (each told its rank): the workers' own runner.
        workers = [i for i in instances if i.parent is not None]
        results += await services.jobs.run_all(
            args.action, [services.reach(i) for i in instances if i.parent is None]
        )
        results += await run_on_workers(services, args.action, workers)
        if args.action == "status" and services.config.gke:
            results = containers_own_jobs(services, instances, results)
        objects = [r.value.to_json() for r in results if r.ok and r.value is not None]
        for item in objects:  # a group's node carries its group however it was named (DESIGN's JSON)
            group = next((g.name for g in services.config.groups if item["name"] in g.vms), None)
            if group is not None:
                item["group"] = group
        rows = [r.value for r in results if r.ok and r.value is not None]
        summaries: list[JobStatus] = []
        for name in group_names:
            group_results, group_objects = await run_group_action(services, args, name)
            results += group_results
            objects += group_objects
            nodes = [r.value for r in group_results if r.ok and r.value is not None]
            rows += nodes
            if nodes and len(nodes) == len(group_results):
                summaries.append(JobStatus(name=f"{name} (group)", state=group_objects[0]["group_state"]))
        errors = Console(stderr=True, soft_wrap=True)
        for result in results:
            if not result.ok:
                message = str(result.error)
                prefix = "" if message.startswith(result.name) else f"{result.name}: "
                errors.print("[red]✗[/]", Text(one_line(f"{prefix}{message}")), highlight=False)
        if args.json:
            json.dump(objects, sys.stdout, indent=2)
            sys.stdout.write("\n")
        elif rows:
            print_table(JOB_HEADERS, job_rows([*rows, *summaries]))  # plain tab-separated rows when piped
        return 0 if all(r.ok for r in results) else 1

    return with_services(args, body)


def containers_own_jobs(
    services: Services, instances: list[Instance], results: list[HostResult[JobStatus]]
) -> list[HostResult[JobStatus]]:
    """A GKE pod where gcptui started no job runs its containers' own command: its state from the pod
    (not ``none`` while it trains), as the TUI's Job column reads it."""
    from dataclasses import replace

    from gcptui.remote.gke_workflows import container_job_of

    rows = {i.name: i for i in instances}
    return [
        replace(r, value=container_job_of(services.compute, rows[r.name], r.value))
        if r.value is not None and r.name in rows
        else r
        for r in results
    ]


async def run_group_action(
    services: Services, args: argparse.Namespace, name: str
) -> tuple[list[HostResult[JobStatus]], list[dict[str, Any]]]:
    """``job ACTION GROUP``: the action on every node; the results and the nodes' JSON objects."""
    from gcptui.remote.jobs.group import GroupJobRunner
    from gcptui.remote.jobs.group_control import group_json, run_group

    group = services.config.group(name)
    assert group is not None
    # A start or restart needs every node up (one line for a node that is down). Kill and status act
    # on the nodes that are up: after a node's preemption the others' torchrun waits on in its
    # rendezvous, on paid GPUs, and `job kill GROUP` must still reach it.
    whole = args.action in ("start", "restart")
    members = await services.resolve(list(group.vms), running=whole)
    if services.latest(name) is not None:
        raise_usage(f"{name!r} names both a [[groups]] entry and a VM: rename the group in gcptui.toml")
    down = [(i, down_error(i)) for i in members]
    failed: list[HostResult[JobStatus]] = [HostResult(i.name, error=e) for i, e in down if e is not None]
    instances = [i for i, e in down if e is None]
    if not instances:
        return failed, []
    runner = GroupJobRunner(services.config, remote_home=services.jobs.remote_home)
    targets = [services.reach(i) for i in instances]
    if args.action in ("start", "restart") and not args.no_sync:
        from gcptui.tui.cli.sync import sync_before_job

        held = await stop_before_sync(runner, args.action, targets)
        running = [r.name for r in held.values() if isinstance(r.error, JobAlreadyRunningError)]
        if running:
            raise JobError(
                f"group {name} already runs on {', '.join(running)}: "
                f"use `gcptui job restart {name}` or `gcptui job kill {name}`"
            )
        if held:
            return list(held.values()), []
        await sync_before_job(services, instances)
    results = await run_group(args.action, runner, group, instances, targets)
    statuses = [r.value for r in results if r.ok and r.value is not None]
    objects = group_json(name, statuses)
    if len(statuses) < len(members):  # a node is down or did not answer: the group cannot be said to run
        for item in objects:
            item["group_state"] = "partial" if item["group_state"] == "running" else item["group_state"]
    return [*failed, *results], objects


async def stop_before_sync(
    runner: JobRunner, action: str, targets: Sequence[JobHost]
) -> dict[str, HostResult[JobStatus]]:
    """The targets that must not be synced, with their failure: the tree never changes under a
    running job's code. ``start`` finds a job running (refused, as start would refuse it);
    ``restart`` kills each job first and holds back a target whose kill failed."""
    if action == "restart":
        return {r.name: r for r in await runner.run_all("kill", targets) if not r.ok}
    held: dict[str, HostResult[JobStatus]] = {}
    for result in await runner.run_all("status", targets):
        status = result.value
        if status is not None and status.state == "running":
            whole = result.name.split("/", 1)[0]  # a TPU worker's job is its node's: restarted whole
            message = (
                f"a job is already running on {result.name} (pid {status.pid}, started {status.started_at}): "
                f"use `gcptui job restart {whole}` or `gcptui job kill {whole}`"
            )
            held[result.name] = HostResult(result.name, error=JobAlreadyRunningError(message, status))
        elif not result.ok:
            held[result.name] = result
    return held


async def run_on_workers(
    services: Services, action: str, workers: list[Instance]
) -> list[HostResult[JobStatus]]:
    """``action`` on the workers of each row they belong to, all of a row's workers at once."""
    from gcptui.remote.actions import on_members

    results: list[HostResult[JobStatus]] = []
    for parent in dict.fromkeys(w.parent for w in workers if w.parent is not None):
        mine = [w for w in workers if w.parent == parent]
        node = services.latest(parent)
        if action in ("start", "restart") and node is not None and len(mine) < len(node.workers):
            # A slice trains only with the same program on every worker: never start a part of it.
            raise_usage(
                f"job {action} runs on every worker of {parent} at once: name {parent}, not one worker"
            )
        results += await on_members(services, action, parent, mine)  # type: ignore[arg-type]  # synced already
    return results


def run_logs(args: argparse.Namespace) -> int:
    from gcptui.tui.cli.logs import run_logs as print_logs

    async def body(services: Services) -> int:
        if await vertex_names(services, args.names):  # Vertex AI jobs: their Cloud Logging entries
            from gcptui.tui.cli.vertex import vertex_logs

            return await vertex_logs(services, args)
        if (
            services.config.gke
            and not services.config.job.command.strip()
            and await gke_rows(services, args.names)
        ):
            # Pods whose training is their containers' own command: its output, from the log API.
            return await gke_logs(services, args)
        paths = (log_path(), *services.config.logs.files)
        names = expand_groups(services, args.names)
        if args.raw and (len(names) > 1 or len(paths) > 1):
            raise_usage(
                "--raw prints one file's bytes exactly: give one NAME (and no [logs] files), "
                "or leave --raw out to merge several sources line by line"
            )
        found = await services.machines(names)  # a TPU node: each worker's log, prefixed NODE/wN
        for name in args.names:  # as `job` refuses it: which one was meant is not for us to guess
            if services.config.group(name) is not None and services.latest(name) is not None:
                raise_usage(
                    f"{name!r} names both a [[groups]] entry and a VM: rename the group in gcptui.toml"
                )
        # A VM named itself must run. A group's node that is down (a preemption) is one line: the
        # others' logs are what the user reads then (what node 0 said when node 1 went away).
        down = [(i, error) for i in found if (error := down_error(i)) is not None]
        named = [error for i, error in down if i.name in args.names]
        if named:
            raise named[0]
        if down and len(down) == len(found):
            raise down[0][1]
        errors = Console(stderr=True, soft_wrap=True)
        for _, error in down:
            errors.print("[red]✗[/]", Text(one_line(str(error))), highlight=False)
        instances = [i for i in found if down_error(i) is None]
        lines = args.n if args.n is not None else services.config.logs.history_lines
        code = await print_logs(
            {i.name: services.channel(i) for i in instances},
            paths,
            follow=args.f,
            lines=lines,
            raw=True if args.raw else None,
        )
        return code or (1 if down else 0)

    return with_services(args, body)


async def gke_rows(services: Services, names: list[str]) -> list[Instance]:
    """The GKE workloads (or ``WORKLOAD/POD``s) ``names`` are, when all of them are (one line when mixed)."""
    from gcptui.remote.gke_workflows import gke_backend

    if any(services.config.group(name) is not None for name in names):
        return []
    rows = await services.resolve([name.split("/", 1)[0] for name in names])
    gke = [row for row in rows if gke_backend(services.compute, row) is not None]
    if gke and len(gke) != len(rows):
        raise_usage("give either GKE workloads or machines, not both, in one command")
    if not gke:
        return []
    found = []
    for name, row in zip(names, rows, strict=True):
        if "/" not in name:
            found.append(row)
            continue
        pods = [p for p in services.compute.of(row).worker_rows(row) if p.name == name]
        if not pods:
            raise_usage(f"{row.name} has no pod {name.split('/', 1)[1]!r} (its pods: "
                        f"{', '.join(w.name for w in row.workers) or 'none yet'})")  # fmt: skip
        found.extend(pods)
    return found


async def gke_restart(services: Services, rows: list[Instance], image: str | None = None) -> int:
    """``gcptui job restart WORKLOAD`` without ``[job].command``: the pods recreated by their controller
    (``--image``: rolled to that image)."""
    from gcptui.remote.gke_workflows import restart

    console = Console(stderr=True, soft_wrap=True, highlight=False)
    failed = 0
    for row in rows:
        try:
            console.print("[green]✓[/]", Text(await asyncio.to_thread(restart, services.compute, row, image)))
        except GcptuiError as err:
            console.print("[red]✗[/]", Text(one_line(f"{row.name}: {err}")))
            failed += 1
    return 1 if failed else 0


async def gke_logs(services: Services, args: argparse.Namespace) -> int:
    """``gcptui logs WORKLOAD[/POD]...``: the pods' containers' own output through the log API, merged
    (each followed across container restarts and its replacement pod with ``-f``)."""
    from gcptui.remote.gke_workflows import pod_logs
    from gcptui.tui.cli.logs import run_pod_logs

    if args.raw:
        raise_usage("--raw reads a file on a machine: a GKE pod's logs come from the log API, line by line")
    rows = await gke_rows(services, args.names)
    labels = [r.name if r.parent else f"{r.name}/{w.name}" for r in rows for w in (r.workers or (r,))]
    lines = args.n if args.n is not None else services.config.logs.history_lines
    return await run_pod_logs(pod_logs(services.compute, rows, follow=args.f, tail=lines), labels)


async def vertex_names(services: Services, names: list[str]) -> bool:
    """True when every name is a Vertex AI job's id, resource name or display name (one line when
    mixed with machines). The display names are listed only when some name is no id."""
    from gcptui.tui.cli.vertex import display_names, is_job_name

    jobs = [name for name in names if is_job_name(name)]
    if len(jobs) < len(names):
        titles = await asyncio.to_thread(display_names, services)
        jobs += [name for name in names if name in titles and not is_job_name(name)]
    if jobs and len(jobs) != len(names):
        raise_usage("give either Vertex AI jobs or machines, not both, in one command")
    return bool(jobs)


def run_gpu(args: argparse.Namespace) -> int:
    from gcptui.tui.cli.logs import run_gpu as print_gpu

    async def body(services: Services) -> int:
        if args.names:
            instances = await services.machines(args.names, running=True)
        else:  # every machine, as `job status` means it (a TPU node: each of its workers)
            running = await reachable_saying_the_rest(services)
            instances = await services.machines([i.name for i in running]) if running else []
        return await print_gpu(
            {i.name: services.channel(i) for i in instances}, json_output=args.json, once=args.once
        )

    return with_services(args, body)


async def reachable_saying_the_rest(services: Services) -> list[Instance]:
    """The machines ``job status`` asks (running VMs and static hosts); one line on stderr names
    those it leaves out and why (a stopped VM was left out without a word)."""
    from gcptui.tui.live.columns import status_word

    snapshot = await asyncio.to_thread(services.fleet.snapshot)
    services.note_snapshot(snapshot)
    left = [i for i in snapshot.instances if not i.reachable]
    if left:
        words = ", ".join(f"{i.name} ({status_word(i)})" for i in sorted(left, key=lambda i: i.name))
        print(f"gcptui: left out, not running: {words}", file=sys.stderr)
    return [i for i in snapshot.instances if i.reachable]


def expand_groups(services: Services, names: list[str]) -> list[str]:
    """``names`` with each ``[[groups]]`` name replaced by its VMs (logs of a group: every node)."""
    expanded: list[str] = []
    for name in names:
        group = services.config.group(name)
        for vm in group.vms if group is not None else [name]:
            if vm not in expanded:
                expanded.append(vm)
    return expanded


def raise_usage(message: str) -> None:
    from gcptui.remote.errors import ConfigError

    raise ConfigError(message)
