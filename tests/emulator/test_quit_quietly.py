"""Quitting the demo prints nothing: the emulated VMs' answers to a departing client's channel closes
must not surface as asyncio's ``socket.send() raised exception.`` (see vm_ssh._QuietGoodbyes), while
the same warning on any other loop still shows."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import threading

import pytest

from gcptui.remote.aio import within
from gcptui.remote.emulator.hosts.vm_ssh import GOODBYE_WARNING, quiet_goodbyes


class Lost(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.lost = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.set()


async def write_after_reset() -> None:
    """A loopback server whose client resets the connection, then writes as a busy SSH server does."""
    accepted: asyncio.Queue[Lost] = asyncio.Queue()

    def factory() -> Lost:
        protocol = Lost()
        accepted.put_nowait(protocol)
        return protocol

    server = await asyncio.get_running_loop().create_server(factory, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    protocol = await within(10, accepted.get())
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()  # a reset: the peer is gone
    await within(10, protocol.lost.wait())
    assert protocol.transport is not None
    for _ in range(8):  # asyncio warns from the fifth write on a lost connection
        protocol.transport.write(b"channel close")
    server.close()
    await server.wait_closed()


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == GOODBYE_WARNING]


async def test_the_goodbye_warning_is_dropped_on_an_emulator_loop_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="asyncio")

    # Control: on a loop that serves no emulated VM, asyncio's warning shows.
    def elsewhere() -> None:
        asyncio.run(write_after_reset())

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join(30)
    assert warnings_of(caplog), "the control did not provoke asyncio's warning"
    caplog.clear()

    quiet_goodbyes(asyncio.get_running_loop())  # what every emulated VM's SSH server does on start
    await write_after_reset()
    assert not warnings_of(caplog)
