"""Full sync against a real sshd: copy, no-op, deletions limited to what sync put there."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from gcptui.remote.sync import BatchApplied, FullSyncProgress, SyncError, SyncSession, SyncWarning
from tests.sync.conftest import RemoteTarget
from tests.sync.trees import snapshot, write


def session(local: Path, target: RemoteTarget, **kw: object) -> SyncSession:
    return SyncSession(local, target.dest, target.channel, name="vm", **kw)  # type: ignore[arg-type]


async def test_full_sync_copies_the_tree_and_a_noop_resync_sends_no_data(
    local: Path, target: RemoteTarget
) -> None:
    write(local, "train.py", "print('hi')\n")
    write(local, "run.sh", "#!/bin/sh\necho run\n", mode=0o755)
    write(local, "pkg/module.py", b"x" * 100_000)
    write(local, "pkg/deep/er/empty.txt", b"")
    (local / "emptydir").mkdir()
    s = session(local, target)
    events: list = []
    s.subscribe(events.append)
    first = await s.full_sync()
    assert snapshot(target.root) == snapshot(local)
    assert first.files == 8 and first.bytes == 100_000 + 12 + 19
    assert any(isinstance(e, FullSyncProgress) and e.files_done == e.files_total == 4 for e in events)
    again = await s.full_sync()
    assert again == BatchApplied("vm", 0, 0, 0, again.ms, True)
    # A new session (fresh agent, ledger read back from the VM) agrees.
    assert (await session(local, target).full_sync()).bytes == 0
    await s.close()


async def test_full_sync_deletes_only_what_sync_put_there(local: Path, target: RemoteTarget) -> None:
    write(local, "a.py", "a")
    write(local, "gone.py", "old")
    write(local, "outputs/keep.txt", "local")
    await session(local, target).full_sync()
    write(target.root, "checkpoints/step1.ckpt", b"\0" * 10)  # training wrote it
    write(target.root, "results.csv", "1,2")
    (local / "gone.py").unlink()
    (local / "a.py").unlink()
    write(target.root, "a.py", "changed on the VM")  # training rewrote a synced file
    (local / "outputs" / "keep.txt").unlink()
    write(local, "new.py", "new")
    await session(local, target).full_sync()
    tree = snapshot(target.root)
    assert "gone.py" not in tree
    assert tree["a.py"][1] == b"changed on the VM"
    assert tree["checkpoints/step1.ckpt"][1] == b"\0" * 10
    assert tree["results.csv"][1] == b"1,2"
    assert tree["new.py"][1] == b"new"
    assert "outputs/keep.txt" not in tree


async def test_protected_paths_are_never_written_or_deleted(local: Path, target: RemoteTarget) -> None:
    write(local, "outputs/log.txt", "local log")
    write(local, "model.ckpt", "local ckpt")
    write(local, "src/a.py", "a")
    write(target.root, "outputs/log.txt", "remote log")
    await session(local, target, protect=["outputs", "*.ckpt"]).full_sync()
    tree = snapshot(target.root)
    assert tree["outputs/log.txt"][1] == b"remote log"
    assert "model.ckpt" not in tree
    assert tree["src/a.py"][1] == b"a"
    # Even a file sync itself put there is kept once protected.
    write(local, "keep.ckpt", "x")
    await session(local, target).full_sync()
    (local / "keep.ckpt").unlink()
    await session(local, target, protect=["*.ckpt"]).full_sync()
    assert (target.root / "keep.ckpt").exists()


async def test_an_empty_or_missing_source_stops_instead_of_wiping_the_vm(
    local: Path, target: RemoteTarget
) -> None:
    write(local, "a.py", "a")
    write(local, "b/c.py", "c")
    await session(local, target).full_sync()
    for path in ("a.py", "b/c.py"):
        os.unlink(local / path)
    os.rmdir(local / "b")
    with pytest.raises(SyncError, match="is empty"):
        await session(local, target).full_sync()
    os.rmdir(local)
    with pytest.raises(SyncError, match="does not exist"):
        await session(local, target).full_sync()
    assert snapshot(target.root) == {"a.py": ("f", b"a", 0), "b": ("d",), "b/c.py": ("f", b"c", 0)}


@pytest.mark.parametrize("dest", ["~", "~/", "/", "$HOME-literal"])
async def test_dest_of_root_or_home_is_refused(local: Path, target: RemoteTarget, dest: str) -> None:
    write(local, "a.py", "a")
    if dest == "$HOME-literal":
        dest = str(target.home)
    with pytest.raises(SyncError, match="remote root, home"):
        await SyncSession(local, dest, target.channel).full_sync()


async def test_a_barrier_refuses_when_the_vm_refused_part_of_the_tree(
    local: Path, target: RemoteTarget, tmp_path: Path
) -> None:
    write(local, "train.py", "import data.prep\n")
    write(local, "data/prep.py", "PREP = 2\n")
    target.root.mkdir(parents=True, exist_ok=True)
    (tmp_path / "disk").mkdir()
    os.symlink(tmp_path / "disk", target.root / "data")  # the VM's setup linked data to a disk
    s = session(local, target)
    with pytest.raises(
        SyncError,
        match=r"^sync to vm is incomplete: mkdir data: kept data: a link on the VM .* \(and 1 more\)$",
    ):
        await s.barrier(timeout=20)
    with pytest.raises(SyncError, match=r"is incomplete: mkdir data"):
        await s.full_sync(complete=True)  # the barrier of `job start`
    assert (await s.full_sync()).failed == 2  # a plain sync reports it (state incomplete) and returns
    assert s.state == "incomplete"
    await s.close()


async def test_a_delete_the_vm_refused_warns_but_does_not_block_a_job_start(
    local: Path, target: RemoteTarget
) -> None:
    write(local, "train.py", "print(1)\n")
    write(local, "runs/readme.txt", "x\n")
    s = session(local, target)
    warnings: list[str] = []
    s.subscribe(lambda e: warnings.append(e.message) if isinstance(e, SyncWarning) else None)
    assert (await s.full_sync(complete=True)).failed == 0
    write(target.root, "runs/ckpt.pt", "weights")  # the job's output, beside a synced file
    shutil.rmtree(local / "runs")  # the user drops the folder locally
    result = await s.full_sync(complete=True)  # the barrier of `job start`: passes
    assert result.failed == 0 and s.state == "in_sync"
    await s.barrier(timeout=20)  # keep-alive's relaunch: passes too
    assert (target.root / "runs" / "ckpt.pt").read_text() == "weights"
    assert not (target.root / "runs" / "readme.txt").exists()
    assert any(w.startswith("kept directory runs: it holds files") for w in warnings), warnings
    await s.close()


async def test_a_protect_pattern_ending_in_globstar_protects_the_folder_itself(
    local: Path, target: RemoteTarget
) -> None:
    write(local, "train.py", "print(1)\n")
    for rel in ("runs", "exp/ckpt"):
        (local / rel).mkdir(parents=True)
        os.chmod(local / rel, 0o755)
        (target.root / rel).mkdir(parents=True)
        os.chmod(target.root / rel, 0o700)  # training set its own mode
    result = await session(local, target, protect=["runs/**", "**/ckpt/**"]).full_sync(complete=True)
    assert result.failed == 0
    for rel in ("runs", "exp/ckpt"):
        assert stat.S_IMODE(os.stat(target.root / rel).st_mode) == 0o700, rel
