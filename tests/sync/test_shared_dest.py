"""The agent beside others on the VM: two sessions on one dest (the TUI following while ``job start``
syncs) never undo each other, and an agent bound by permission bits still fills read-only folders."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gcptui.remote.sync import SyncSession, SyncWarning
from tests.helpers.sshd import Sshd, sshd_available
from tests.sync.conftest import openssh_getter, ssh_channel
from tests.sync.trees import snapshot, write
from tests.sync.unprivileged import unprivileged_prefix


def boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:12]


async def test_a_scan_removes_only_temp_files_whose_writer_is_gone(sshd: Sshd, tmp_path: Path) -> None:
    local, root = tmp_path / "local", tmp_path / "vm" / "project"
    write(local, "train.py", "print(1)\n")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    started = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])
    # This test process stands for a live agent.
    live_tmp = f".gcptui-tmp.{os.getpid()}.{boot_id()}.{started}.7"
    live_older_form_tmp = f".gcptui-tmp.{os.getpid()}.{boot_id()}.7"  # no start time: the pid decides
    reused_pid_tmp = f".gcptui-tmp.{os.getpid()}.{boot_id()}.{started + 1}.7"  # a writer gone, its pid reused
    dead_tmp = f".gcptui-tmp.{int(dead.stdout)}.{boot_id()}.{started}.7"
    old_boot_tmp = f".gcptui-tmp.{os.getpid()}.000000000000.{started}.7"
    for name in (live_tmp, live_older_form_tmp, reused_pid_tmp, dead_tmp, old_boot_tmp):
        write(root, f"weights/{name}", b"partial")
    session = SyncSession(local, str(root), ssh_channel(openssh_getter(sshd)), name="vm")
    try:
        await session.full_sync()
    finally:
        await session.close()
    left = sorted(p.name for p in (root / "weights").iterdir())
    assert left == sorted([live_tmp, live_older_form_tmp])  # writes in flight stay; the orphans go


@pytest.fixture
def unprivileged_sshd(tmp_path: Path, client_key: Path) -> Iterator[Sshd]:
    """An sshd whose sessions (the agent) are bound by permission bits, even when run as root."""
    if not sshd_available():
        pytest.skip("OpenSSH sshd is not installed (apt-get install openssh-server)")
    server = Sshd(tmp_path / "sshd", "127.0.0.91", client_key, launcher=unprivileged_prefix())
    server.setup()
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_directory_modes_are_synced_and_a_read_only_directory_still_fills(
    unprivileged_sshd: Sshd, tmp_path: Path
) -> None:
    local, root = tmp_path / "local", tmp_path / "vm" / "project"
    write(local, "ro/sub/data.txt", "x")
    write(local, "scripts/run.sh", "echo\n")
    for rel in ("ro/sub", "ro"):
        os.chmod(local / rel, 0o555)
    session = SyncSession(local, str(root), ssh_channel(openssh_getter(unprivileged_sshd)), name="vm")
    try:
        first = await session.full_sync()
        assert first.failed == 0 and first.files == 5 and session.state == "in_sync"
        assert snapshot(root) == snapshot(local)
        assert stat.S_IMODE(os.stat(root / "ro").st_mode) == 0o555
        os.chmod(local / "scripts", 0o700)  # a directory's mode alone changed
        await session.full_sync()
        assert stat.S_IMODE(os.stat(root / "scripts").st_mode) == 0o700
    finally:
        await session.close()
        for rel in ("ro", "ro/sub"):
            for tree in (local, root):
                if (tree / rel).is_dir():
                    os.chmod(tree / rel, 0o755)


@pytest.fixture
def sshd_without_fowner(tmp_path: Path, client_key: Path) -> Iterator[Sshd]:
    """An sshd whose agent may not chmod what another user owns (CAP_FOWNER dropped too)."""
    if not sshd_available():
        pytest.skip("OpenSSH sshd is not installed (apt-get install openssh-server)")
    prefix = unprivileged_prefix()
    if prefix:
        drop = "-dac_override,-dac_read_search,-fowner"
        prefix = ["setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}"]
    server = Sshd(tmp_path / "sshd", "127.0.0.92", client_key, launcher=prefix)
    server.setup()
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_another_users_directory_keeps_its_mode_with_a_warning(
    sshd_without_fowner: Sshd, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a directory to another user")
    local, root = tmp_path / "local", tmp_path / "vm" / "project"
    write(local, "train.py", "print(1)\n")
    write(local, "outputs/.gitkeep", "")
    os.chmod(local / "outputs", 0o775)
    (root / "outputs").mkdir(parents=True)
    os.chmod(root / "outputs", 0o777)
    os.chown(root / "outputs", 12345, 12345)  # a container on the VM made it, as another user
    session = SyncSession(local, str(root), ssh_channel(openssh_getter(sshd_without_fowner)), name="vm")
    warnings: list[str] = []
    session.subscribe(lambda e: warnings.append(e.message) if isinstance(e, SyncWarning) else None)
    try:
        result = await session.full_sync(complete=True)  # the barrier of `job start`: passes
        assert result.failed == 0 and session.state == "in_sync"
        assert (root / "outputs" / ".gitkeep").exists()
        assert stat.S_IMODE(os.stat(root / "outputs").st_mode) == 0o777
        assert any(
            w.startswith("could not mkdir outputs on the VM: kept the mode of outputs") for w in warnings
        )
    finally:
        await session.close()


async def test_a_read_only_directory_sync_made_still_takes_later_changes(
    unprivileged_sshd: Sshd, tmp_path: Path
) -> None:
    local, root = tmp_path / "local", tmp_path / "vm" / "project"
    write(local, "ro/a.py", "A = 1\n")
    write(local, "ro/b.py", "B = 1\n")
    write(local, "keep.py", "K = 1\n")
    os.chmod(local / "ro", 0o555)
    session = SyncSession(local, str(root), ssh_channel(openssh_getter(unprivileged_sshd)), name="vm")
    try:
        assert (await session.full_sync()).failed == 0
        assert stat.S_IMODE(os.stat(root / "ro").st_mode) == 0o555
        write(local, "ro/a.py", "A = 22\n")  # root writes locally whatever the bits
        os.unlink(local / "ro" / "b.py")
        write(local, "ro/c.py", "C = 1\n")
        result = await session.full_sync(complete=True)
        assert result.failed == 0 and result.files == 2 and result.deleted == 1
        assert snapshot(root) == snapshot(local)
        assert stat.S_IMODE(os.stat(root / "ro").st_mode) == 0o555  # closed again
        os.chmod(local / "ro", 0o755)
        for name in ("a.py", "c.py"):
            os.unlink(local / "ro" / name)
        os.rmdir(local / "ro")
        assert (await session.full_sync(complete=True)).failed == 0
        assert sorted(p.name for p in root.iterdir()) == ["keep.py"]
    finally:
        await session.close()
        for tree in (local, root):
            if (tree / "ro").is_dir():
                os.chmod(tree / "ro", 0o755)
