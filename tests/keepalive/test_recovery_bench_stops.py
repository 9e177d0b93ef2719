"""`benchmarks/recovery.py` stopped by SIGTERM mid-run (a CI time-out, a `timeout` wrapper): it cleans
up and exits 143, and no process it started (an emulated VM's sshd, supervisor or trainer,
fake-gcs-server) outlives it. A harness killed this way once left its trainers running for 35 min."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]


def started_under(folder: Path, but: int = 0) -> list[psutil.Process]:
    """Live processes but ``but`` whose command line, working directory or environment names
    ``folder`` (the harness's temporary directory lies there, so every VM disk and server folder does)."""
    mark, found = str(folder), []
    for proc in psutil.process_iter():
        if proc.pid in (os.getpid(), but):
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            text = " ".join(proc.cmdline()) + " " + proc.cwd() + " " + " ".join(proc.environ().values())
        except (psutil.Error, OSError):
            continue  # gone meanwhile, or another user's
        if mark in text:
            found.append(proc)
    return found


def test_sigterm_mid_run_leaves_no_process_behind(tmp_path: Path) -> None:
    work = tmp_path / "tmp"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("STORAGE_EMULATOR_HOST", "GCPTUI_STATE_DIR")}
    bench = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "recovery.py"), "--quick"],
        cwd=ROOT, env={**env, "TMPDIR": str(work)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert bench.stderr is not None
        for line in bench.stderr:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    said: list[str] = []
    try:
        while True:  # until the emulated VM's trainer runs: then the harness has processes to leave
            line = lines.get(timeout=120)
            assert line is not None, "".join(said)
            said.append(line)
            if "spot-a: training" in line:
                break
        assert started_under(work, but=bench.pid), "the harness's VM processes should be running now"
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(timeout=90) == 143, "".join(said)
        left = started_under(work)
        assert not left, [" ".join(p.cmdline()) for p in left]
    finally:
        with contextlib.suppress(ProcessLookupError):
            bench.kill()
        bench.wait(timeout=30)
        for proc in started_under(work):  # a failed run must not load the machine for good
            with contextlib.suppress(psutil.Error):
                proc.kill()
