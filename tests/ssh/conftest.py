"""Fixtures for the SSH layer and job control: targets on the real ``sshd`` fixture, a fast pool,
a job runner whose remote home is a temporary directory (so tests never touch the real ``~``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import psutil
import pytest

from gcptui.remote.compute.exec_channel import Reach
from gcptui.remote.compute.ssh_exec import pool_reach
from gcptui.remote.config import JobConfig, SshConfig
from gcptui.remote.jobs.runner import JobRunner
from gcptui.remote.ssh.pool import SshPool
from gcptui.remote.ssh.target import SshTarget
from tests.helpers.sshd import Sshd

FAST_SSH = SshConfig(connect_timeout=5.0, keepalive_seconds=1.0)


def target_of(server: Sshd, name: str = "box", **changes: object) -> SshTarget:
    """The ``SshTarget`` of a fixture sshd, verified against its own known-hosts file."""
    values: dict[str, object] = {
        "name": name,
        "address": server.host,
        "port": server.port,
        "user": server.user,
        "key": server.client_key,
        "known_hosts": server.known_hosts,
    }
    values.update(changes)
    return SshTarget(**values)  # type: ignore[arg-type]


async def wait_for(predicate: Callable[[], Awaitable[bool]], timeout: float = 10.0, what: str = "") -> None:
    """Poll ``predicate`` until true; a condition with a deadline, never a bare sleep."""
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        await asyncio.sleep(0.05)


def process_alive(pid: int | None) -> bool:
    """Alive and not a zombie (this machine's init does not reap orphans)."""
    if pid is None:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def group_members(pgid: int) -> list[int]:
    """Live processes in process group ``pgid``."""
    found = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return found


@pytest.fixture
def target(sshd: Sshd) -> SshTarget:
    return target_of(sshd)


@pytest.fixture
def host(pool: SshPool, target: SshTarget) -> Reach:
    """The fixture sshd as a job runner reaches it: over the test's pool, to ``target``."""
    return pool_reach(pool, target)


@pytest.fixture
async def pool() -> AsyncIterator[SshPool]:
    async with SshPool(FAST_SSH, backoff_initial=0.1, backoff_max=0.5) as the_pool:
        yield the_pool


@pytest.fixture
def remote_home(tmp_path: Path) -> Iterator[Path]:
    """The VM's home for job tests, with a project directory; kills what a test left running."""
    home = tmp_path / "home"
    (home / "project").mkdir(parents=True)
    yield home
    pgid_file = home / ".gcptui" / "job" / "pgid"
    try:
        pgid = int(pgid_file.read_text())
    except (OSError, ValueError):
        return
    # Only a group that is still this test's job: an ended job's pgid may belong to anyone now.
    if any(_belongs_to(pid, home) for pid in group_members(pgid)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def _belongs_to(pid: int, home: Path) -> bool:
    try:
        process = psutil.Process(pid)
        return str(home) in process.cwd() or any(str(home) in part for part in process.cmdline())
    except psutil.Error:
        return False


def make_runner(home: Path, **job: object) -> JobRunner:
    """A runner for ``[job]`` settings ``job`` in ``~/project`` of ``home``, with a short grace."""
    settings: dict[str, object] = {"stop_grace_seconds": 2.0}
    settings.update(job)
    return JobRunner(JobConfig(**settings), "~/project", remote_home=str(home))  # type: ignore[arg-type]
