"""``gcptui ssh accept NAME...``: review and trust a machine's host key, explicitly.

gcptui never accepts an unknown key silently; this is the deliberate step, like answering ssh's
"Are you sure you want to continue connecting?" after checking the fingerprint. A changed key is
refused here too: removing the old one stays the user's own act (``ssh-keygen -R``).
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from gcptui.remote.errors import ConfigError, GcptuiError
from gcptui.remote.services import Services
from gcptui.remote.ssh.host_keys import accept_host_key, fetch_host_key, fingerprint
from gcptui.tui.cli.common import with_services


def run_ssh(args: argparse.Namespace) -> int:
    console = Console(stderr=True, soft_wrap=True, highlight=False)
    if not args.yes and not sys.stdin.isatty():
        raise ConfigError("accepting a host key needs confirmation: run in a terminal, or pass --yes")

    async def body(services: Services) -> int:
        failed = 0
        for instance in await services.resolve(args.names):
            target = services.target(instance)
            try:
                key = await fetch_host_key(target)
            except (OSError, TimeoutError) as err:
                console.print(
                    f"[red]✗[/] {instance.name}: cannot reach {target.address}:{target.port}: {err}"
                )
                failed += 1
                continue
            if key is None:
                console.print(f"[red]✗[/] {instance.name}: the server offered no host key")
                failed += 1
                continue
            console.print(f"{instance.name} ({target.address}:{target.port}) offers {fingerprint(key)}")
            if not args.yes and input("Trust this key? Type 'yes': ").strip() != "yes":
                console.print(f"{instance.name}: not trusted")
                failed += 1
                continue
            try:
                path = accept_host_key(target, key)
            except GcptuiError as err:
                console.print(f"[red]✗[/] {err}")
                failed += 1
                continue
            console.print(f"[green]✓[/] {instance.name}: trusted in {path}")
        return 1 if failed else 0

    return with_services(args, body)
