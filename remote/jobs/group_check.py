"""Before a group starts: can every node reach node 0's rendezvous port?

Node 0 listens on ``<internal IP>:<port>`` for a few seconds (a tiny Python listener over its exec
channel);
every node, node 0 included, then connects to it. Anything that fails becomes one line: the port
is taken on node 0, or a node cannot reach it (on GCE's default network: no firewall rule allowing
internal traffic), naming the rule to add. Nothing of the job has started by then.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Mapping, Sequence

import asyncssh

from gcptui.remote.aio import within
from gcptui.remote.compute.exec_channel import Reach
from gcptui.remote.errors import GcptuiError
from gcptui.remote.jobs.group import GroupNode, node_address
from gcptui.remote.safe_text import vm_field
from gcptui.remote.ssh.capped import exec_capped

CHECK_SECONDS = 10.0

# argv: address port seconds count. Prints "listening" once bound (or "error=<errno name> <text>"),
# then takes ``count`` connections, each closed by the client first (so no TIME_WAIT keeps the port
# from the rendezvous that binds it next), or stops when the time is up.
_LISTEN = """import errno, socket, sys, time
address, port, seconds, count = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
try:
    s = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((address, port))
    s.listen(64)
except OSError as err:
    print("error=%s %s" % (errno.errorcode.get(err.errno, "?"), err.strerror), flush=True)
    sys.exit(1)
print("listening", flush=True)
end = time.monotonic() + seconds
while count > 0 and time.monotonic() < end:
    s.settimeout(max(0.01, end - time.monotonic()))
    try:
        c = s.accept()[0]
    except OSError:
        break
    c.settimeout(max(0.01, end - time.monotonic()))
    try:
        while c.recv(64):
            pass
    except OSError:
        pass
    c.close()
    count -= 1
s.close()
"""

# argv: address port seconds. Exit 0 when a TCP connection opens; else prints why.
_CONNECT = """import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
except OSError as err:
    print(err.strerror or type(err).__name__, flush=True)
    sys.exit(1)
"""


class RendezvousUnreachableError(GcptuiError):
    """Node 0's rendezvous port cannot be used or reached: the one line says which and what to do."""


def _python(script: str, *args: str, remote_home: str | None) -> str:
    home = f"HOME={shlex.quote(remote_home)}; export HOME; " if remote_home else ""
    return home + shlex.join(["python3", "-c", script, *args])


def firewall_hint(group: str, port: int, addresses: Sequence[str]) -> str:
    """The GCE firewall rule that opens ``port`` between the group's VMs."""
    ranges = ",".join(f"{a}/32" for a in addresses)
    return (
        f"gcloud compute firewall-rules create gcptui-{group}-rendezvous --network NETWORK "
        f"--allow tcp:{port} --source-ranges {ranges}"
    )


async def check_rendezvous(
    nodes: Sequence[GroupNode],
    reaches: Mapping[str, Reach],
    port: int,
    *,
    remote_home: str | None = None,
    timeout: float = CHECK_SECONDS,
) -> None:
    """Raise ``RendezvousUnreachableError`` unless every node connects to node 0's ``port``."""
    first = nodes[0]
    group = first.group
    address = node_address(first.instance)
    listen = _python(_LISTEN, address, str(port), str(timeout + 5), str(len(nodes)), remote_home=remote_home)
    # stderr to /dev/null on the node: unread, it could fill the channel's window.
    listener = await reaches[first.name].channel.start(listen + " 2>/dev/null")
    try:
        try:
            said = (await within(timeout + 5, listener.stdout.readline())).decode("utf-8", "replace")
        except TimeoutError:
            said = ""
        if said.strip() != "listening":
            # The VM's words, quoted in a one-line error: sanitized and bounded where they enter.
            reason = vm_field(str(said), 300).removeprefix("error=") or "no answer"
            if reason.startswith("EADDRINUSE"):
                raise RendezvousUnreachableError(
                    f"group {group}: port {port} on {first.name} ({address}) is already in use (another "
                    f"rendezvous still running?): `gcptui job kill {group}`, or set another port in [[groups]]"
                )
            raise RendezvousUnreachableError(
                f"group {group}: {first.name} cannot listen on {address}:{port} ({reason}): check the "
                "VM's internal address and [[groups]].port"
            )

        async def probe(node: GroupNode) -> tuple[GroupNode, str | None]:
            why = await connect_probe(
                reaches[node.name], address, port, remote_home=remote_home, timeout=timeout
            )
            return node, why

        results = await asyncio.gather(*(probe(node) for node in nodes))
    finally:
        with contextlib.suppress(TimeoutError, asyncssh.Error, OSError):
            await within(timeout + 10, listener.wait_closed())  # the port is free again
        listener.close()
    failed = [(node, why) for node, why in results if why is not None]
    if failed:
        node, why = failed[0]
        raise RendezvousUnreachableError(unreachable_line(nodes, node.name, why, port, more=len(failed) - 1))


def unreachable_line(nodes: Sequence[GroupNode], name: str, why: str, port: int, *, more: int = 0) -> str:
    """The one line for node ``name`` failing to connect to node 0's rendezvous port (``why``)."""
    first = nodes[0]
    group, address = first.group, node_address(first.instance)
    others = f" (and {more} more)" if more else ""
    addresses = [node_address(n.instance) for n in nodes]
    return (
        f"group {group}: {name}{others} cannot reach {first.name}'s rendezvous port "
        f"{address}:{port} ({why}): allow TCP {port} between the group's VMs with a firewall rule, "
        f"e.g. `{firewall_hint(group, port, addresses)}` (GCE's default network allows it only with "
        "default-allow-internal)"
    )


async def connect_probe(
    reach: Reach,
    address: str,
    port: int,
    *,
    remote_home: str | None = None,
    timeout: float = CHECK_SECONDS,
) -> str | None:
    """From ``reach``, open a TCP connection to ``address:port``: None when it opens, else why not."""
    command = _python(_CONNECT, address, str(port), str(timeout), remote_home=remote_home)
    result = await exec_capped(reach.channel, command, max_bytes=65_536, timeout=timeout + 30)
    if result.exit_status == 0:
        return None
    # The VM's words, quoted in a one-line error: sanitized and bounded here.
    return vm_field(str(result.stdout or result.stderr or ""), 300) or f"exit {result.exit_status}"
