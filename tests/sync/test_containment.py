"""Sync never writes, renames, chmods or deletes outside dest, whatever the VM's processes do.

Each test keeps a victim directory beside dest and compares its tree (names, kinds, bytes, modes)
before and after, while the VM side swaps directories for links to it. Runs against OpenSSH sshd
and an emulated VM (the ``target`` fixture).
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from gcptui.remote.aio import within
from gcptui.remote.sync import SyncSession, SyncWarning
from tests.sync.conftest import RemoteTarget
from tests.sync.trees import snapshot, wait_equal, wait_for, write


def make_victim(target: RemoteTarget, name: str = "victim") -> Path:
    victim = target.root.parent / name
    write(victim, "a.py", "precious a")
    write(victim, "keep/b.py", "precious b")
    return victim


async def test_a_parent_replaced_by_a_link_during_follow(local: Path, target: RemoteTarget, follow) -> None:
    write(local, "src/a.py", "a")
    write(local, "src/b.py", "b")
    write(local, "top.py", "top")
    f = await follow(reconcile_seconds=0.5)
    # The job moves src out of dest and leaves a link in its place: the moved files match the
    # ledger's records exactly, so only path resolution can keep sync from deleting them.
    victim = target.root.parent / "elsewhere"
    os.rename(target.root / "src", victim)
    os.symlink(victim, target.root / "src")
    before = snapshot(victim)
    (local / "src" / "a.py").unlink()
    write(local, "src/b.py", "b, changed")
    write(local, "src/c.py", "new")
    os.chmod(local / "src", 0o700)
    await wait_for(lambda: f.session.state == "incomplete", 15, "the refusal")
    write(local, "top.py", "still following")
    await wait_for(lambda: (target.root / "top.py").read_text() == "still following", 15, "later changes")
    assert snapshot(victim) == before
    assert os.path.islink(target.root / "src")
    assert any(isinstance(e, SyncWarning) and "src" in e.message for e in f.events)


async def test_a_directory_swapped_back_and_forth_mid_batch(
    local: Path, target: RemoteTarget, follow
) -> None:
    write(local, "pkg/seed.py", "seed")
    f = await follow(reconcile_seconds=0.3)
    victim = make_victim(target)
    before = snapshot(victim)
    stop = threading.Event()
    swaps = 0

    def swap() -> None:  # the VM's side: pkg is a directory, then a link to the victim, and so on
        nonlocal swaps
        pkg, away = target.root / "pkg", target.root / "pkg.away"
        while not stop.is_set():
            try:
                os.rename(pkg, away)
                os.symlink(victim, pkg)
                os.unlink(pkg)
                os.rename(away, pkg)
                swaps += 1
            except OSError:
                pass

    racer = threading.Thread(target=swap)
    racer.start()
    try:
        for round_ in range(6):
            for i in range(60):
                write(local, f"pkg/f{i}.py", f"round {round_} file {i}")
            for name in ("a.py", "keep/b.py"):
                write(local, f"pkg/{name}", f"round {round_}")
            if round_ % 2:
                shutil.rmtree(local / "pkg" / "keep")
            # A full diff while the watched batches also run (not a barrier: while the VM swaps pkg
            # for a link, an operation may fail, and a barrier then rightly refuses).
            await within(20, f.session.full_sync())
    finally:
        stop.set()
        racer.join()
    assert swaps > 0
    assert snapshot(victim) == before
    # Once the VM stops fighting, the next full diff brings everything over.
    pkg, away = target.root / "pkg", target.root / "pkg.away"
    if pkg.is_symlink():
        pkg.unlink()
    if away.exists():  # sync may have made a new pkg while the old one was away: the old one goes
        shutil.rmtree(away) if pkg.exists() else os.rename(away, pkg)
    await wait_equal(target.root, lambda: snapshot(local), timeout=20)
    assert snapshot(victim) == before


async def test_a_local_directory_never_replaces_a_file_the_vm_wrote(
    local: Path, target: RemoteTarget
) -> None:
    write(local, "train.py", "train")
    session = SyncSession(local, target.dest, target.channel, name="vm")
    warnings: list[SyncWarning] = []
    session.subscribe(lambda e: warnings.append(e) if isinstance(e, SyncWarning) else None)
    first = await session.full_sync()
    assert first.failed == 0 and session.state == "in_sync"
    write(target.root, "outputs", "written by the job")  # the VM's own file, not in the ledger
    write(local, "outputs/a.txt", "local")
    result = await session.full_sync()
    assert result.failed >= 1
    assert session.state == "incomplete" and "outputs" in f"{session._reason}"
    assert (target.root / "outputs").read_text() == "written by the job"
    assert any("outputs" in w.path and "did not put there" in w.message for w in warnings)
    # The other way round too: a local file never replaces a directory the VM made.
    (target.root / "ckpt").mkdir()
    write(target.root, "ckpt/step1.pt", "weights")
    write(local, "ckpt", "a file now")
    await session.full_sync()
    assert (target.root / "ckpt" / "step1.pt").read_text() == "weights"
    assert session.state == "incomplete"
    await session.close()


async def test_dest_itself_may_be_a_link_nothing_below_it(local: Path, target: RemoteTarget) -> None:
    real = target.root.parent / "real-project"
    real.mkdir(parents=True)
    target.root.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(real, target.root)
    victim = make_victim(target)
    os.symlink(victim / "a.py", real / "cfg.py")  # a link the VM made, where the local tree has a file
    os.symlink(victim, real / "data")  # and one where the local tree has a directory
    before = snapshot(victim)
    write(local, "main.py", "main")
    write(local, "cfg.py", "local cfg")
    write(local, "data/x.bin", "x")
    session = SyncSession(local, target.dest, target.channel, name="vm")
    result = await session.full_sync()
    assert (real / "main.py").read_text() == "main"  # dest reached through its link
    assert result.failed >= 2 and session.state == "incomplete"
    assert os.readlink(real / "cfg.py") == str(victim / "a.py")
    assert snapshot(victim) == before
    # Deleting what sync put there works through dest's link, and still nothing outside moves.
    (local / "main.py").unlink()
    await session.full_sync()
    assert not (real / "main.py").exists()
    assert snapshot(victim) == before
    await session.close()
