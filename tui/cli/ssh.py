"""``gcptui ssh NAME [-- COMMAND...]`` and ``gcptui ssh accept NAME...``.

The shell is OpenSSH's own ``ssh`` (a real terminal, agent forwarding rules, escape keys), run with
exactly what the rest of gcptui uses: the user, key, known-hosts file and host key alias
(``compute.<id>``) and proxy command of the target, host keys strictly checked. Its exit code is the
remote command's.

``accept``: gcptui never accepts an unknown key silently; this is the deliberate step, like answering
ssh's "Are you sure you want to continue connecting?" after checking the fingerprint. A changed key
is refused here too: removing the old one stays the user's own act (``ssh-keygen -R``).
"""

from __future__ import annotations

import argparse
import os
import sys

from rich.console import Console
from rich.markup import escape

from gcptui.remote.errors import ConfigError, GcptuiError
from gcptui.remote.services import Services
from gcptui.remote.ssh.host_keys import accept_host_key, fetch_host_key, fingerprint
from gcptui.remote.ssh.openssh import ssh_argv
from gcptui.tui.cli.common import ask_line, with_services


def run_ssh(args: argparse.Namespace) -> int:
    words: list[str] = args.words
    if words[0] == "accept":
        if len(words) == 1:
            raise ConfigError("ssh accept needs the NAME of each machine whose host key to trust")
        return run_accept(args, words[1:])
    name, command = words[0], [*words[1:], *args.remote_command]

    async def body(services: Services) -> list[str]:
        # A TPU node's shell is its worker 0's; NODE/w1 names another worker.
        instance = (await services.machines([name]))[0]
        if not instance.state.reachable:
            raise GcptuiError(f"{name} is {instance.status}: `gcptui vm start {name}` first")
        return ssh_argv(services.target(instance), command, tty=not command and sys.stdin.isatty())

    argv = with_services(args, body)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)  # the shell takes over this process: its exit code is ours


def run_accept(args: argparse.Namespace, names: list[str]) -> int:
    console = Console(stderr=True, soft_wrap=True, highlight=False)
    if not args.yes and not sys.stdin.isatty():
        raise ConfigError("accepting a host key needs confirmation: run in a terminal, or pass --yes")

    async def body(services: Services) -> int:
        failed = 0
        for instance in await services.machines(names):
            target = services.target(instance)
            try:
                key = await fetch_host_key(target)
            except (OSError, TimeoutError) as err:
                console.print(
                    f"[red]✗[/] {escape(instance.name)}: cannot reach {target.address}:{target.port}: "
                    + escape(str(err))
                )
                failed += 1
                continue
            if key is None:
                console.print(f"[red]✗[/] {escape(instance.name)}: the server offered no host key")
                failed += 1
                continue
            console.print(
                escape(f"{instance.name} ({target.address}:{target.port}) offers {fingerprint(key)}")
            )
            if not args.yes and (ask_line("Trust this key? Type 'yes': ") or "").strip() != "yes":
                console.print(f"{escape(instance.name)}: not trusted")
                failed += 1
                continue
            try:
                path = accept_host_key(target, key)
            except GcptuiError as err:
                console.print(f"[red]✗[/] {escape(str(err))}")
                failed += 1
                continue
            console.print(f"[green]✓[/] {escape(f'{instance.name}: trusted in {path}')}")
        return 1 if failed else 0

    return with_services(args, body)
