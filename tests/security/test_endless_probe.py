"""A machine that answers every command with endless output (a hostile or broken VM) costs the
keep-alive a capped amount of memory, and its relaunch ends by the relaunch deadline."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from pathlib import Path

import asyncssh
import pytest

from gcptui.remote.aio import within
from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.errors import GcptuiError
from gcptui.remote.keepalive.relaunch import JobLauncher
from gcptui.remote.keepalive.relaunch_retry import relaunch_until
from gcptui.remote.models import SSH_PORT_LABEL
from gcptui.remote.services import Services

DEADLINE = 6.0
CHUNK = b"y" * 65_536


class _Open(asyncssh.SSHServer):
    def begin_auth(self, username: str) -> bool:
        return False  # anyone may log in: the hostile machine wants to be talked to


async def _flood(process: asyncssh.SSHServerProcess[bytes]) -> None:
    """Every command, ``true`` included, answers with output that never ends."""
    try:
        while True:
            process.stdout.write(CHUNK)
            await process.stdout.drain()
    except (OSError, asyncssh.Error):
        pass  # the client closed the channel: what we want it to do
    finally:
        process.exit(0)


def _rss() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def test_a_relaunch_against_endless_output_is_capped_and_ends_by_its_deadline(
    emulator: Emulator, tmp_path: Path
) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    server = await asyncssh.listen(
        "127.0.0.1", 0, server_factory=_Open, server_host_keys=[key], process_factory=_flood, encoding=None
    )  # fmt: skip
    port = server.sockets[0].getsockname()[1]
    emulator.add_instance("flood", "us-central1-a")
    config = load_config(str(emulator.write_config(tmp_path / "gcptui.toml")))
    known_hosts = tmp_path / "known_hosts"
    config = config.model_copy(
        update={"ssh": config.ssh.model_copy(update={"known_hosts": str(known_hosts)})}
    )
    services = Services(config)
    peak = start_rss = _rss()

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, _rss())
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    try:
        [row] = await services.resolve(["flood"])
        # The machine's address and port are the hostile server's, its pinned key the server's key.
        row = dataclasses.replace(
            row, external_ip="127.0.0.1", labels={**row.labels, SSH_PORT_LABEL: str(port)}
        )
        known_hosts.write_text(f"compute.{row.instance_id} {key.export_public_key().decode().strip()}\n")
        steps: list[str] = []
        began = time.monotonic()
        with pytest.raises(GcptuiError, match="could not relaunch"):
            await within(
                DEADLINE + 20,
                relaunch_until(
                    row, JobLauncher(services).relaunch, lambda kind, detail: steps.append(kind),
                    check=None, timeout=DEADLINE, backoff_base=0.2, backoff_cap=1.0,
                ),
            )  # fmt: skip
        took = time.monotonic() - began
    finally:
        sampler.cancel()
        await services.close()
        server.close()
        await server.wait_closed()
    assert took < DEADLINE + 5, took
    assert "connected" in steps  # the probe's endless answer was cut, and the relaunch went on
    assert peak - start_rss < 100 * 2**20, (peak - start_rss) / 2**20
