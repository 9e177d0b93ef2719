"""Watch only the synced directories of the local tree, non-recursively, with ``watchfiles``.

Excluded directories (``.venv``, datasets, ``node_modules``) cost no kernel watches. New
directories get their watches added by :meth:`TreeWatcher.add`, which returns once the watches
are in place, so a scan right after it misses nothing. Each ``add`` starts one more
``awatch`` generator; when there are many, they fold into one over the current directory set and
the root is reported changed, so the consumer rescans (events in the swap may be lost).

Watches are keyed by path inside each generator: when a watched directory reports that an entry
moved out or was deleted, the backend drops that path's watch and every watch keyed below it,
even if those directories are back at the same paths later. The event names the path, and the
tracker watches its whole subtree again (``LocalTracker._forget_watches``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from pathlib import Path

import anyio
from watchfiles import awatch

from gcptui.remote.aio import cancel_and_wait, within


class TreeWatcher:
    """Collects changed absolute paths from several non-recursive ``awatch`` generators."""

    def __init__(
        self, root: Path, *, step_ms: int = 30, debounce_ms: int = 300, max_generations: int = 6
    ) -> None:
        self.root = root
        self.max_generations = max_generations
        self.errors: list[str] = []
        self._paths: set[str] = set()
        self.step_ms = step_ms
        self.debounce_ms = debounce_ms
        self._changes: set[str] = set()
        self._wake = asyncio.Event()
        self._tasks: list[tuple[asyncio.Task[None], anyio.Event]] = []

    @property
    def generations(self) -> int:
        return len(self._tasks)

    async def add(self, rel_dirs: Iterable[str]) -> None:
        """Watch these tree-relative directories ("" is the root); returns once watches exist.

        Each call costs one inotify instance (128 per user by default, shared with every other
        program): past ``max_generations`` all watches fold into one generator and the root is
        reported changed, since events in the swap may be lost and a rescan must follow.
        """
        paths = [str(self.root / rel) if rel else str(self.root) for rel in rel_dirs]
        paths = [p for p in paths if Path(p).is_dir()]
        if not paths:
            return
        self._paths.update(paths)
        if len(self._tasks) >= self.max_generations:
            await self._stop(self._tasks)
            self._tasks = []
            paths = sorted(p for p in self._paths if Path(p).is_dir())
            self._paths = set(paths)
            self.inject([str(self.root)])
        await self._start(paths)

    async def _start(self, paths: list[str]) -> None:
        stop = anyio.Event()
        gen = awatch(
            *paths,
            watch_filter=None,  # the default filter drops *.pyc, *~, .swp ...: re-stat decides instead
            recursive=False,
            step=self.step_ms,
            debounce=self.debounce_ms,
            stop_event=stop,
            ignore_permission_denied=True,
        )
        started = asyncio.Event()
        task = asyncio.create_task(self._pump(gen, started))
        self._tasks.append((task, stop))
        await started.wait()

    @staticmethod
    async def _stop(tasks: list[tuple[asyncio.Task[None], anyio.Event]]) -> None:
        # Cancelled while waiting here (the session stops following mid-fold), the caller must see
        # its cancellation: the tasks stay listed in ``_tasks`` for ``close`` to end.
        for _, stop in tasks:
            stop.set()
        await cancel_and_wait(*(task for task, _ in tasks))

    async def _pump(self, gen, started: asyncio.Event) -> None:  # noqa: ANN001 - awatch's generator
        first = asyncio.ensure_future(gen.__anext__())
        # awatch builds its RustNotify (which places the kernel watches) synchronously in the
        # generator's first step, before its first await: once that step ran, watches exist.
        await asyncio.sleep(0)
        started.set()
        try:
            changes = await first
            while True:
                if changes:
                    self._changes.update(path for _, path in changes)
                    self._wake.set()
                changes = await gen.__anext__()
        except (StopAsyncIteration, asyncio.CancelledError):
            pass
        except FileNotFoundError:
            self.inject([str(self.root)])  # a directory vanished before its watch was placed: rescan
        except OSError as err:
            # Out of inotify instances or watches: say so once, and rescan (periodic full diffs
            # keep the VM right, only slower).
            self.errors.append(
                f"cannot watch the tree for changes ({err}): raise fs.inotify.max_user_watches / max_user_instances"
            )
            self.inject([str(self.root)])
        finally:
            with contextlib.suppress(Exception):
                await gen.aclose()

    async def next_batch(self, timeout: float | None = None) -> set[str]:
        """The changed absolute paths since the last call (empty after ``timeout`` seconds)."""
        if not self._changes:
            self._wake.clear()
            try:
                await within(timeout, self._wake.wait())
            except TimeoutError:
                return set()
        out, self._changes = self._changes, set()
        return out

    def inject(self, paths: Iterable[str]) -> None:
        """Report paths as changed (a barrier or a test can wake the consumer)."""
        self._changes.update(paths)
        self._wake.set()

    async def close(self) -> None:
        """Stop every generator."""
        tasks, self._tasks = self._tasks, []
        self._paths.clear()
        await self._stop(tasks)
