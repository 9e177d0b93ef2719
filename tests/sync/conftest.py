"""Fixtures for sync: a remote target is "a connection getter + a directory on the VM".

Tests are parametrized over targets so the emulator's VMs join with one more fixture param:
anything that yields a :class:`RemoteTarget` works.
"""

from __future__ import annotations

import asyncio
import getpass
import io
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import asyncssh
import pytest

from gcptui.remote.aio import within
from gcptui.remote.compute.ssh_exec import SshExecChannel
from gcptui.remote.emulator import Emulator
from gcptui.remote.models import ConnectionGetter
from gcptui.remote.sync import SyncSession
from tests.helpers.emulator import FAST
from tests.helpers.sshd import Sshd


@dataclass
class RemoteTarget:
    """Where a test syncs to: how to reach the VM, and how the test sees the VM's files."""

    get_conn: ConnectionGetter
    root: Path  # the VM's dest directory, as the test process sees it (loopback: same disk)
    dest: str  # what the session is told
    home: Path
    drop: Callable[[], Awaitable[None]]  # make the VM unreachable, dropping live connections
    restore: Callable[[], Awaitable[None]]

    @property
    def channel(self) -> SshExecChannel:
        """The exec channel a session runs its agent over: SSH through ``get_conn``."""
        return ssh_channel(self.get_conn)


def ssh_channel(get: ConnectionGetter, where: str = "vm") -> SshExecChannel:
    """The exec channel over SSH that ``Services.channel`` hands out, around a test's getter."""
    return SshExecChannel(get, lambda: where)


def openssh_getter(sshd: Sshd) -> ConnectionGetter:
    """A getter like the pool's: one cached connection, a fresh one after it closed."""
    state: dict[str, asyncssh.SSHClientConnection | None] = {"conn": None}

    async def get() -> asyncssh.SSHClientConnection:
        conn = state["conn"]
        if conn is None or conn.is_closed():
            conn = await within(
                5,
                asyncssh.connect(
                    sshd.host, port=sshd.port, username=sshd.user,
                    client_keys=[str(sshd.client_key)], known_hosts=str(sshd.known_hosts),
                    keepalive_interval=1, keepalive_count_max=2,
                ),
            )  # fmt: skip
            state["conn"] = conn
        return conn

    get.state = state  # type: ignore[attr-defined]
    return get


def emulated_getter(emu: Emulator, name: str) -> ConnectionGetter:
    """Like the pool's getter for an emulated VM: its address changes when it restarts."""
    state: dict[str, asyncssh.SSHClientConnection | None] = {"conn": None}
    vm = emu.instance(name)

    async def get() -> asyncssh.SSHClientConnection:
        conn = state["conn"]
        if conn is None or conn.is_closed():
            address = emu.address(name)
            if not address:
                raise OSError(f"{name} is not running")
            conn = await within(
                5,
                asyncssh.connect(
                    address, port=emu.ssh_port_of(name), username=getpass.getuser(), client_keys=[str(emu.client_key)],
                    known_hosts=str(emu.known_hosts), host_key_alias=f"compute.{vm.id}", agent_path=None,
                    config=None, keepalive_interval=1, keepalive_count_max=2,
                ),
            )  # fmt: skip
            state["conn"] = conn
        return conn

    get.state = state  # type: ignore[attr-defined]
    return get


@pytest.fixture(params=["openssh", "emulator"])
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RemoteTarget]:
    """A VM directory reachable over SSH: OpenSSH sshd on loopback, or an emulated VM."""
    if request.param == "openssh":
        sshd: Sshd = request.getfixturevalue("sshd")
        getter = openssh_getter(sshd)
        root = tmp_path / "vm" / "project"

        async def drop() -> None:
            await asyncio.to_thread(sshd.stop)

        async def restore() -> None:
            await asyncio.to_thread(sshd.start)

        home = sshd.home  # the test sshd gives its sessions their own HOME
        yield RemoteTarget(getter, root, str(root), home, drop, restore)
    else:
        emu = Emulator(tmp_path / "emulator", **FAST)
        await emu.start()
        emu.add_instance("vm", "us-central1-a")
        await emu.wait_for_status("vm", "RUNNING")
        getter = emulated_getter(emu, "vm")
        vm = emu.instance("vm")
        assert emu.fleet is not None
        fleet = emu.fleet
        home = emu.root / "vms" / "vm" / "home"

        # Dropping the VM is stopping it (its SSH server and every process go); restoring starts it
        # again on a new address with its disk kept, as GCE does.
        async def stop_vm() -> None:
            fleet.stop(vm)
            await emu.wait_for_status("vm", "TERMINATED")

        async def start_vm() -> None:
            fleet.start(vm)

        yield RemoteTarget(getter, home / "project", "~/project", home, stop_vm, start_vm)
    conn = getter.state["conn"]  # type: ignore[attr-defined]
    if conn is not None:
        conn.close()
    if request.param == "emulator":
        await emu.close()


@pytest.fixture
def local(tmp_path: Path) -> Path:
    """The local source tree."""
    root = tmp_path / "local"
    root.mkdir()
    return root


class Follower:
    """A session following in a background task; collects its events."""

    def __init__(self, session: SyncSession) -> None:
        self.session = session
        self.events: list = []
        session.subscribe(self.events.append)
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> Follower:
        self.task = asyncio.create_task(self.session.follow())
        from tests.sync.trees import wait_for

        await wait_for(lambda: self.session.state == "in_sync" or self.task.done(), 20, "first full sync")
        if self.task.done():
            self.task.result()
        return self

    async def stop(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
            # Bounded: a session that swallowed its cancellation would otherwise hang the test
            # until pytest's timeout, with no word of where it was.
            await asyncio.wait({self.task}, timeout=60)
            if not self.task.done():
                where = io.StringIO()
                self.task.print_stack(file=where)
                raise AssertionError(
                    f"the sync session did not stop within 60 s of its cancellation:\n{where.getvalue()}"
                )
            if not self.task.cancelled() and (error := self.task.exception()) is not None:
                raise error


@pytest.fixture
async def follow(target: RemoteTarget, local: Path) -> AsyncIterator[Callable[..., object]]:
    """``await follow(**session_kwargs)`` starts following ``local`` to ``target``."""
    followers: list[Follower] = []

    async def start(**kwargs: object) -> Follower:
        session = SyncSession(local, target.dest, target.channel, name="vm", **kwargs)  # type: ignore[arg-type]
        follower = Follower(session)
        followers.append(follower)
        return await follower.start()

    yield start
    for follower in followers:
        await follower.stop()
