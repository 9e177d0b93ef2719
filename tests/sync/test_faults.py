"""Faults: dropped connections, lost watch events, files changing while sent; and the barrier."""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from pathlib import Path

from gcptui.remote.aio import within
from gcptui.remote.sync import SyncSession, SyncWarning
from tests.sync.conftest import RemoteTarget
from tests.sync.trees import snapshot, wait_equal, wait_for, write


async def test_connection_drop_queues_changes_and_converges_on_reconnect(
    local: Path, target: RemoteTarget, follow
) -> None:
    write(local, "a.py", "a")
    write(local, "gone.py", "g")
    f = await follow()
    await target.drop()
    write(local, "while_down.py", "queued")
    write(local, "a.py", "changed while down")
    (local / "gone.py").unlink()
    await wait_for(lambda: f.session.state in ("reconnecting", "connecting"), 10, "the drop to be noticed")
    write(local, "later.py", "also queued")
    await target.restore()
    await wait_equal(target.root, lambda: snapshot(local), timeout=20)
    write(local, "after.py", "following again")
    await wait_equal(target.root, lambda: snapshot(local))


async def test_lost_watch_events_are_caught_by_the_periodic_reconcile(
    local: Path, target: RemoteTarget, follow
) -> None:
    write(local, "a.py", "a")
    f = await follow(reconcile_seconds=0.3)
    watcher = f.session._watcher
    # Stand-in for the kernel's queue overflow: the watcher delivers nothing from now on.
    watcher.inject = lambda paths: None  # type: ignore[method-assign]
    for task, _ in watcher._tasks:
        task.cancel()
    write(local, "unseen.py", "no event for this one")
    write(local, "a.py", "nor this")
    await wait_equal(target.root, lambda: snapshot(local))


async def test_a_file_changing_while_it_is_sent_is_sent_again(
    local: Path, target: RemoteTarget, follow
) -> None:
    write(local, "big.bin", b"\0" * 8_000_000)
    await follow()
    stop = threading.Event()

    def rewrite() -> None:
        rng = random.Random(1)
        while not stop.is_set():
            with open(local / "big.bin", "r+b") as fh:
                fh.seek(rng.randrange(8_000_000 - 1000))
                fh.write(rng.randbytes(1000))
            time.sleep(0.001)

    thread = threading.Thread(target=rewrite)
    thread.start()
    await asyncio.sleep(1.0)  # the writer runs while several sends happen; what matters is the end state
    stop.set()
    thread.join()
    await wait_equal(target.root, lambda: snapshot(local))


async def test_barrier_returns_once_the_vm_holds_the_current_tree(
    local: Path, target: RemoteTarget, follow
) -> None:
    write(local, "a.py", "a")
    f = await follow(step_ms=500)  # a slow watcher: only the barrier can make this quick
    for i in range(50):
        write(local, f"pkg/m{i}.py", f"{i}")
    await f.session.barrier(timeout=10)
    assert snapshot(target.root) == snapshot(local)


async def test_barrier_waits_through_a_dropped_connection(local: Path, target: RemoteTarget) -> None:
    write(local, "a.py", "a")
    session = SyncSession(local, target.dest, target.channel)
    await session.full_sync()
    await target.drop()
    write(local, "b.py", "b")
    barrier = asyncio.create_task(session.barrier(timeout=20))
    await wait_for(lambda: session.state == "reconnecting", 10, "reconnecting")
    assert not barrier.done()
    await target.restore()
    await barrier
    assert snapshot(target.root) == snapshot(local)
    await session.close()


async def test_pause_queues_changes_until_resume(local: Path, target: RemoteTarget, follow) -> None:
    write(local, "a.py", "a")
    f = await follow()
    f.session.pause()
    write(local, "b.py", "b")
    await asyncio.sleep(0.3)  # asserting an absence: give a watched change time it would have needed
    assert "b.py" not in snapshot(target.root)
    f.session.resume()
    await wait_equal(target.root, lambda: snapshot(local))


async def test_a_file_that_never_stops_changing_never_lands_torn_and_is_not_called_synced(
    local: Path, target: RemoteTarget
) -> None:
    write(local, "train.py", "print(1)\n")
    write(local, "log.bin", b"x" * 3_000_000)
    stop = threading.Event()
    appended = threading.Event()

    def append() -> None:  # a log the job keeps writing: every read of it is already stale
        with open(local / "log.bin", "ab", buffering=0) as fh:
            while not stop.is_set():
                fh.write(b"y" * 100)
                appended.set()

    thread = threading.Thread(target=append)
    thread.start()
    s = SyncSession(local, target.dest, target.channel, name="vm")
    warnings: list[str] = []
    s.subscribe(lambda e: warnings.append(e.message) if isinstance(e, SyncWarning) else None)
    try:
        assert await asyncio.to_thread(appended.wait, 10)
        result = await s.full_sync()
    finally:
        stop.set()
        thread.join()
    assert result.failed == 1 and s.state == "incomplete"
    assert any("could not put log.bin on the VM: it changed while being read" in w for w in warnings), (
        warnings
    )
    assert not (target.root / "log.bin").exists()  # nothing torn, nothing stale called current
    assert (await s.full_sync()).failed == 0  # it settled: now it goes
    assert snapshot(target.root) == snapshot(local)
    await s.close()


async def test_a_sync_cancelled_mid_file_leaves_the_session_usable(local: Path, target: RemoteTarget) -> None:
    write(local, "big.bin", os.urandom(1 << 20) * 200)
    s = SyncSession(local, target.dest, target.channel, name="vm")
    first = asyncio.create_task(s.full_sync())

    def writing() -> bool:  # the agent is filling big.bin's temp file
        return target.root.is_dir() and any(p.stat().st_size > 0 for p in target.root.glob(".gcptui-tmp.*"))

    await wait_for(lambda: writing() or first.done(), 30, "the transfer to start")
    assert not first.done()
    first.cancel()
    await asyncio.wait({first})
    result = await within(60, s.full_sync())  # a new agent: the old one was left mid-file
    assert result.failed == 0 and s.state == "in_sync"
    assert snapshot(target.root) == snapshot(local)
    await s.close()
