"""``gcptui keepalive``: the headless watcher as a real process, one log line per event."""

from __future__ import annotations

import asyncio
import signal
import sys

import pytest

from gcptui.remote.aio import within
from gcptui.remote.errors import ConfigError
from gcptui.tui.cli.keepalive import keep_alive
from tests.keepalive.conftest import ROOT
from tests.keepalive.test_recreate import JOB

SCRIPT = (
    "import argparse, sys; from gcptui.tui.cli.keepalive import run_keepalive; "
    "sys.exit(run_keepalive(argparse.Namespace(config=sys.argv[1], names=sys.argv[2:])))"
)


async def read_until(stream: asyncio.StreamReader, needle: str, seen: list[str], timeout: float = 60) -> str:
    async def scan() -> str:
        while True:
            line = (await stream.readline()).decode()
            if not line:
                raise AssertionError(f"output ended before {needle!r}: {seen}")
            seen.append(line.rstrip())
            if needle in line:
                return line

    return await within(timeout, scan())


async def test_keepalive_command_logs_each_event_and_stops_on_sigterm(fleet_factory) -> None:
    fleet = await fleet_factory(["spot-a", "spot-b"], command=JOB)
    for instance in await fleet.services.resolve(["spot-a"]):
        session = fleet.services.sync_session(instance)
        await session.full_sync()
        await session.close()
        await fleet.services.jobs.start(fleet.services.reach(instance))
    with fleet.config_path.open("a") as config:
        config.write("\n[keepalive]\npoll_seconds = 0.5\n")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SCRIPT, str(fleet.config_path), "spot-a", cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    seen: list[str] = []
    try:
        assert process.stdout is not None
        await read_until(process.stdout, "keep-alive: watching spot-a", seen)
        fleet.emu.preempt("spot-a")
        await read_until(process.stdout, "spot-a: preempted - GCE: stopped by a preemption", seen)
        await read_until(process.stdout, "spot-a: resumed", seen)
        summary = await read_until(process.stdout, "spot-a: resumed: preempted", seen)
        # Poll or the VM's own notice, whichever is first under load; either way resumed from the start.
        assert ("by poll" in summary or "by notice" in summary) and "resumed at step 0" in summary
        process.send_signal(signal.SIGTERM)
        await read_until(process.stdout, "keep-alive: stopped", seen)
        assert await within(20, process.wait()) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    for kind in ("restarting", "running", "connected", "synced", "started"):
        assert any(f"spot-a: {kind}" in line for line in seen), seen
    assert not any("spot-b" in line for line in seen)


async def test_unknown_name_is_one_clear_error(fleet_factory) -> None:
    fleet = await fleet_factory(["spot-a"], command=JOB)
    # A name that is not in the fleet is a usage error (exit 2), like any bad argument.
    with pytest.raises(ConfigError, match="no instance or host named 'nope'") as caught:
        await keep_alive(fleet.services, ["nope"], print, asyncio.Event())
    assert caught.value.exit_code == 2
