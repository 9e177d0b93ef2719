"""A WAN link on loopback: a TCP proxy with a one-way delay and a bandwidth cap per direction.

Put in front of an sshd (:func:`wan_in_front_of`) it makes a loopback server look like a VM across
the internet, for the sync benchmark and tests. Each direction is a pipe, not a per-chunk sleep:
a chunk read at ``t`` finishes leaving the sender at ``tx = max(t, previous tx) + len / rate`` and
is written to the receiver at ``tx + delay``. Chunks in flight overlap their delays, so the link
carries ``rate × delay`` bytes on the wire as a real one does, and a lone small write arrives after
``delay`` plus its serialisation time. Reading stops while more than ``queue_bytes`` wait to be
transmitted: the sender feels TCP back-pressure, as on a real bottleneck link.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

CHUNK = 16 << 10  # pace in 16 KiB pieces: 2.6 ms each at 50 Mbit/s


@dataclass
class LinkStats:
    """Bytes carried per direction (client→server ``up``, server→client ``down``)."""

    up: int = 0
    down: int = 0
    connections: int = 0


@dataclass
class Uplink:
    """One link's transmit queue per direction, shared by every connection that crosses it.

    A home uplink carries all of the laptop's connections: eight SSH connections to eight VMs
    share its 50 Mbit/s, not 50 Mbit/s each. Each direction's ``tx_free`` is when that direction
    finishes transmitting what any connection already queued on it.
    """

    tx_free: dict[str, float] = field(default_factory=lambda: {"up": 0.0, "down": 0.0})


@dataclass
class WanProxy:
    """Listen on ``host:port`` (0: a free port) and relay each connection to ``target``.

    ``delay_ms`` is one way (the round trip is twice it); ``mbit`` caps each direction
    separately (0: no cap). Proxies given the same ``uplink`` share one bandwidth budget per
    direction (one home link in front of several VMs); by default each has its own.
    """

    target_host: str
    target_port: int
    host: str = "127.0.0.1"
    port: int = 0
    delay_ms: float = 25.0
    mbit: float = 50.0
    queue_bytes: int = 256 << 10
    stats: LinkStats = field(default_factory=LinkStats)
    uplink: Uplink = field(default_factory=Uplink)
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def rtt_ms(self) -> float:
        return 2 * self.delay_ms

    async def start(self) -> WanProxy:
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        """Stop listening and cut every relayed connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> WanProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _accept(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.stats.connections += 1
        s_writer: asyncio.StreamWriter | None = None
        try:
            s_reader, s_writer = await asyncio.open_connection(self.target_host, self.target_port)
            up = asyncio.create_task(self._pipe(c_reader, s_writer, "up"))
            down = asyncio.create_task(self._pipe(s_reader, c_writer, "down"))
            try:
                # Either side closing ends the connection: both pipes deliver what is in flight first.
                await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
                await asyncio.wait({up, down}, timeout=self.delay_ms / 1000 + 1.0)
            finally:
                for t in (up, down):
                    t.cancel()
                await asyncio.gather(up, down, return_exceptions=True)
        except (OSError, asyncio.CancelledError):
            pass  # the target refused, or stop() cut the link: the handler ends quietly either way
        finally:
            for w in (c_writer, s_writer):
                if w is not None:
                    w.close()
            self._tasks.discard(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str) -> None:
        """Relay one direction: the reader schedules, the deliverer writes at each chunk's arrival."""
        delay = self.delay_ms / 1000
        rate = self.mbit * 1e6 / 8 if self.mbit > 0 else 0.0
        in_flight: collections.deque[tuple[float, bytes]] = collections.deque()
        arrived = asyncio.Event()
        closed = False
        link = self.uplink.tx_free  # when the link finishes transmitting what it already holds

        async def deliver() -> None:
            while True:
                while not in_flight:
                    if closed:
                        return
                    arrived.clear()
                    await arrived.wait()
                due, data = in_flight[0]
                now = time.monotonic()
                if due > now:
                    await asyncio.sleep(due - now)
                in_flight.popleft()
                setattr(self.stats, direction, getattr(self.stats, direction) + len(data))
                writer.write(data)
                await writer.drain()

        deliverer = asyncio.create_task(deliver())
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                now = time.monotonic()
                tx_done = max(now, link[direction]) + (len(data) / rate if rate else 0.0)
                link[direction] = tx_done
                in_flight.append((tx_done + delay, data))
                arrived.set()
                # Back-pressure: stop reading while the link's send queue (bytes whose transmission
                # has not started, not those already on the wire) holds more than queue_bytes.
                if rate:
                    backlog_s = link[direction] - time.monotonic() - self.queue_bytes / rate
                    if backlog_s > 0:
                        await asyncio.sleep(backlog_s)
            closed = True
            arrived.set()
            await deliverer
            with contextlib.suppress(OSError, RuntimeError):
                if writer.can_write_eof():
                    writer.write_eof()
        finally:
            deliverer.cancel()
            await asyncio.gather(deliverer, return_exceptions=True)


def add_known_host(
    known_hosts_path: str, proxy_host: str, proxy_port: int, sshd_host: str, sshd_port: int
) -> None:
    """Let clients that verify host keys reach the sshd through the proxy's address too."""
    with open(known_hosts_path) as f:
        lines = f.read().splitlines()
    prefix = f"[{sshd_host}]:{sshd_port} "
    extra = [
        f"[{proxy_host}]:{proxy_port} " + line[len(prefix) :] for line in lines if line.startswith(prefix)
    ]
    with open(known_hosts_path, "a") as f:
        f.write("".join(e + "\n" for e in extra))


@dataclass
class WanLinkProcess:
    """A :class:`WanProxy` in its own process, so neither end's CPU work on this machine's event
    loop (or GIL) slows the link: what a benchmark wants. ``stop()`` ends it. With several
    targets (:func:`spawn_shared_uplink`), ``ports`` lists one port per target, all behind one
    shared uplink; ``port`` is the first."""

    process: subprocess.Popen[str]
    host: str
    port: int
    ports: list[int] = field(default_factory=list)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


def spawn_wan_proxy(
    target_host: str, target_port: int, *, host: str = "127.0.0.1", delay_ms: float = 25.0, mbit: float = 50.0
) -> WanLinkProcess:
    """Start ``python -m tests.helpers.wan`` relaying to the target; returns once it listens."""
    root = Path(__file__).resolve().parents[2]
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.wan", target_host, str(target_port),
         "--host", host, "--delay-ms", str(delay_ms), "--mbit", str(mbit)],
        cwd=root, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()  # "<port>\n" once listening; "" if it died
    if not line.strip().isdigit():
        process.kill()
        raise RuntimeError(f"the WAN proxy did not start (exit {process.wait()})")
    return WanLinkProcess(process, host, int(line))


def spawn_shared_uplink(
    targets: list[tuple[str, int]], *, host: str = "127.0.0.1", delay_ms: float = 25.0, mbit: float = 50.0
) -> WanLinkProcess:
    """One process relaying to each of ``targets`` on its own port, every connection through one
    shared uplink (``mbit`` per direction for all of them together, ``delay_ms`` one way): a
    laptop's home link in front of a fleet. Machine-to-machine traffic stays off it: the machines
    reach each other at their own addresses, never through these ports."""
    root = Path(__file__).resolve().parents[2]
    extra = [f"{h}:{p}" for h, p in targets[1:]]
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.wan", targets[0][0], str(targets[0][1]), *extra,
         "--host", host, "--delay-ms", str(delay_ms), "--mbit", str(mbit)],
        cwd=root, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline().split()  # "<port> <port> ...\n" once listening; "" if it died
    if len(line) != len(targets) or not all(p.isdigit() for p in line):
        process.kill()
        raise RuntimeError(f"the WAN proxy did not start (exit {process.wait()})")
    ports = [int(p) for p in line]
    return WanLinkProcess(process, host, ports[0], ports)


async def _serve(args: argparse.Namespace) -> None:
    uplink = Uplink()  # every target's connections share it
    targets = [(args.target_host, args.target_port)]
    targets += [(t.rpartition(":")[0], int(t.rpartition(":")[2])) for t in args.more]
    proxies = [
        await WanProxy(h, p, host=args.host, delay_ms=args.delay_ms, mbit=args.mbit, uplink=uplink).start()
        for h, p in targets
    ]
    print(" ".join(str(proxy.port) for proxy in proxies), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for proxy in proxies:
        await proxy.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Relay TCP with a one-way delay and a bandwidth cap.")
    parser.add_argument("target_host")
    parser.add_argument("target_port", type=int)
    parser.add_argument(
        "more", nargs="*", metavar="HOST:PORT", help="more targets, one port each, one uplink"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--delay-ms", type=float, default=25.0, help="one way, per direction")
    parser.add_argument("--mbit", type=float, default=50.0, help="per direction; 0: no cap")
    asyncio.run(_serve(parser.parse_args()))
