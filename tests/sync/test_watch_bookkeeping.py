"""Directories that move away and come back stay watched; so do those a full scan found.

Regression tests for events lost by seeded random operations (tests/sync/test_random_ops.py):
when a watched directory reports that an entry moved out, watchfiles' inotify backend drops the
watch keyed by that path *and every watch keyed below it*. If the directories are back at those
paths when the batch is handled (same path, same inode), the tracker used to believe them still
watched, and nothing created in them afterwards ever reached the VM (until a periodic full diff).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import anyio

from gcptui.remote.sync.local_tree import scan_tree
from gcptui.remote.sync.rules import SyncRules
from gcptui.remote.sync.tracker import LocalTracker
from gcptui.remote.sync.watcher import TreeWatcher
from tests.sync.conftest import RemoteTarget
from tests.sync.trees import snapshot, wait_equal, wait_for, write

# Far beyond the waits below: only watched events can bring the VM in sync in time.
NO_PERIODIC_DIFF = 600.0


async def test_directories_moved_back_to_their_old_paths_stay_watched(
    local: Path, target: RemoteTarget, follow
) -> None:
    write(local, "a/s/old.txt", "old")
    write(local, "b/s/old.txt", "old")
    await follow(reconcile_seconds=NO_PERIODIC_DIFF)

    # A directory renamed away and straight back, within one batch.
    os.rename(local / "a", local / "ra")
    os.rename(local / "ra", local / "a")
    # A subdirectory moved back to its old path inside a new directory of the old name.
    os.rename(local / "b", local / "rb")
    (local / "b").mkdir()
    os.rename(local / "rb" / "s", local / "b" / "s")
    # Written last, in the watched root: once the VM has it, the moves above were handled.
    write(local, "marker.txt", "moves handled")
    await wait_equal(target.root, lambda: snapshot(local), timeout=10)

    write(local, "a/s/new.txt", "created after the round trip")
    write(local, "b/s/new.txt", "created after the move back")
    await wait_equal(target.root, lambda: snapshot(local), timeout=10)


async def test_a_full_scan_rescans_directories_it_watches_for_the_first_time(local: Path) -> None:
    watcher = TreeWatcher(local, step_ms=10, debounce_ms=50)
    tracker = LocalTracker(local, SyncRules(local), watcher)
    try:
        await tracker.start_watching()
        (local / "d" / "sub").mkdir(parents=True)
        scan = scan_tree(local, tracker.rules)  # the full diff's scan (it runs in a thread)
        write(local, "d/sub/late.txt", "created after the scan, before any watch on d/sub")
        tracker.reset(scan)
        await tracker.watch_new_dirs()
        assert "d/sub/late.txt" in tracker.entries
    finally:
        await watcher.close()


async def test_a_session_stopped_while_watches_fold_stops(local: Path) -> None:
    """Cancelled while it waits for old watch generations to end, the caller is cancelled.

    It used to swallow the cancellation (``suppress(BaseException)`` around the wait), so a sync
    session told to stop in the middle of a fold went on following, and whoever stopped it waited
    for ever (the fuzz test's 300 s timeout in CI).
    """
    watcher = TreeWatcher(local, step_ms=10, debounce_ms=50, max_generations=2)
    release = asyncio.Event()

    async def slow_to_end() -> None:  # a generation whose watch thread takes its time to see the stop
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await release.wait()

    try:
        await watcher.add([""])
        slow = asyncio.create_task(slow_to_end())
        watcher._tasks.append((slow, anyio.Event()))
        (local / "new").mkdir()
        folding = asyncio.create_task(watcher.add(["new"]))  # a third generation: they fold
        await wait_for(lambda: slow.cancelling() > 0, 5, "the fold to stop the old generations")
        folding.cancel()
        await asyncio.wait({folding}, timeout=5)
        assert folding.cancelled(), "the fold swallowed its caller's cancellation"
        assert not slow.done()  # it was not waited out: the cancellation came through at once
    finally:
        release.set()
        await watcher.close()
