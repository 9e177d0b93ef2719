"""Watch only the synced directories of the local tree, non-recursively, with ``watchfiles``.

Excluded directories (``.venv``, datasets, ``node_modules``) cost no kernel watches. New
directories get their watches added by :meth:`TreeWatcher.add`, which returns once the watches
are in place, so a scan right after it misses nothing. Each ``add`` starts one more
``awatch`` generator; when there are many, :meth:`TreeWatcher.replace` folds them into one over the
current directory set (the caller rescans after, since events in the swap may be lost).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from pathlib import Path

import anyio
from watchfiles import awatch


class TreeWatcher:
    """Collects changed absolute paths from several non-recursive ``awatch`` generators."""

    def __init__(self, root: Path, *, step_ms: int = 30, debounce_ms: int = 300) -> None:
        self.root = root
        self.step_ms = step_ms
        self.debounce_ms = debounce_ms
        self._changes: set[str] = set()
        self._wake = asyncio.Event()
        self._tasks: list[tuple[asyncio.Task[None], anyio.Event]] = []

    @property
    def generations(self) -> int:
        return len(self._tasks)

    async def add(self, rel_dirs: Iterable[str]) -> None:
        """Watch these tree-relative directories ("" is the root); returns once watches exist."""
        paths = [str(self.root / rel) if rel else str(self.root) for rel in rel_dirs]
        paths = [p for p in paths if Path(p).is_dir()]
        if not paths:
            return
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
            pass  # a watched directory vanished before the watch was placed: the parent reports it
        finally:
            with contextlib.suppress(Exception):
                await gen.aclose()

    async def replace(self, rel_dirs: Iterable[str]) -> None:
        """Watch exactly these directories with one generator, dropping the older ones."""
        old = list(self._tasks)
        self._tasks = []
        await self.add(rel_dirs)
        for task, stop in old:
            stop.set()
            task.cancel()
        for task, _ in old:
            with contextlib.suppress(BaseException):
                await task

    async def next_batch(self, timeout: float | None = None) -> set[str]:
        """The changed absolute paths since the last call (empty after ``timeout`` seconds)."""
        if not self._changes:
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
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
        await self.replace([])
