"""``gcptui vm create NAME... --from BASE``: new VMs like a base VM, in parallel, host keys pinned."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from gcptui.remote.compute.backend import Capability
from gcptui.remote.compute.registry import Compute, fleet_source
from gcptui.remote.config import Config, find_config, load_config
from gcptui.remote.config.record import record_group, with_group
from gcptui.remote.errors import ConfigError, GcptuiError
from gcptui.remote.provision import (
    Created,
    CreateOptions,
    check_group,
    check_vm_name,
    parse_gpus,
    zone_unlisted,
)


def options_from(args: argparse.Namespace) -> CreateOptions:
    """The flags as ``CreateOptions``; a usage error (exit 2) for a malformed one."""
    return CreateOptions(
        zone=args.zone or None,
        spot=args.spot,
        machine_type=args.machine_type or None,
        gpus=parse_gpus(args.gpus) if args.gpus else None,
        group=check_group(args.group) if args.group else None,
    )


def new_names(args: argparse.Namespace, config: Config) -> list[str]:
    """The names given, or ``--count N`` of them: ``G-i`` (``BASE-i`` without ``--group``), numbered
    on from the VMs group ``G`` already has."""
    if args.count is None:
        if not args.names:
            raise ConfigError("vm create needs the new VMs' names, or --count N")
        return list(args.names)
    if args.names:
        raise ConfigError("vm create: give the new VMs' names or --count N, not both")
    if args.count < 1:
        raise ConfigError(f"--count {args.count}: create at least 1 VM")
    prefix = args.group or args.base
    group = config.group(args.group) if args.group else None
    first = len(group.vms) if group is not None else 0
    return [f"{prefix}-{index}" for index in range(first, first + args.count)]


def group_file(args: argparse.Namespace, names: list[str]) -> Path:
    """The config file ``--group`` records the group in, checked before any VM is made: it must
    exist and stay a valid config with the new VMs in the group."""
    path = find_config(getattr(args, "config", None))
    if path is None:
        raise ConfigError(
            f"--group {args.group}: the group is recorded in gcptui.toml and there is none: "
            "create one (with a [gcp] section) or pass --config"
        )
    with_group(path.read_text(encoding="utf-8"), path, args.group, names)
    return path


def run_create(args: argparse.Namespace) -> int:
    if not args.base:
        raise ConfigError("vm create needs --from BASE: the VM whose settings to copy (see `gcptui ls`)")
    options = options_from(args)
    config = load_config(getattr(args, "config", None))
    names = [check_vm_name(name) for name in new_names(args, config)]
    if len(set(names)) != len(names):
        raise ConfigError("vm create: a name is given twice")
    config_path = group_file(args, names) if options.group else None
    source = fleet_source(config)
    if source.gcp is None:
        raise ConfigError("vm create needs a [gcp] section: static [[hosts]] cannot be created")
    unlisted = zone_unlisted(options.zone, config)
    if unlisted is not None:
        raise ConfigError(unlisted)
    snapshot = source.snapshot()
    base = snapshot.find(args.base)
    compute = Compute.over(source)
    if base is None or not compute.can(base, Capability.CREATE_LIKE):
        raise ConfigError(f"--from {args.base}: no GCE VM of that name (see `gcptui ls`)")
    if options.group and snapshot.find(options.group) is not None:
        raise ConfigError(f"--group {options.group}: a VM has that name: pick another group name")
    taken = [name for name in names if snapshot.find(name) is not None]
    if taken:
        raise ConfigError(
            f"{', '.join(taken)} already exist{'s' if len(taken) == 1 else ''}: pick other names"
        )
    console = Console(stderr=True, soft_wrap=True, highlight=False)
    backend = compute.of(base)
    plan = backend.plan_copies(base, options, console.print)
    count = f"{len(names)} VM{'s' if len(names) != 1 else ''}"
    console.print(escape(f"creating {count} like {base.name}: {plan.describe()}"))
    creator = backend.copier(
        lambda name, step: console.print(escape(f"  {name}: {zone_advice(step, args.zone)}"))
    )
    began = time.monotonic()
    try:
        results = creator.create_many(plan, names)
    except KeyboardInterrupt:
        return interrupted(
            console, names, lambda name: backend.get(replace(base, name=name, zone=plan.zone)) is not None
        )
    made = [r.instance for r in results.values() if isinstance(r, Created)]
    for name, result in results.items():
        if isinstance(result, Created):
            where = result.instance.external_ip or result.instance.internal_ip
            console.print(f"[green]✓[/] {escape(name)} RUNNING at {where} ({result.seconds:.1f} s)")
        else:
            console.print(f"[red]✗[/] {escape(name)}: {escape(zone_advice(str(result), args.zone))}")
    console.print(f"{len(made)}/{len(names)} created in {time.monotonic() - began:.1f} s")
    if options.group and config_path is not None and made:
        created = {i.name for i in made}
        nodes = [name for name in names if name in created]
        try:
            record_group(config_path, options.group, nodes)
        except (ConfigError, OSError) as err:
            console.print(
                f"[red]✗[/] {escape(f'group {options.group} not recorded in {config_path}: {err}')}"
            )
            return 1
        console.print(
            f"group {options.group}: {', '.join(nodes)} recorded in {config_path} "
            f"(`gcptui job start {options.group}`)"
        )
    if args.sync and made:
        return _first_sync(args, [i.name for i in made]) or (0 if len(made) == len(names) else 1)
    return 0 if len(made) == len(names) else 1


def interrupted(console: Console, names: list[str], exists: Callable[[str], bool]) -> int:
    """After Ctrl-C: which of ``names`` exist (each inserted VM boots on and bills while it runs)
    and the command that deletes them; exit 130, as an interrupted command does."""
    try:
        made = [name for name in names if exists(name)]
    except (GcptuiError, KeyboardInterrupt):  # no answer (or a second Ctrl-C): every name may exist
        console.print(f"interrupted: any of {', '.join(names)} may exist: see `gcptui ls`")
        return 130
    if not made:
        console.print("interrupted: no VM was created")
        return 130
    verb = "exists" if len(made) == 1 else "exist"
    console.print(
        escape(
            f"interrupted: {', '.join(made)} {verb} (billed while running): `gcptui vm delete {' '.join(made)}`"
        )
    )
    return 130


def _first_sync(args: argparse.Namespace, names: list[str]) -> int:
    """A full sync of ``[sync]`` to the new VMs (``[job].setup`` runs before their first job start)."""
    from gcptui.remote.services import Services
    from gcptui.tui.cli.common import with_services
    from gcptui.tui.cli.sync import sync_before_job

    async def body(services: Services) -> int:
        await sync_before_job(services, await services.resolve(names, running=True))
        return 0

    return with_services(args, body)


def zone_advice(message: str, zone: str | None) -> str:
    """``message``, its "fix [gcp] zones" advice pointed at ``--zone`` when the zone came from it (in
    the step lines too: no line may send the user to a config key that is not at fault)."""
    if zone and f"zone {zone} does not exist" in message:
        before = message.split(f"zone {zone} does not exist", 1)[0]
        return f"{before}zone {zone} does not exist: check --zone (`gcloud compute zones list` lists them)"
    return message
