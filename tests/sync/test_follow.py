"""Follow mode against a real sshd: each test ends with the VM's tree equal, byte by byte."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from gcptui.remote.sync import BatchApplied, SyncWarning
from tests.sync.conftest import RemoteTarget
from tests.sync.trees import snapshot, wait_equal, wait_for, write


async def test_create_modify_delete(local: Path, target: RemoteTarget, follow) -> None:
    write(local, "a.py", "one")
    await follow()
    write(local, "b.py", "new file")
    await wait_equal(target.root, lambda: snapshot(local))
    write(local, "a.py", "two, longer")
    await wait_equal(target.root, lambda: snapshot(local))
    (local / "b.py").unlink()
    await wait_equal(target.root, lambda: snapshot(local))


async def test_atomic_rename_save_is_a_write(local: Path, target: RemoteTarget, follow) -> None:
    write(local, "train.py", "v1")
    await follow()
    # vim-style: original -> backup, write new, delete backup.
    os.rename(local / "train.py", local / "train.py~")
    write(local, "train.py", "v2")
    (local / "train.py~").unlink()
    await wait_equal(target.root, lambda: snapshot(local))
    # editor-style: write a temp file, rename it over the original.
    write(local, ".train.py.swp", "v3")
    os.rename(local / ".train.py.swp", local / "train.py")
    await wait_equal(target.root, lambda: snapshot(local))
    assert snapshot(target.root)["train.py"][1] == b"v3"


async def test_directory_rename_rescans_both_subtrees(local: Path, target: RemoteTarget, follow) -> None:
    for i in range(5):
        write(local, f"old/sub/f{i}.py", f"{i}")
    await follow()
    os.rename(local / "old", local / "new")
    await wait_equal(target.root, lambda: snapshot(local))
    write(local, "new/sub/after.py", "written after the rename")  # the moved directory is watched
    await wait_equal(target.root, lambda: snapshot(local))
    os.rename(local / "new", local / "old")
    write(local, "old/sub/back.py", "back")
    await wait_equal(target.root, lambda: snapshot(local))


async def test_mkdir_p_then_immediate_writes(local: Path, target: RemoteTarget, follow) -> None:
    await follow()
    (local / "a" / "b" / "c" / "d").mkdir(parents=True)
    for depth in ("a", "a/b", "a/b/c", "a/b/c/d"):
        write(local, f"{depth}/file.txt", depth)
    (local / "a" / "b" / "c" / "d" / "e").mkdir()
    write(local, "a/b/c/d/e/late.txt", "late")
    await wait_equal(target.root, lambda: snapshot(local))


async def test_burst_of_3000_files(local: Path, target: RemoteTarget, follow) -> None:
    write(local, "seed.txt", "seed")
    f = await follow()
    for i in range(3000):
        write(local, f"burst/d{i % 30}/f{i}.txt", f"content {i}\n" * (i % 7))
    await wait_equal(target.root, lambda: snapshot(local), timeout=30)
    shutil.rmtree(local / "burst")
    await wait_equal(target.root, lambda: snapshot(local), timeout=30)
    # The trees match once the last batch landed; the session says so when its reply is read.
    await wait_for(lambda: f.session.state == "in_sync", 10, "the session to report in sync")


async def test_a_rewrite_within_one_timestamp_tick_is_sent(local: Path, target: RemoteTarget, follow) -> None:
    path = write(local, "train.py", "lr = 0.1\n")
    await follow()
    await wait_equal(target.root, lambda: snapshot(local))
    before = path.stat()
    # Same size and the same mtime as before: what a write within one coarse timestamp tick of
    # the one sync read looks like. Only the bytes tell; they must reach the VM.
    path.write_text("lr = 0.2\n")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    await wait_equal(target.root, lambda: snapshot(local))
    assert (target.root / "train.py").read_text() == "lr = 0.2\n"


async def test_events_for_unchanged_files_resend_nothing(local: Path, target: RemoteTarget, follow) -> None:
    paths = [write(local, f"src/m{i}.py", f"x = {i}\n" * 20) for i in range(200)]
    f = await follow()
    await wait_equal(target.root, lambda: snapshot(local))
    batches = len(f.events)
    # Events without new bytes, as late or repeated events (a burst written while sync was
    # paused, one write seen across two batches) arrive: same size, same mtime, same content.
    for path in paths:
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    write(local, "z_after.py", "sentinel\n")  # its batch comes after the events above
    await wait_equal(target.root, lambda: snapshot(local))
    await wait_for(lambda: f.session.state == "in_sync", 10, "the session to report in sync")
    sent = [e for e in f.events[batches:] if isinstance(e, BatchApplied)]
    assert sum(e.files for e in sent) == 1 and sum(e.bytes for e in sent) == len("sentinel\n")


async def test_names_with_spaces_and_non_ascii(local: Path, target: RemoteTarget, follow) -> None:
    write(local, "my notes.txt", "a")
    await follow()
    for rel in (
        "dir with space/ünïcödé файл.py",
        "日本語/データ.csv",
        "quote'n\"dq $x `y`.txt",
        "-leading-dash",
    ):
        write(local, rel, rel)
    await wait_equal(target.root, lambda: snapshot(local))
    os.rename(local / "日本語", local / "émoji 🎉")
    await wait_equal(target.root, lambda: snapshot(local))


async def test_exec_bit_is_kept(local: Path, target: RemoteTarget, follow) -> None:
    write(local, "run.sh", "#!/bin/sh\n", mode=0o755)
    write(local, "lib.py", "x", mode=0o644)
    await follow()
    assert snapshot(target.root)["run.sh"][2] == 0o111
    os.chmod(local / "lib.py", 0o755)  # a chmod alone is a change
    os.chmod(local / "run.sh", 0o644)
    await wait_equal(target.root, lambda: snapshot(local))


async def test_symlinks_inside_are_links_and_links_out_are_reported_once(
    local: Path, target: RemoteTarget, follow, tmp_path: Path
) -> None:
    write(local, "data/real.txt", "real")
    (local / "latest").symlink_to("data/real.txt")
    (local / "datadir").symlink_to("data")
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    (local / "out").symlink_to(outside)
    (local / "up").symlink_to("../outside.txt")
    f = await follow()
    expected = lambda: {k: v for k, v in snapshot(local).items() if k not in ("out", "up", "later-out")}  # noqa: E731
    await wait_equal(target.root, expected)
    assert snapshot(target.root)["latest"] == ("l", "data/real.txt")
    (local / "later").symlink_to("data")
    (local / "later-out").symlink_to("/etc")
    await wait_equal(target.root, expected)
    await f.session.full_sync()
    warned = [e.path for e in f.events if isinstance(e, SyncWarning)]
    assert sorted(warned) == ["later-out", "out", "up"]


async def test_nested_gitignore_with_reinclude(local: Path, target: RemoteTarget, follow) -> None:
    write(local, ".gitignore", "*.log\n/build/\ndata/\n__pycache__/\n")
    write(local, "sub/.gitignore", "!keep.log\nlocal_only.txt\n")
    write(local, ".git/info/exclude", "secret.env\n")
    write(local, ".git/HEAD", "ref: refs/heads/main\n")
    for rel in ("a.log", "sub/keep.log", "sub/other.log", "sub/local_only.txt", "build/x.o", "sub/build/y.py",
                "data/big.bin", "pkg/__pycache__/m.pyc", "secret.env", "sub/secret.env", "main.py", "notes.tmp"):  # fmt: skip
        write(local, rel, rel)
    expected_paths = {".gitignore", "sub", "sub/.gitignore", "sub/keep.log", "sub/build", "sub/build/y.py",
                      "main.py", "pkg"}  # fmt: skip
    await follow(exclude=["*.tmp"])
    await wait_equal(target.root, lambda: {k: v for k, v in snapshot(local).items() if k in expected_paths})
    # Ignored files stay unsynced as they change; a rule change re-plans what is synced.
    write(local, "data/more.bin", "more")
    write(local, "sub/new.log", "no")
    write(local, "sub/.gitignore", "!keep.log\n")
    expected_paths |= {"sub/local_only.txt"}
    await wait_equal(target.root, lambda: {k: v for k, v in snapshot(local).items() if k in expected_paths})


async def test_remote_only_files_are_kept_while_following(local: Path, target: RemoteTarget, follow) -> None:
    write(local, "src/a.py", "a")
    await follow(protect=["checkpoints"])
    write(target.root, "outputs/metrics.jsonl", "{}")
    write(target.root, "src/remote_note.txt", "mine")
    write(target.root, "checkpoints/1.pt", "ckpt")
    shutil.rmtree(local / "src")
    write(local, "checkpoints/1.pt", "local would overwrite")
    write(local, "other.py", "o")
    remote_only = {"outputs": ("d",), "outputs/metrics.jsonl": ("f", b"{}", 0), "src": ("d",),
                   "src/remote_note.txt": ("f", b"mine", 0), "checkpoints": ("d",),
                   "checkpoints/1.pt": ("f", b"ckpt", 0)}  # fmt: skip
    await wait_equal(
        target.root,
        lambda: {
            **{k: v for k, v in snapshot(local).items() if not k.startswith("checkpoints")},
            **remote_only,
        },
    )


async def test_emptied_root_stops_following(local: Path, target: RemoteTarget, follow) -> None:
    write(local, "a.py", "a")
    write(local, "b.py", "b")
    f = await follow()
    (local / "a.py").unlink()
    (local / "b.py").unlink()
    await wait_for(lambda: f.task.done(), 10, "sync to stop")
    assert f.session.state == "error" and "empty" in [e for e in f.events][-1].reason
    assert sorted(snapshot(target.root)) == ["a.py", "b.py"]


async def test_vanished_root_stops_following(local: Path, target: RemoteTarget, follow) -> None:
    write(local, "pkg/a.py", "a")
    f = await follow()
    shutil.rmtree(local)
    await wait_for(lambda: f.task.done(), 10, "sync to stop")
    assert f.session.state == "error"
    assert sorted(snapshot(target.root)) == ["pkg", "pkg/a.py"]
