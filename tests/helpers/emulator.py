"""Fixtures and helpers for tests against the Compute API emulator (real servers on loopback).

Use from a ``conftest.py``: ``from tests.helpers.emulator import emulator, emulator_thread, ...``.

- ``emulator``: an ``Emulator`` with SSH, started on the test's event loop (async tests).
- ``emulator_thread``: an ``EmulatorThread`` with SSH, for synchronous tests (CLI, GceClient).
- ``api_emulator``: an ``EmulatorThread`` without SSH, paging after 2 items.
- ``gce_for(emu)``: a ``GceClient`` pointed at an emulator.
"""

from __future__ import annotations

import asyncio
import getpass
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from gcptui.remote.cloud.auth import build_credentials
from gcptui.remote.cloud.compute_rest import ComputeReader
from gcptui.remote.cloud.gce import GceClient
from gcptui.remote.emulator import Emulator
from gcptui.remote.emulator.thread import EmulatorThread

# Quick enough for a fast suite, slow enough that tests see the intermediate states.
FAST = {"boot_seconds": 0.15, "stop_seconds": 0.15, "preempt_grace_seconds": 2.0}


@pytest.fixture
async def emulator(tmp_path: Path) -> AsyncIterator[Emulator]:
    """An SSH-enabled emulator on the test's loop; every VM process is gone after the test."""
    emu = Emulator(tmp_path / "emulator", **FAST)
    await emu.start()
    try:
        yield emu
    finally:
        await emu.close()


@pytest.fixture
def emulator_thread(tmp_path: Path) -> Iterator[EmulatorThread]:
    """An SSH-enabled emulator on a background thread, for synchronous callers."""
    with EmulatorThread(tmp_path / "emulator", **FAST) as emu:
        yield emu


@pytest.fixture
def api_emulator(tmp_path: Path) -> Iterator[EmulatorThread]:
    """An API-only emulator (no SSH) with pages of 2 items, so every list pages."""
    with EmulatorThread(tmp_path / "emulator", ssh=False, page_size=2, **FAST) as emu:
        yield emu


def gce_for(emu: Emulator | EmulatorThread, zones: list[str] | None = None, **options: Any) -> GceClient:
    """The real client library, pointed at the emulator."""
    options.setdefault("access_token", emu.token)
    return GceClient(emu.project, zones or [], emu.endpoint, **options)


def reader_for(
    emu: Emulator | EmulatorThread, zones: list[str] | None = None, timeout: float = 30.0
) -> ComputeReader:
    """gcptui's JSON reader (no client library), pointed at the emulator."""
    credentials = build_credentials(emu.endpoint, emu.token)
    return ComputeReader(emu.project, zones or [], emu.endpoint, credentials, timeout=timeout)


async def connect(emu: Emulator, name: str, **options: Any) -> asyncssh.SSHClientConnection:
    """SSH to an emulated VM as gcptui does: host key checked via known_hosts and the ``compute.<id>`` alias."""
    vm = emu.instance(name)
    address = emu.address(name)
    assert address, f"{name} is not running"
    return await asyncssh.connect(
        address,
        port=emu.ssh_port_of(name),
        username=getpass.getuser(),
        client_keys=[str(emu.client_key)],
        known_hosts=str(emu.known_hosts),
        host_key_alias=f"compute.{vm.id}",
        agent_path=None,
        config=None,
        connect_timeout=10,
        **options,
    )


async def eventually(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll until ``predicate()`` is truthy (returned), or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        await asyncio.sleep(interval)


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Synchronous ``eventually``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        time.sleep(interval)
