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
import asyncio
import contextlib
import os
import signal
import sys
import termios
import threading
import tty
from collections.abc import Iterator
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from gcptui.remote.errors import ConfigError, GcptuiError
from gcptui.remote.gke_workflows import POD_SHELL, gke_backend, pod_channel
from gcptui.remote.models import State
from gcptui.remote.services import Services
from gcptui.remote.ssh.host_keys import accept_host_key, fetch_host_key, fingerprint
from gcptui.remote.ssh.openssh import ssh_argv
from gcptui.tui.cli.common import ask_line, with_services

if TYPE_CHECKING:
    from gcptui.remote.compute.exec_channel import ExecStdin as PodStdin
    from gcptui.remote.gke_workflows import PodExecChannel


def run_ssh(args: argparse.Namespace) -> int:
    words: list[str] = args.words
    if words[0] == "accept":
        if len(words) == 1:
            raise ConfigError("ssh accept needs the NAME of each machine whose host key to trust")
        return run_accept(args, words[1:])
    name, command = words[0], [*words[1:], *args.remote_command]

    async def body(services: Services) -> list[str] | int:
        # A TPU node's shell is its worker 0's; NODE/w1 names another worker. A GKE workload's is
        # its first pod's (WORKLOAD/POD names another), over Kubernetes exec.
        instance = (await services.machines([name]))[0]
        if gke_backend(services.compute, instance) is not None:
            if instance.state is not State.RUNNING:
                raise GcptuiError(f"{name} is {instance.status}: its pod must be Running for a shell")
            return await pod_shell(pod_channel(services.compute, instance), command)
        if instance.state is State.PROVISIONING:  # starting already: `vm start` would be no answer
            raise GcptuiError(
                f"{name} is {instance.status}: it is starting; try again once `gcptui ls` says RUNNING"
            )
        if not instance.state.reachable:
            raise GcptuiError(f"{name} is {instance.status}: `gcptui vm start {name}` first")
        return ssh_argv(services.target(instance), command, tty=not command and sys.stdin.isatty())

    argv = with_services(args, body)
    if isinstance(argv, int):
        return argv
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)  # the shell takes over this process: its exit code is ours


async def pod_shell(channel: PodExecChannel, command: list[str]) -> int:
    """A shell (or ``command``) in a pod over Kubernetes exec, as ``ssh`` gives one on a VM: on a
    terminal, raw mode and a pod-side TTY sized like ours and resized with it (SIGWINCH); stdin
    forwarded either way. Returns the command's exit status (255 when the pod did not say)."""
    interactive = not command and sys.stdin.isatty()
    process = await channel.start(" ".join(command) or POD_SHELL, tty=interactive)
    loop = asyncio.get_running_loop()
    try:
        if interactive:
            resize = lambda: process.resize(*os.get_terminal_size(sys.stdin.fileno()))  # noqa: E731
            resize()
            loop.add_signal_handler(signal.SIGWINCH, resize)
        _forward_stdin(loop, process.stdin)
        with _raw(interactive):
            await asyncio.gather(_copy(process.stdout, sys.stdout), _copy(process.stderr, sys.stderr))
            await process.ended.wait()
    finally:
        if interactive:
            loop.remove_signal_handler(signal.SIGWINCH)
        process.close()
    status = process.exit_status
    return 255 if status is None else status


@contextlib.contextmanager
def _raw(on: bool) -> Iterator[None]:
    """Our terminal in raw mode (keys go to the pod's terminal as typed), restored after."""
    if not on:
        yield
        return
    saved = termios.tcgetattr(sys.stdin.fileno())
    tty.setraw(sys.stdin.fileno())
    try:
        yield
    finally:
        termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, saved)


def _forward_stdin(loop: asyncio.AbstractEventLoop, stdin: PodStdin) -> None:
    """Our stdin to the pod's, from a daemon thread (a terminal or a file: the loop cannot poll a
    file; a thread blocked on a silent terminal must not hold the process at exit)."""

    def pump() -> None:
        while True:
            try:
                data = os.read(sys.stdin.fileno(), 65536)
            except OSError:
                data = b""
            try:
                if data:
                    loop.call_soon_threadsafe(stdin.write, data)
                else:
                    loop.call_soon_threadsafe(stdin.write_eof)
                    return
            except RuntimeError:  # the loop has ended: the shell is over
                return

    threading.Thread(target=pump, name="pod-stdin", daemon=True).start()


async def _copy(source: asyncio.StreamReader, sink: object) -> None:
    out = getattr(sink, "buffer", None)
    while chunk := await source.read(65536):
        if out is not None:
            out.write(chunk)
            out.flush()
        else:
            sink.write(chunk.decode("utf-8", "replace"))  # type: ignore[attr-defined]
            sink.flush()  # type: ignore[attr-defined]


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
