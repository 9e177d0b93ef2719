"""What every harness in ``benchmarks/`` shares: a quick mode, and nothing of a run left behind.

``owned_run(name)`` gives a run a scratch folder of its own and points ``TMPDIR`` at it (so every
temporary folder the harness, its emulators and their machines' processes make is inside it); turns
SIGTERM and SIGHUP into ``SystemExit`` so the harness's ``finally`` blocks (emulators closed, servers
stopped) run as on Ctrl-C; and on the way out ends every process the run started: its descendants,
and any process whose working folder, command line or environment names the scratch folder (an
emulated VM's detached job is no descendant any more), then removes the folder.

``quick_flag(parser)`` adds ``--quick``; ``quick(args, name=value, ...)`` sets those values when it
was given: a run of seconds that ``benchmarks/quick.py`` (and so ``.ci/run``) makes on every change,
so that a harness cannot silently stop working.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import psutil

# SIGTERM first; whatever still runs this long after it gets SIGKILL.
TERM_GRACE_S = 3.0


def quick_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="a run of seconds, for CI (benchmarks/quick.py)")


def quick(args: argparse.Namespace, **values: object) -> argparse.Namespace:
    """With ``--quick``: ``args`` with ``values`` set (a small run); else ``args`` as they are."""
    if getattr(args, "quick", False):
        for name, value in values.items():
            setattr(args, name, value)
    return args


def _raise_exit(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _names(proc: psutil.Process, marker: str) -> bool:
    """Whether ``proc``'s working folder, command line or environment mentions ``marker``."""
    probes = (lambda: [proc.cwd()], proc.cmdline, lambda: list(proc.environ().values()))
    for probe in probes:
        with contextlib.suppress(psutil.Error, OSError):
            if any(marker in part for part in probe()):
                return True
    return False


def run_processes(marker: str) -> list[psutil.Process]:
    """Live processes of a run (its descendants, and the processes naming ``marker``), not this one."""
    me = psutil.Process()
    found: dict[int, psutil.Process] = {}
    with contextlib.suppress(psutil.Error):
        found.update((p.pid, p) for p in me.children(recursive=True))
    for proc in psutil.process_iter():
        if proc.pid == me.pid or proc.pid in found:
            continue
        if _names(proc, marker):
            found[proc.pid] = proc
    alive = []
    for proc in found.values():
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
    return alive


def end_processes(marker: str) -> list[str]:
    """SIGTERM, then SIGKILL, to every process of the run; returns those that outlived both."""
    procs = run_processes(marker)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=TERM_GRACE_S)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    _, still = psutil.wait_procs(alive, timeout=TERM_GRACE_S)
    return [f"{p.pid}" for p in still]


@contextlib.contextmanager
def owned_run(name: str) -> Iterator[Path]:
    """A scratch folder for the run (``TMPDIR`` inside the block); every process of it ended after."""
    root = Path(tempfile.mkdtemp(prefix=f"gcptui-bench-{name}-"))
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    tmpdir = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(root)
    tempfile.tempdir = None  # tempfile caches the folder it chose: choose again, under root
    for sig in before:
        signal.signal(sig, _raise_exit)
    try:
        yield root
    finally:
        # A second SIGTERM while cleaning up must not cut the cleanup short.
        for sig in before:
            signal.signal(sig, signal.SIG_IGN)
        try:
            end_processes(str(root))
            deadline = time.monotonic() + 10
            shutil.rmtree(root, ignore_errors=True)
            while root.exists() and time.monotonic() < deadline:  # a dying process may still write
                time.sleep(0.2)
                shutil.rmtree(root, ignore_errors=True)
        finally:
            if tmpdir is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = tmpdir
            tempfile.tempdir = None
            for sig, handler in before.items():
                signal.signal(sig, handler)
