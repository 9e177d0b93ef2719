"""Run one full sync in a child process that file permissions bind, even when the suite runs as root.

Root ignores permission bits (CAP_DAC_OVERRIDE), so an unreadable directory or file reads fine and
a test of what sync does with one would prove nothing. The child drops those capabilities with
``setpriv`` and syncs to the test's sshd; it prints what happened as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from tests.helpers.sshd import Sshd

DROP = "-dac_override,-dac_read_search"
REPO = Path(__file__).resolve().parents[2]


def unprivileged_prefix() -> list[str]:
    """The command prefix that makes permission bits count (skips the test when there is none)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: permission bits cannot be made to count")
    return ["setpriv", f"--inh-caps={DROP}", f"--bounding-set={DROP}"]


def full_sync_unprivileged(
    sshd: Sshd,
    local: Path,
    dest: str,
    timeout: float = 60,
    chmod_while_following: tuple[str, int] | None = None,
    complete: bool = False,
) -> dict:
    """One ``SyncSession.full_sync`` of ``local`` to ``dest`` on ``sshd``, run without permission
    override: {"result": BatchApplied fields or None, "error": str, "warnings": [...], "state": str}.

    ``complete``: as the barrier of ``job start`` (``full_sync(complete=True)``).
    ``chmod_while_following`` (path, mode): follow instead; once in sync, chmod the path and wait
    for the batch that change causes ("result" is that batch, None when it changed nothing)."""
    spec = {
        "host": sshd.host, "port": sshd.port, "user": sshd.user, "key": str(sshd.client_key),
        "known_hosts": str(sshd.known_hosts), "local": str(local), "dest": dest,
        "chmod": chmod_while_following, "complete": complete,
    }  # fmt: skip
    command = [*unprivileged_prefix(), sys.executable, "-m", "tests.sync.unprivileged", json.dumps(spec)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


async def _main(spec: dict) -> dict:
    import asyncssh

    from gcptui.remote.aio import within
    from gcptui.remote.compute.ssh_exec import SshExecChannel
    from gcptui.remote.sync import SyncError, SyncSession, SyncWarning

    conns: list[asyncssh.SSHClientConnection] = []

    async def get() -> asyncssh.SSHClientConnection:
        if not conns or conns[-1].is_closed():  # one connection, as the pool keeps
            conns.append(await within(
                10,
                asyncssh.connect(
                    spec["host"], port=spec["port"], username=spec["user"], client_keys=[spec["key"]],
                    known_hosts=spec["known_hosts"],
                ),
            ))  # fmt: skip
        return conns[-1]

    session = SyncSession(
        spec["local"], spec["dest"], SshExecChannel(get, lambda: "vm"), name="vm", debounce_ms=50
    )
    warnings: list[str] = []
    session.subscribe(lambda e: warnings.append(e.message) if isinstance(e, SyncWarning) else None)
    out: dict = {"result": None, "error": "", "warnings": warnings}
    try:
        if spec["chmod"]:
            out["result"] = await _follow_through_chmod(
                session, warnings, Path(spec["local"]), *spec["chmod"]
            )
        else:
            out["result"] = asdict(await session.full_sync(complete=spec["complete"]))
    except SyncError as err:
        out["error"] = str(err)
    finally:
        await session.close()
    out["state"] = session.state
    return out


async def _follow_through_chmod(
    session, warnings: list[str], local: Path, rel: str, mode: int
) -> dict | None:  # noqa: ANN001
    from gcptui.remote.sync import BatchApplied
    from tests.sync.trees import wait_for

    batches: list[BatchApplied] = []
    session.subscribe(lambda e: batches.append(e) if isinstance(e, BatchApplied) and not e.full else None)
    task = asyncio.create_task(session.follow())
    try:
        await wait_for(lambda: session.state == "in_sync" or task.done(), 20, "the first full sync")
        os.chmod(local / rel, mode)
        # A batch that changed the VM, or the warning of a batch that (rightly) changed nothing.
        seen = len(warnings)
        await wait_for(lambda: bool(batches) or len(warnings) > seen or task.done(), 20, "the chmod's batch")
    finally:
        task.cancel()
        await asyncio.wait({task})
    return asdict(batches[0]) if batches else None


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_main(json.loads(sys.argv[1])))))
