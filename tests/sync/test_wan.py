"""Sync through the WAN proxy (tests/helpers/wan.py) in front of OpenSSH sshd: not timed, but the
link's delay and bandwidth cap are in the path, so the proxy itself runs in CI, and the bytes it
carried show what a warm resync costs."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncssh
import pytest

from gcptui.remote.aio import within
from gcptui.remote.sync import SyncSession
from gcptui.remote.sync.agent_client import view_digest
from gcptui.remote.sync.manifest import Entry
from tests.helpers.sshd import Sshd
from tests.helpers.wan import Uplink, WanProxy, add_known_host
from tests.sync.conftest import ssh_channel
from tests.sync.trees import snapshot, wait_equal, wait_for, write


@pytest.fixture
async def wan(sshd: Sshd) -> AsyncIterator[WanProxy]:
    """A 10 ms-each-way, 20 Mbit/s link in front of the test's sshd."""
    async with WanProxy(sshd.host, sshd.port, delay_ms=10, mbit=20) as proxy:
        add_known_host(str(sshd.known_hosts), proxy.host, proxy.port, sshd.host, sshd.port)
        yield proxy


def getter(sshd: Sshd, proxy: WanProxy):  # noqa: ANN201 - a ConnectionGetter
    conns: list[asyncssh.SSHClientConnection] = []

    async def get() -> asyncssh.SSHClientConnection:
        if not conns or conns[-1].is_closed():
            conns.append(
                await asyncssh.connect(
                    proxy.host,
                    port=proxy.port,
                    username=sshd.user,
                    client_keys=[str(sshd.client_key)],
                    known_hosts=str(sshd.known_hosts),
                )  # fmt: skip
            )
        return conns[-1]

    get.conns = conns  # type: ignore[attr-defined]
    return get


async def test_follow_through_the_wan_link_ends_with_equal_trees(
    sshd: Sshd, wan: WanProxy, tmp_path: Path
) -> None:
    local, remote = tmp_path / "local", tmp_path / "vm" / "project"
    for i in range(200):
        write(local, f"src/m{i % 7}/f{i}.py", f"print({i})\n" * (1 + i % 30))
    write(local, "data/blob.bin", os.urandom(300_000))  # more than the link carries in 100 ms
    get = getter(sshd, wan)
    session = SyncSession(local, str(remote), ssh_channel(get), name="wan")
    task = asyncio.create_task(session.follow())
    try:
        await wait_for(lambda: session.state == "in_sync" or task.done(), 30, "first full sync")
        await wait_equal(remote, lambda: snapshot(local))
        # Edits, a new directory, a deletion, a link: each crosses the delayed, capped link.
        write(local, "src/m0/f0.py", "edited\n")
        write(local, "new/deep/file.txt", "made while following")
        (local / "src/m1/f1.py").unlink()
        os.symlink("../src/m2/f2.py", local / "new/link.py")
        await wait_equal(remote, lambda: snapshot(local), timeout=30)
        await session.barrier(timeout=30)
        assert snapshot(remote) == snapshot(local)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for conn in get.conns:  # type: ignore[attr-defined]
            conn.close()
    assert wan.stats.connections >= 1
    assert wan.stats.up > 300_000  # the blob went through the proxy, not around it


async def test_warm_resync_sends_a_digest_not_the_listing(sshd: Sshd, wan: WanProxy, tmp_path: Path) -> None:
    local, remote = tmp_path / "local", tmp_path / "vm" / "project"
    for i in range(1500):
        write(local, f"pkg{i % 20}/module_with_a_long_name_{i}.py", f"x = {i}\n")
    get = getter(sshd, wan)
    session = SyncSession(local, str(remote), ssh_channel(get), name="wan")
    try:
        await session.full_sync()
        cold_listing = wan.stats.down
        before = wan.stats.down
        result = await session.full_sync()
        warm = wan.stats.down - before
        assert result.bytes == 0 and result.files == 0
        # The first full sync brought back a listing of 1,500 paths (compressed, still kilobytes);
        # the warm one only the agent's "same" answer and the flush's.
        assert warm < 2_000, f"a warm no-op resync carried {warm} bytes back (cold: {cold_listing})"

        # A change on the VM behind sync's back makes the digests differ: the next resync lists
        # the VM again and puts the local content back.
        (remote / "pkg0/module_with_a_long_name_0.py").write_text("changed on the VM\n")
        await session.full_sync()
        assert snapshot(remote) == snapshot(local)
    finally:
        await session.close()
        for conn in get.conns:  # type: ignore[attr-defined]
            conn.close()


async def test_a_new_session_resyncs_with_the_view_an_earlier_one_saved(
    sshd: Sshd, wan: WanProxy, tmp_path: Path
) -> None:
    """The next process (`gcptui job start`, the TUI restarted) offers the view the last session
    saved on local disk: a VM that still holds it sends no listing. A VM changed meanwhile, or a
    saved view lost, costs one listing and nothing else."""
    local, remote = tmp_path / "local", tmp_path / "vm" / "project"
    for i in range(1500):
        write(local, f"pkg{i % 20}/module_with_a_long_name_{i}.py", f"x = {i}\n")

    async def one_session() -> tuple[int, int]:
        """(bytes the VM sent back, files written) for a whole session on its own connection."""
        get = getter(sshd, wan)
        session = SyncSession(local, str(remote), ssh_channel(get), name="wan")
        before = wan.stats.down
        try:
            result = await session.full_sync()
        finally:
            await session.close()
            for conn in get.conns:  # type: ignore[attr-defined]
                conn.close()
        assert snapshot(remote) == snapshot(local)
        return wan.stats.down - before, result.files

    first, written = await one_session()
    assert written >= 1500
    again, written = await one_session()
    assert written == 0
    # The first session's listing of 1,500 paths came back once; the second session's replies hold
    # only the connection's handshake and the agent's "same".
    views = list((Path(os.environ["XDG_CACHE_HOME"]) / "gcptui" / "sync-views").iterdir())
    assert len(views) == 1
    views[0].unlink()
    listed, _ = await one_session()
    assert listed - again > 10_000, f"saved view: {again} bytes back, listing: {listed}"

    # A change on the VM between sessions: the digests differ, the VM's listing comes back and
    # sync puts the local content back.
    (remote / "pkg0/module_with_a_long_name_0.py").write_text("changed on the VM\n")
    changed, written = await one_session()
    assert written == 1 and changed - again > 10_000

    # A damaged saved view is no view: its first line still claims the digest the VM holds, so the
    # VM answers "same", the rest does not read back, and a listing follows: the same result.
    views[0].write_bytes(views[0].read_bytes()[:-10])
    damaged, written = await one_session()
    assert written == 0 and damaged - again > 10_000


def test_the_client_and_agent_digests_agree() -> None:
    """Both ends hash the same canonical form (the agent's copy runs on the VM, standard library only)."""
    from gcptui.remote.vm import vm_file

    agent: dict = {"__name__": "sync_agent"}
    exec(compile(vm_file("sync_agent.py"), "sync_agent.py", "exec"), agent)  # noqa: S102 - our own file
    entries = {
        "a.py": Entry("f", 12, 1_700_000_000_123_456_789, 0o644),
        "d": Entry("d", mode=0o755),
        "d/ln": Entry("l", target="../a.py"),
        "é/ü.txt": Entry("f", 0, 5, 0o600),
    }
    ledger = {"a.py": ["f", 12, 1_700_000_000_123_456_789], "d": ["d", 0, 0]}
    rows = [[rel, e.kind, e.size, e.mtime_ns, e.mode, e.target] for rel, e in reversed(entries.items())]
    rows.append(["fifo", "o", 0, 0, 0, ""])  # special files: the client never keeps them
    assert agent["view_digest"](rows, ledger) == view_digest(entries, ledger)
    assert agent["view_digest"](rows[1:], ledger) != view_digest(entries, ledger)


async def test_the_link_delays_caps_and_overlaps_chunks() -> None:
    """The proxy is a pipe: each byte arrives ``delay`` after it left (no sooner), throughput stays
    under the cap, and chunks in flight share the delay instead of queueing behind each other."""
    received: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1 << 16):
            received.put_nowait((time.monotonic(), data))
        writer.close()

    server = await asyncio.start_server(sink, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with WanProxy("127.0.0.1", port, delay_ms=100, mbit=8) as link:
            _, writer = await asyncio.open_connection(link.host, link.port)
            sent = time.monotonic()
            for _ in range(20):  # 20 small writes, 5 ms apart: a per-chunk sleep would take 2 s
                writer.write(b"x")
                await writer.drain()
                await asyncio.sleep(0.005)
            got = 0
            while got < 20:
                arrived, data = await within(10, received.get())
                got += len(data)
                if got == len(data):
                    assert arrived - sent >= 0.099  # the first byte waited the full delay
            assert arrived - sent < 1.0  # ~0.2 s: the delays overlapped

            payload = b"y" * 500_000  # 4 Mbit at 8 Mbit/s: at least 0.5 s on the wire
            started = time.monotonic()
            writer.write(payload)
            await writer.drain()
            got = 0
            while got < len(payload):
                arrived, data = await within(20, received.get())
                got += len(data)
            assert arrived - started >= 0.5 + 0.1 - 0.02  # serialisation + delay (16 KiB granularity)
            writer.close()
        assert link.stats.up == 20 + len(payload)
    finally:
        server.close()
        await server.wait_closed()


async def test_compressible_files_travel_compressed_and_land_exact(
    sshd: Sshd, wan: WanProxy, tmp_path: Path
) -> None:
    """Source-like files cross the link zlib-compressed and land byte for byte; random data goes as
    it is (and after a MiB of it, that suffix is not tried again)."""
    local, remote = tmp_path / "local", tmp_path / "vm" / "project"
    text = "".join(f"def f{i}(x):\n    return x * {i}  # a comment\n" for i in range(400)).encode()  # ~18 KB
    for i in range(30):
        write(local, f"src/m{i}.py", text + str(i).encode())
    for i in range(30):
        write(local, f"data/r{i}.npy", os.urandom(40_000))
    get = getter(sshd, wan)
    session = SyncSession(local, str(remote), ssh_channel(get), name="wan")
    try:
        up = wan.stats.up
        await session.full_sync()
        assert snapshot(remote) == snapshot(local)
        carried = wan.stats.up - up
        raw = 30 * len(text) + 30 * 40_000
        # The sources (~0.55 MB) shrink to a few KB each way; the random data cannot shrink.
        assert carried < 30 * 40_000 + 0.3 * 30 * len(text), f"{carried} bytes carried for {raw}"
    finally:
        await session.close()
        for conn in get.conns:  # type: ignore[attr-defined]
            conn.close()


def test_the_packer_learns_which_kinds_do_not_compress() -> None:
    from gcptui.remote.sync.agent_client import Packer

    packer = Packer()
    assert packer.pack("a/train.py", b"x = 1\n" * 100) is not None
    assert packer.pack("a/tiny.py", b"x = 1\n") is None  # too small to bother
    noise = os.urandom(300_000)
    assert all(packer.pack(f"w{i}.npy", noise) is None for i in range(4))  # past 256 KiB tried: learnt
    calls = packer._tried["npy"][0]
    assert packer.pack("w9.npy", noise) is None and packer._tried["npy"][0] == calls  # not tried again
    assert packer.pack("b/eval.py", b"y = 2\n" * 100) is not None  # other kinds still compress


async def test_proxies_on_one_uplink_share_its_bandwidth() -> None:
    """Two VMs behind one home link: two connections sending at once through proxies that share an
    :class:`Uplink` take twice as long as one alone would (a lower bound: the wire cannot be faster),
    while proxies with their own links do not wait for each other."""
    got: dict[int, int] = {}
    done = asyncio.Event()
    payload = b"z" * 250_000  # 2 Mbit each: 0.25 s alone at 8 Mbit/s, 0.5 s for both on one link

    async def sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        port = writer.get_extra_info("sockname")[1]
        while data := await reader.read(1 << 16):
            got[port] = got.get(port, 0) + len(data)
            if sum(got.values()) >= 2 * len(payload):
                done.set()
        writer.close()

    servers = [await asyncio.start_server(sink, "127.0.0.1", 0) for _ in range(2)]
    ports = [s.sockets[0].getsockname()[1] for s in servers]

    async def send_both(shared: bool) -> float:
        got.clear()
        done.clear()
        uplink = Uplink()
        links = [
            await WanProxy(
                "127.0.0.1", p, delay_ms=5, mbit=8, **({"uplink": uplink} if shared else {})
            ).start()
            for p in ports
        ]
        try:
            writers = [(await asyncio.open_connection(link.host, link.port))[1] for link in links]
            started = time.monotonic()
            for writer in writers:
                writer.write(payload)
            await within(20, done.wait())
            elapsed = time.monotonic() - started
            for writer in writers:
                writer.close()
            return elapsed
        finally:
            for link in links:
                await link.stop()

    try:
        assert await send_both(shared=True) >= 2 * 0.25 + 0.005 - 0.03  # 4 Mbit through one 8 Mbit/s link
        assert await send_both(shared=False) < 2 * 0.25  # each on its own link: in parallel
    finally:
        for server in servers:
            server.close()
            await server.wait_closed()
