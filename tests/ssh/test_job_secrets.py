"""[job].env never shows in `ps` on the VM, and ~/.gcptui is private (0700, its files 0600)."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import psutil

from gcptui.remote.emulator import Emulator
from gcptui.remote.ssh.pool import SshPool
from tests.ssh.conftest import wait_for
from tests.ssh.emulated import boot, emulator_fixture, home, reach_of  # noqa: F401 - the fixture
from tests.ssh.test_jobs_emulator import runner_for

SECRET = 'tok-3f9a\'quote "dq" $HOME `x`\nsecond line'
SLEEPER = f"{sys.executable} -c 'import time; time.sleep(600)'"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def argv_with(needle: str) -> list[str]:
    hits = []
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        if needle in line:
            hits.append(line)
    return hits


async def test_env_reaches_the_job_but_never_argv_and_state_is_private(
    emulator: Emulator, pool: SshPool
) -> None:
    await boot(emulator, "spot-1")
    vm = await reach_of(emulator, pool, "spot-1")
    vm_home = home(emulator, "spot-1")
    command = f'printf %s "$API_TOKEN" > got.txt; echo "$PLAIN" > plain.txt; exec {SLEEPER}'
    runner = runner_for(command=command, env={"API_TOKEN": SECRET, "PLAIN": "visible-in-file-only"})
    started = await runner.start(vm)
    got = vm_home / "project" / "got.txt"

    async def written() -> bool:
        return got.exists() and got.read_text() == SECRET

    await wait_for(written, what="the job to see its environment")
    assert argv_with("tok-3f9a") == [] and argv_with("visible-in-file-only") == []
    state = vm_home / ".gcptui"
    assert mode(state) == 0o700 and mode(state / "job") == 0o700
    for path in (state / "job").iterdir():
        if path.is_file():
            assert mode(path) == 0o600, path
    assert mode(state / "job" / "env") == 0o600
    assert mode(got) == 0o644  # the job's own files keep the usual modes
    got.unlink()
    restarted = await runner.restart(vm)  # a restart sends the environment again
    assert restarted.pid != started.pid
    await wait_for(written, what="the restarted job to see its environment")
    assert argv_with("tok-3f9a") == []
    await runner.kill(vm)
