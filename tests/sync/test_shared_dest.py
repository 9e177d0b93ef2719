"""Two sessions on one dest (the TUI following while ``job start`` syncs): neither undoes the other."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gcptui.remote.sync import SyncSession
from tests.helpers.sshd import Sshd
from tests.sync.conftest import openssh_getter
from tests.sync.trees import write


def boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:12]


async def test_a_scan_removes_only_temp_files_whose_writer_is_gone(sshd: Sshd, tmp_path: Path) -> None:
    local, root = tmp_path / "local", tmp_path / "vm" / "project"
    write(local, "train.py", "print(1)\n")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    live_tmp = f".gcptui-tmp.{os.getpid()}.{boot_id()}.7"  # this test process stands for a live agent
    dead_tmp = f".gcptui-tmp.{int(dead.stdout)}.{boot_id()}.7"
    old_boot_tmp = f".gcptui-tmp.{os.getpid()}.000000000000.7"
    for name in (live_tmp, dead_tmp, old_boot_tmp):
        write(root, f"weights/{name}", b"partial")
    session = SyncSession(local, str(root), openssh_getter(sshd), name="vm")
    try:
        await session.full_sync()
    finally:
        await session.close()
    left = sorted(p.name for p in (root / "weights").iterdir())
    assert left == [live_tmp]  # another agent's write in flight stays; the orphans go
