"""What sync does with local paths it cannot read: keep the VM's copy, say so, never call it synced.

Permission bits must count, so the syncs whose local side hits them run in a child process without
root's override (see ``tests/sync/unprivileged.py``).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gcptui.remote.sync.local_tree import scan_tree
from gcptui.remote.sync.manifest import Entry
from gcptui.remote.sync.plan import make_plan
from gcptui.remote.sync.rules import PathSet, SyncRules
from tests.helpers.sshd import Sshd
from tests.sync.trees import snapshot, write
from tests.sync.unprivileged import full_sync_unprivileged


async def test_an_unlistable_local_directory_keeps_its_files_on_the_vm(sshd: Sshd, tmp_path: Path) -> None:
    local, root = tmp_path / "local", tmp_path / "vm" / "project"
    write(local, "train.py", "print(1)\n")
    for i in range(3):
        write(local, f"pkg/mod{i}.py", f"M = {i}\n")
    first = full_sync_unprivileged(sshd, local, str(root))
    assert first["result"]["files"] == 5 and not first["warnings"]
    before = snapshot(root)
    os.chmod(local / "pkg", 0o311)  # can be entered, not listed
    try:
        again = full_sync_unprivileged(sshd, local, str(root))
    finally:
        os.chmod(local / "pkg", 0o755)
    assert snapshot(root) == before
    assert stat.S_IMODE(os.stat(root / "pkg").st_mode) == 0o755  # its mode is not the VM's business either
    assert again["result"]["deleted"] == again["result"]["files"] == 0
    assert any("cannot read pkg (Permission denied)" in w for w in again["warnings"]), again["warnings"]


async def test_an_unlistable_local_directory_stops_a_job_start(sshd: Sshd, tmp_path: Path) -> None:
    local, root = tmp_path / "local", tmp_path / "vm" / "project"
    write(local, "train.py", "print(1)\n")
    write(local, "pkg/mod.py", "M = 1\n")
    assert not full_sync_unprivileged(sshd, local, str(root), complete=True)["error"]
    os.chmod(local / "pkg", 0o311)  # can be entered, not listed
    try:
        outcome = full_sync_unprivileged(sshd, local, str(root), complete=True)
    finally:
        os.chmod(local / "pkg", 0o755)
    assert outcome["error"] == "sync to vm is incomplete: cannot read pkg (Permission denied)"


async def test_a_directory_turning_unlistable_while_following_keeps_its_files_on_the_vm(
    sshd: Sshd, tmp_path: Path
) -> None:
    local, root = tmp_path / "local", tmp_path / "vm" / "project"
    write(local, "train.py", "print(1)\n")
    for i in range(3):
        write(local, f"pkg/mod{i}.py", f"M = {i}\n")
    try:
        outcome = full_sync_unprivileged(sshd, local, str(root), chmod_while_following=("pkg", 0o311))
    finally:
        os.chmod(local / "pkg", 0o755)
    assert outcome["result"] is None, outcome  # the batch changed nothing on the VM
    assert sorted(snapshot(root)) == ["pkg", "pkg/mod0.py", "pkg/mod1.py", "pkg/mod2.py", "train.py"]
    assert any("cannot read pkg (Permission denied)" in w for w in outcome["warnings"]), outcome["warnings"]


def test_a_plan_deletes_nothing_below_an_unreadable_local_path(tmp_path: Path) -> None:
    remote = {
        "pkg": Entry("d", mode=0o755),
        "pkg/a.py": Entry("f", 1, 5, 0o644),
        "b.py": Entry("f", 1, 5, 0o644),
    }
    ledger = {rel: e.ledger_key() for rel, e in remote.items()}
    rules, protect = SyncRules(tmp_path), PathSet([])
    plan = make_plan(
        {"pkg": Entry("d", mode=0o311)}, remote, ledger, rules=rules, protect=protect, keep=["pkg"]
    )
    assert plan.removes == ["b.py"] and not plan.mkdirs
    # The scan reports what it could not list, and only that (a vanished entry is simply absent).
    write(tmp_path, "t/ok.py", "x")
    assert scan_tree(tmp_path / "t", rules).unlisted == {}
    assert scan_tree(tmp_path, SyncRules(tmp_path), start="t/gone.py").unlisted == {}


async def test_an_unreadable_local_file_is_named_and_the_sync_is_incomplete(
    sshd: Sshd, tmp_path: Path
) -> None:
    local, root = tmp_path / "local", tmp_path / "vm" / "project"
    write(local, "train.py", "print(1)\n")
    write(local, "config.yaml", "lr: 0.1\n")
    write(local, "big.bin", b"b" * 3_000_000)
    os.chmod(local / "config.yaml", 0o200)  # owner write-only: the syncing user cannot read it
    os.chmod(local / "big.bin", 0o200)
    outcome = full_sync_unprivileged(sshd, local, str(root))
    assert outcome["result"]["failed"] == 2 and outcome["state"] == "incomplete"
    for name in ("config.yaml", "big.bin"):
        line = f"not synced: cannot read {name} (Permission denied); the VM keeps its copy"
        assert line in outcome["warnings"], outcome["warnings"]
    assert sorted(snapshot(root)) == ["train.py"]


def test_a_link_leading_out_through_another_link_is_left_out(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    write(root, "train.py", "x")
    write(tmp_path, "outside.txt", "a secret beside the tree")
    (root / "sub").mkdir()
    os.symlink("..", root / "sub" / "up")  # the tree's root: inside
    os.symlink("up/../outside.txt", root / "sub" / "x")  # lexically sub/outside.txt; really ../outside.txt
    os.symlink("up/train.py", root / "sub" / "ok")  # through the same link, and inside
    os.symlink(str(root / "sub" / "up" / ".." / "outside.txt"), root / "abs")
    scan = scan_tree(root, SyncRules(root))
    assert scan.links_out == {
        "sub/x": "up/../outside.txt",
        "abs": str(root / "sub" / "up" / ".." / "outside.txt"),
    }
    assert scan.entries["sub/up"] == Entry("l", target="..")
    assert scan.entries["sub/ok"] == Entry("l", target="up/train.py")
