"""``gcptui keeper deploy|status|logs|stop|remove|run``: the keep-alive on a small VM in the project.

``run`` is what the keeper's service runs on its VM: the headless keep-alive in the lease's keeper
role (``build_service(lease="keeper")``), one line per event, the lease given back on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import socket
import sys
from typing import TYPE_CHECKING

from gcptui.remote.aio import cancel_and_wait, within
from gcptui.remote.config import load_config
from gcptui.remote.errors import ConfigError, GcptuiError
from gcptui.remote.keepalive.recovery import RecoveryEvent
from gcptui.remote.safe_text import vm_field
from gcptui.remote.services import Services
from gcptui.tui.cli.common import with_services

if TYPE_CHECKING:
    from collections.abc import Callable

    from gcptui.remote.keeper.instance_keys import KeyPlanter
    from gcptui.remote.keeper.vm_service import KeeperService
    from gcptui.remote.models import Instance


def run_keeper(args: argparse.Namespace) -> int:
    action = args.keeper_action
    if action == "run":
        return _run(args)
    if action == "deploy":
        return with_services(args, lambda services: _deploy(services, args))
    if action == "status":
        return with_services(args, lambda services: _status(services, bool(args.json)))
    if action == "logs":
        return with_services(args, lambda services: _logs(services, args))
    return with_services(args, lambda services: _stop(services, args.name, remove=action == "remove"))


async def _keeper_name(services: Services, name: str | None) -> str:
    """``--name``, else the VM the bucket's keeper status names (its holder ``keeper:NAME:TAG``), else
    deploy's default name."""
    from gcptui.remote.keeper.deploy import DEFAULT_NAME
    from gcptui.remote.keeper.status import keeper_report, named_vm

    if name:
        return name
    if not services.config.storage.bucket:
        return DEFAULT_NAME
    try:
        report = await asyncio.to_thread(keeper_report, services)
    except GcptuiError as err:
        _say(f"keeper: the bucket's keeper status cannot be read ({err}); looking for {DEFAULT_NAME}")
        return DEFAULT_NAME
    return named_vm(report) or DEFAULT_NAME


async def _lease_holder(services: Services) -> str | None:
    """Who holds the lease now (None: nobody, or no bucket to ask)."""
    from gcptui.remote.keeper.status import keeper_report

    if not services.config.storage.bucket:
        return None
    with contextlib.suppress(GcptuiError):
        return (await asyncio.to_thread(keeper_report, services)).lease_holder
    return None


def _say(line: str) -> None:
    print(line, flush=True)


async def _deploy(services: Services, args: argparse.Namespace) -> int:
    from gcptui.remote.keeper.deploy import DeployPlan, KeeperDeploy

    gcp = services.config.gcp
    zone = args.zone or (gcp.zones[0] if gcp is not None and gcp.zones else None)
    if args.existing is None and zone is None:
        raise ConfigError("keeper deploy: name a zone (--zone, or [gcp] zones in gcptui.toml)")
    name = args.existing or args.name
    account = getattr(args, "service_account", None)
    if account and args.existing is not None:
        raise ConfigError(
            f"keeper deploy: --service-account applies to the VM deploy makes; {args.existing} keeps its own"
        )
    plan = DeployPlan(
        name, zone or "", args.machine_type, existing=args.existing is not None, service_account=account
    )
    await KeeperDeploy(services, plan, _say).run()
    from gcptui.remote.keepalive.service import known_keepers

    # Should this laptop later lose its way to the bucket, its keep-alive defers to this keeper.
    known_keepers().note(services.config.storage.bucket, True)
    _say(f"keeper: deployed on {name}; `gcptui keeper status` shows it")
    return 0


async def _status(services: Services, as_json: bool) -> int:
    from gcptui.remote.keeper.status import keeper_report

    if not services.config.storage.bucket:
        raise ConfigError("the keeper needs [storage] bucket in gcptui.toml: its status and lease live there")
    report = await asyncio.to_thread(keeper_report, services)
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        for line in report.lines():
            print(line)
    return 0 if report.up else 1


async def _keeper_service(services: Services, name: str):  # type: ignore[no-untyped-def]
    from gcptui.remote.keeper.vm_service import KeeperService

    [instance] = await services.resolve([name], running=True)
    return KeeperService(services, instance)


async def _logs(services: Services, args: argparse.Namespace) -> int:
    service = await _keeper_service(services, await _keeper_name(services, args.name))
    async for line in service.logs(max(0, int(args.lines)), bool(args.follow)):
        print(line, flush=True)
    return 0


async def _stop(services: Services, given: str | None, *, remove: bool) -> int:
    from gcptui.remote.keeper.deploy import KEEPER_LABEL
    from gcptui.remote.keeper.instance_keys import remove_everywhere
    from gcptui.remote.keeper.project_keys import remove_project_keys
    from gcptui.remote.keeper.service_account import delete_account

    name = await _keeper_name(services, given)
    try:
        [instance] = await services.resolve([name])
    except ConfigError:
        if remove:  # the VM is gone: what it may have left behind, then the error
            _say(f"keeper: {name} is gone; where OS Login was on, its key may be left in its service account's "
                 "OS Login profile: `gcloud compute os-login ssh-keys list --account=ACCOUNT`, then "
                 "`gcloud compute os-login ssh-keys remove --account=ACCOUNT --key=FINGERPRINT`")  # fmt: skip
        raise
    if not remove:
        service = await _keeper_service(services, name)
        before = await _lease_holder(services)
        await service.stop()
        _say(f"keeper: stopped on {name} ({_lease_after(name, before, await _lease_holder(services))}); "
             f"`gcptui keeper deploy --existing {name}` starts it again")  # fmt: skip
        return 0
    account = await _oslogin_account(services, instance)
    forgotten = False
    if instance.state.value == "running":
        service = await _keeper_service(services, name)
        if account is not None:
            forgotten = await _forget_key(service, account)
        with contextlib.suppress(GcptuiError):
            await service.remove_files()
    if account is not None and not forgotten:
        from gcptui.remote.keeper.oslogin import leftover_line

        _say(leftover_line(account))
    changed, failures = await asyncio.to_thread(remove_everywhere, services)
    if changed:
        _say(f"keeper: its SSH key removed from the ssh-keys metadata of {', '.join(changed)}")
    for line in failures:
        _say(f"keeper: {line}")
    if await asyncio.to_thread(remove_project_keys, services):  # where an earlier deploy put it
        _say("keeper: its SSH key removed from the project's ssh-keys metadata")
    if instance.labels.get(KEEPER_LABEL) == "created":
        made_as = await _vm_account(services, instance)
        gce = await asyncio.to_thread(services.fleet.gce)
        await asyncio.to_thread(gce.delete, instance.name, instance.zone)
        _say(f"keeper: VM {name} deleted")
        if made_as is not None and await asyncio.to_thread(delete_account, services, made_as):
            _say(f"keeper: its service account {made_as} deleted")
    else:
        _say(f"keeper: removed from {name} (a VM deploy did not make is left running)")
    return 0


def _lease_after(name: str, before: str | None, after: str | None) -> str:
    """What became of the lease as the keeper on ``name`` stopped, from who held it before and after."""
    mine = f"keeper:{name}:"
    if not (before or "").startswith(mine):
        return "it held no lease"
    if (after or "").startswith(mine):
        return "its lease was not given back: it lapses after its ttl, then a laptop takes over"
    return "its lease given back"


async def _vm_account(services: Services, instance: Instance) -> str | None:
    """The service account ``instance`` runs as (None: none, or it cannot be read)."""
    from gcptui.remote.keeper.oslogin import service_account

    try:
        return await asyncio.to_thread(service_account, services, instance.name, instance.zone)
    except GcptuiError:
        return None


async def _oslogin_account(services: Services, instance: Instance) -> str | None:
    """The keeper VM's service account where OS Login applies to a VM it watches (its key was imported
    into that account's profile at deploy: ``login_ways``), else None."""
    from gcptui.remote.keeper.oslogin import login_ways, service_account

    if not (await asyncio.to_thread(login_ways, services, instance))[0]:
        return None
    try:
        return await asyncio.to_thread(service_account, services, instance.name, instance.zone)
    except GcptuiError:
        return None  # no service account: deploy could not have imported a key either


async def _forget_key(service: KeeperService, account: str) -> bool:
    """On the keeper VM, as ``account``: delete the keeper's own key from that account's OS Login
    profile (``forget_main``), before its files go. True when the profile no longer has it."""
    import asyncssh

    from gcptui.remote.keeper.oslogin import forget_command
    from gcptui.remote.keeper.vm_service import KEEPER_DIR

    command = forget_command(f"{KEEPER_DIR}/venv/bin/python", f"{KEEPER_DIR}/gcptui.toml", account)
    try:
        rc, out = await within(120, service.sh(command))
    except (GcptuiError, OSError, asyncssh.Error, TimeoutError) as err:
        _say(f"keeper: could not reach {service.instance.name} to delete its key ({vm_field(str(err), 200)})")
        return False
    lines = out.strip().splitlines()
    if rc != 0:
        _say(f"keeper: deleting its key failed on the VM: {vm_field(lines[-1] if lines else '', 300)}")
        return False
    fp = vm_field(lines[-1], 80) if lines else ""
    _say(f"keeper: its SSH key deleted from {account}'s OS Login profile ({fp})" if fp
         else f"keeper: its SSH key was not in {account}'s OS Login profile")  # fmt: skip
    return True


def _key_planter(
    services: Services, watched: Callable[[Instance], bool], oslogin_user: str | None
) -> KeyPlanter | None:
    """Where OS Login is off: the keeper puts its own key on each VM it starts watching (its public
    key beside its private one, ``[ssh] key``), as the user ``[ssh] user`` names."""
    from pathlib import Path

    from gcptui.remote.keeper.instance_keys import KeyPlanter, key_entry
    from gcptui.remote.ssh.target import default_user

    if oslogin_user:
        return None
    try:
        public = Path(services.config.ssh.key).expanduser().with_suffix(".pub").read_text().strip()
    except OSError:
        return None  # not a deployed keeper's layout: the VMs' own keys are as deploy left them
    user = services.config.ssh.user or default_user()
    return KeyPlanter(services, watched, key_entry(user, public), _say)


def _run(args: argparse.Namespace) -> int:
    from gcptui.remote.keepalive.lease_gate import standing_listener
    from gcptui.remote.keepalive.service import build_service
    from gcptui.remote.keeper.oslogin import login_here
    from gcptui.tui.cli.keepalive import said_once

    async def main() -> int:
        services = Services(load_config(getattr(args, "config", None)))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)

        def on_event(event: RecoveryEvent) -> None:
            _say(event.line())

        tuning = {"poll_seconds": args.poll_seconds} if args.poll_seconds else {}
        if not services.config.storage.bucket:
            raise ConfigError("the keeper needs [storage] bucket in gcptui.toml: the lease lives there")
        user: str | None = None
        try:  # OS Login: the user resolved before the first SSH (keep-alive's polls never list the fleet)
            user = await asyncio.to_thread(login_here, services)
        except GcptuiError as err:
            _say(f"keeper: OS Login: {err}")
        else:
            if user:
                _say(f"keeper: OS Login user {user}")
        service = build_service(
            services, on_event=on_event, lease="keeper", lease_ttl=args.lease_ttl, autostop=False,
            keeper_name=args.name or socket.gethostname(), tuning=tuning,
        )  # fmt: skip
        _say(f"keeper: watching every Spot VM; lease ttl {args.lease_ttl:g}s; polling every "
             f"{service.keepalive.poll_seconds:g}s")  # fmt: skip
        if service.gate is not None:
            service.keepalive.on_poll(standing_listener(service.gate, said_once(_say)))
        planter = _key_planter(services, service.keepalive.watched, user)
        if planter is not None:
            service.keepalive.on_poll(planter)
        runner = asyncio.create_task(service.run(), name="keeper")
        stopper = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({runner, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if runner.done():
                runner.result()
        finally:
            await cancel_and_wait(runner, stopper)
            if planter is not None:
                await planter.close()
            await service.close()
            await services.close()
        _say("keeper: stopped, lease given back")
        return 0

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        print("keeper: stopped", file=sys.stderr)
        return 0
