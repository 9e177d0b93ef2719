"""Fan-out: three "VMs" (three dests on one sshd, each behind its own proxy on one shared uplink)
get one tree; the uplink carries its bytes once, to the seed, and the others fetch them from the
seed's relay, landing only bytes that hash to the laptop's digests. A relay that garbles bytes or
cannot be reached costs speed, never correctness: the laptop sends those files itself."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gcptui.remote.aio import within
from gcptui.remote.emulator import Emulator
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.sync import SyncSession
from gcptui.remote.sync.fanout import FanOut
from tests.cli.test_ls import gcptui
from tests.helpers.sshd import Sshd
from tests.helpers.wan import Uplink, WanProxy, add_known_host
from tests.sync.conftest import ssh_channel
from tests.sync.test_wan import getter
from tests.sync.trees import snapshot, wait_equal, write

BIG = 3 << 20


@pytest.fixture
async def links(sshd: Sshd) -> AsyncIterator[list[WanProxy]]:
    """Three proxies in front of the sshd, sharing one uplink (no delay: bytes, not time, are counted)."""
    uplink = Uplink()
    proxies = [
        await WanProxy(sshd.host, sshd.port, delay_ms=0, mbit=0, uplink=uplink).start() for _ in range(3)
    ]
    for proxy in proxies:
        add_known_host(str(sshd.known_hosts), proxy.host, proxy.port, sshd.host, sshd.port)
    yield proxies
    for proxy in proxies:
        await proxy.stop()


def tree(local: Path) -> int:
    write(local, "train.py", "print('hi')\n")
    write(local, "pkg/small.py", "x = 1\n")
    (local / "assets").mkdir()
    (local / "assets" / "a.bin").write_bytes(os.urandom(BIG))
    (local / "assets" / "b.bin").write_bytes(os.urandom(BIG // 2))
    return BIG + BIG // 2


def sessions(
    sshd: Sshd, links: list[WanProxy], local: Path, dests: list[Path], relay: FanOut
) -> list[SyncSession]:
    out = []
    for i, (proxy, dest) in enumerate(zip(links, dests, strict=True)):
        out.append(
            SyncSession(
                local, str(dest), ssh_channel(getter(sshd, proxy)), name=f"vm{i}", relay=relay if i else None
            )
        )
    return out


async def test_the_uplink_carries_the_tree_once_and_every_vm_gets_it(
    sshd: Sshd, links: list[WanProxy], tmp_path: Path
) -> None:
    local, dests = tmp_path / "local", [tmp_path / f"vm{i}" / "project" for i in range(3)]
    size = tree(local)
    relay = FanOut(ssh_channel(getter(sshd, links[0])), str(dests[0]), sshd.host)
    all_ = sessions(sshd, links, local, dests, relay)
    try:
        await asyncio.gather(*(s.full_sync(complete=True) for s in all_))
        for dest in dests:
            assert snapshot(dest) == snapshot(local)
        assert links[0].stats.up > size  # the seed got the bytes over the uplink ...
        for proxy in links[1:]:
            assert proxy.stats.up < size // 20  # ... the others only the plan's headers
        # Live follow fans out the same way: a large change goes by relay, an edit directly.
        followers = [asyncio.create_task(s.follow()) for s in all_]
        before = [p.stats.up for p in links]
        (local / "assets" / "c.bin").write_bytes(os.urandom(BIG))
        write(local, "train.py", "print('edited')\n")
        # A private key in the same large batch: neither relayed nor sent, on any VM.
        key = (
            "-----BEGIN OPENSSH PRIVATE KEY-----\n" + "b3Blbn" * 120 + "\n-----END OPENSSH PRIVATE KEY-----\n"
        )
        write(local, "leak.txt", key)
        for dest in dests:
            await wait_equal(dest, lambda: {k: v for k, v in snapshot(local).items() if k != "leak.txt"})
        assert links[1].stats.up - before[1] < BIG // 20
        for task in followers:
            task.cancel()
        await asyncio.gather(*followers, return_exceptions=True)
    finally:
        relay.close()
        for s in all_:
            await s.close()


class _FakeRelay(FanOut):
    """A seed VM gone bad, at the relay's own endpoint: it answers with other bytes, or nothing."""

    def __init__(self, endpoint: tuple[str, int, str]) -> None:
        super().__init__(lambda: None, "", endpoint[0])  # type: ignore[arg-type, return-value]
        self._fake = endpoint

    async def endpoint(self) -> tuple[str, int, str] | None:
        return self._fake


@pytest.mark.parametrize("bad", ["garbles", "unreachable"])
async def test_a_bad_relay_costs_speed_never_correctness(
    sshd: Sshd, links: list[WanProxy], tmp_path: Path, bad: str
) -> None:
    local, dest = tmp_path / "local", tmp_path / "vm1" / "project"
    size = tree(local)
    server: asyncio.Server | None = None
    if bad == "garbles":

        async def garble(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readline()  # the token: anything goes for this relay
            while line := await reader.readline():
                wanted = int(line.split(b'"s": ')[1].split(b",")[0])
                writer.write(struct.pack(">q", wanted) + os.urandom(wanted))  # right size, wrong bytes
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(garble, sshd.host, 0)
        port = server.sockets[0].getsockname()[1]
    else:
        with socket.socket() as probe:  # a port nothing listens on
            probe.bind((sshd.host, 0))
            port = probe.getsockname()[1]
    session = SyncSession(
        local, str(dest), ssh_channel(getter(sshd, links[1])), relay=_FakeRelay((sshd.host, port, "t"))
    )
    try:
        result = await session.full_sync(complete=True)
        assert snapshot(dest) == snapshot(local)  # every file landed, with the laptop's bytes
        assert not result.failed
        assert links[1].stats.up > size  # ... sent by the laptop after the relay failed
    finally:
        await session.close()
        if server is not None:
            server.close()
            await server.wait_closed()


def test_cli_sync_to_three_vms_sends_the_bytes_once(emulator_thread: EmulatorThread, tmp_path: Path) -> None:
    """`gcptui sync --once A B C` on the emulator: the other two VMs fetch the large file from the
    first over their internal addresses, and every VM holds the tree."""
    emu = emulator_thread
    names = ("vm-a", "vm-b", "vm-c")
    for name in names:
        emu.add_instance(name, "us-central1-a")
    for name in names:
        emu.wait_for_status(name, "RUNNING")
    local = tmp_path / "project"
    tree(local)
    config = emu.write_config(tmp_path / "emu" / "gcptui.toml", sync_source=local)
    result = gcptui("--config", str(config), "sync", "--once", *names, cwd=local)
    assert result.returncode == 0, result.stderr
    assert "3 in sync (4 files machine-to-machine from vm-a)" in result.stderr, result.stderr
    for name in names:
        assert snapshot(emu.instance(name).disk / "home" / "project") == snapshot(local)  # type: ignore[operator]


async def test_the_relay_serves_only_token_holders_only_files_below_dest_by_digest(
    sshd: Sshd, links: list[WanProxy], tmp_path: Path
) -> None:
    """What another VM can get from a relay: nothing without the token; with it, only a regular
    file below dest whose bytes hash to the digest asked for; a path out of dest, or through a
    link, is refused at once."""
    import hashlib

    dest, outside = tmp_path / "seed" / "project", tmp_path / "outside"
    write(dest, "real.txt", "relayed\n")
    write(outside, "secret.txt", "not yours\n")
    (dest / "lnk").symlink_to(outside)
    relay = FanOut(ssh_channel(getter(sshd, links[0])), str(dest), sshd.host)
    try:
        endpoint = await relay.endpoint()
        assert endpoint is not None
        host, port, token = endpoint

        async def ask(tok: str, rel: str, data: bytes) -> bytes:
            reader, writer = await asyncio.open_connection(host, port)
            line = f'{{"p": "{rel}", "s": {len(data)}, "h": "{hashlib.sha256(data).hexdigest()}"}}\n'
            writer.write(tok.encode() + b"\n" + line.encode())
            await writer.drain()
            try:
                head = await within(10, reader.readexactly(8))
            except asyncio.IncompleteReadError as err:
                head = err.partial
            writer.close()
            return head

        secret = (outside / "secret.txt").read_bytes()
        assert await ask("wrong", "real.txt", b"relayed\n") == b""  # hung up on
        assert struct.unpack(">q", await ask(token, "real.txt", b"relayed\n"))[0] == 8
        for rel in ("../outside/secret.txt", "lnk/secret.txt"):
            (n,) = struct.unpack(">q", await ask(token, rel, secret))
            assert n < 0  # refused, not waited on
    finally:
        relay.close()


async def test_tui_live_sync_of_two_vms_relays_a_large_change(emulator: Emulator, tmp_path: Path) -> None:
    """`y` on two VMs: the second's large batches come from the first over its internal address."""
    from gcptui.remote.config import load_config
    from gcptui.remote.sync import BatchApplied
    from gcptui.tui.app import GcptuiApp
    from tests.tui.test_fleet_jobs import until

    for name in ("vm-a", "vm-b"):
        emulator.add_instance(name, "us-central1-a")
    for name in ("vm-a", "vm-b"):
        await emulator.wait_for_status(name, "RUNNING")
    local = tmp_path / "project"
    write(local, "train.py", "print('hi')\n")
    config = emulator.write_config(tmp_path / "gcptui.toml", sync_source=local)
    dests = [emulator.instance(n).disk / "home" / "project" for n in ("vm-a", "vm-b")]  # type: ignore[operator]
    app = GcptuiApp(load_config(config), refresh_seconds=0.5)
    batches: list[BatchApplied] = []
    async with app.run_test(size=(180, 30)) as pilot:
        app.services.sync_batch_listeners.append(batches.append)
        await until(
            pilot, lambda: all(app.live.get(n) is not None and app.live[n].job for n in ("vm-a", "vm-b"))
        )
        await pilot.press("y", "down", "y")
        await until(pilot, lambda: all(app.live[n].sync_state == "in_sync" for n in ("vm-a", "vm-b")))
        (local / "data.bin").write_bytes(os.urandom(BIG))
        await until(pilot, lambda: all((d / "data.bin").exists() for d in dests), timeout=30)
        await until(pilot, lambda: any(b.name == "vm-b" and b.relayed for b in batches), timeout=30)
    for dest in dests:
        assert snapshot(dest) == snapshot(local)


async def test_a_fetch_keeps_the_receiving_vms_containment(
    sshd: Sshd, links: list[WanProxy], tmp_path: Path
) -> None:
    """A relayed file lands under the same rules as a sent one: where the receiving VM holds a link
    in place of a directory, nothing is written through it, and the VM reports the path."""
    local, dests = tmp_path / "local", [tmp_path / f"vm{i}" / "project" for i in range(2)]
    tree(local)
    outside = tmp_path / "outside"
    outside.mkdir()
    dests[1].mkdir(parents=True)
    (dests[1] / "assets").symlink_to(outside)  # the VM's own link where the tree has a folder
    relay = FanOut(ssh_channel(getter(sshd, links[0])), str(dests[0]), sshd.host)
    pair = sessions(sshd, links[:2], local, dests, relay)
    try:
        seed, other = await asyncio.gather(*(s.full_sync() for s in pair))
        assert not seed.failed and other.failed  # assets/ refused on vm1, not followed
        assert list(outside.iterdir()) == []
        assert snapshot(dests[0]) == snapshot(local)
    finally:
        relay.close()
        for s in pair:
            await s.close()
