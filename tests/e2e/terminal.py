"""Drive the real ``gcptui`` binary in a real terminal: tmux on a private socket, read with capture-pane.

Shared by the end-to-end tests and ``benchmarks/startup.py``. Everything waits on what the screen
shows (polling ``capture-pane`` with a deadline), never on fixed sleeps.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TypeVar

import psutil

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")

# The demo's fleet (``demo_fleet(4)``), sorted by name as the table shows it at start.
DEMO_VMS = ("eval-t4-1", "trainer-a100-1", "trainer-h100-1", "trainer-l4-1")
# A line the reference trainer logs every ``--log-every`` steps: "step 10/3000 loss 4.1067 131 samples/s".
STEP_LINE = re.compile(r"step \d+/\d+ loss \d")


def tmux_available() -> bool:
    return shutil.which("tmux") is not None


def _installed_here() -> bool:
    """True unless the installed ``gcptui`` is an editable install of some other checkout.

    In a shared environment the console script may point at another worktree; running it would test
    that code, not this checkout's.
    """
    try:
        raw = metadata.distribution("gcptui").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return False
    if not raw:
        return True
    info = json.loads(raw)
    if not info.get("dir_info", {}).get("editable"):
        return True  # a regular install is "the installed gcptui" by definition
    url = str(info.get("url", ""))
    return url.removeprefix("file://").rstrip("/") == str(ROOT)


def gcptui_command() -> tuple[list[str], str]:
    """The argv that starts ``gcptui`` and a word saying which one was chosen.

    ``GCPTUI_E2E_COMMAND`` (split on spaces) overrides; else the installed console script when it is
    this checkout's; else ``python -m gcptui.tui`` run with the repository root as its working directory.
    """
    override = os.environ.get("GCPTUI_E2E_COMMAND")
    if override:
        return override.split(), "GCPTUI_E2E_COMMAND"
    script = shutil.which("gcptui")
    if script and _installed_here():
        return [script], "console script"
    return [sys.executable, "-m", "gcptui.tui"], "python -m gcptui.tui"


class TmuxTerminal:
    """One tmux server on a private socket running one command in a fixed-size pane.

    ``remain-on-exit`` keeps the pane after the command ends, so its exit status and last screen can be read.
    """

    def __init__(self, workdir: Path, *, width: int = 200, height: int = 45) -> None:
        self.socket = f"gcptui-e2e-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.width = width
        self.height = height
        self.workdir = workdir
        self.config = workdir / "tmux.conf"
        self.config.write_text("set -g remain-on-exit on\nset -g status off\nset -g history-limit 0\n")
        self.started = False
        self._pane_pid: int | None = None
        self._socket_path = ""

    def _tmux(self, *args: str, check: bool = True) -> str:
        result = subprocess.run(
            ["tmux", "-L", self.socket, "-f", str(self.config), *args],
            capture_output=True, text=True, timeout=20, check=False,
        )  # fmt: skip
        if check and result.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args[:2])}: {result.stderr.strip()}")
        return result.stdout

    def start(self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str]) -> int:
        """Run ``argv`` (exec'd directly, no shell) in a new pane; returns the pane's pid.

        Only stdout/stdin are the pane's tty as usual; stderr stays on the tty too (Textual draws there).
        """
        setenv = [item for key, value in env.items() for item in ("-e", f"{key}={value}")]
        # COLUMNS and LINES would override the pane's real size for the program (shutil, and so Textual,
        # read them first); pytest-xdist's workers, and some CI runners, set them.
        inherited = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        base_env = {**inherited, **env}
        subprocess.run(
            ["tmux", "-L", self.socket, "-f", str(self.config), "new-session", "-d", "-s", "e2e",
             "-x", str(self.width), "-y", str(self.height), "-c", str(cwd), *setenv, "--", *argv],
            env=base_env, check=True, capture_output=True, timeout=20,
        )  # fmt: skip
        self.started = True
        self._socket_path = self._tmux("display-message", "-p", "#{socket_path}").strip()
        self._pane_pid = self.pane_pid()
        return self._pane_pid

    def server_pid(self) -> int:
        """The tmux server's pid: its command line names the run's environment, yet it is the harness."""
        return int(self._tmux("display-message", "-p", "-t", "e2e", "#{pid}").strip())

    def pane_pid(self) -> int:
        return int(self._tmux("display-message", "-p", "-t", "e2e", "#{pane_pid}").strip())

    def screen(self) -> str:
        """The visible screen as plain text, one line per terminal row."""
        return self._tmux("capture-pane", "-p", "-t", "e2e")

    def press(self, *keys: str) -> None:
        """tmux key names (``Down``, ``Enter``, ``Escape``, ``s``)."""
        self._tmux("send-keys", "-t", "e2e", *keys)

    def type(self, text: str) -> None:
        """Literal text, not key names."""
        self._tmux("send-keys", "-t", "e2e", "-l", text)

    def exit_status(self) -> int | None:
        """The command's exit status once it has ended, else None."""
        self._reap_nudge()
        dead, status = self._tmux(
            "display-message", "-p", "-t", "e2e", "#{pane_dead} #{pane_dead_status}"
        ).split(" ")
        return int(status) if dead == "1" and status.strip() else None

    def _reap_nudge(self) -> None:
        """Make tmux notice an exited pane command it has not reaped.

        Debian's tmux is built with libutempter, whose helper briefly installs its own SIGCHLD handler;
        a pane command that exits in that window stays a zombie and the pane never reads dead
        (tmux/tmux#311, #4559). Seen here in about one run in three under load. A SIGCHLD to our own
        tmux server makes it reap the child and record the exit status.
        """
        if self._pane_pid is None:
            return
        try:
            zombie = psutil.Process(self._pane_pid).status() == psutil.STATUS_ZOMBIE
        except psutil.Error:
            return  # already reaped
        if zombie:
            try:
                os.kill(self.server_pid(), signal.SIGCHLD)
            except (OSError, RuntimeError):
                pass

    def wait_for(self, predicate: Callable[[str], T], what: str, timeout: float, interval: float = 0.05) -> T:
        """Poll the screen until ``predicate(screen)`` is truthy; fail with the last screen shown."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            value = predicate(screen)
            if value:
                return value
            if self.exit_status() is not None:
                raise AssertionError(f"gcptui exited (status {self.exit_status()}) before: {what}\n{screen}")
            if time.monotonic() > deadline:
                raise AssertionError(f"not on screen within {timeout:g}s: {what}\n--- screen ---\n{screen}")
            time.sleep(interval)

    def wait_exit(self, timeout: float, interval: float = 0.05) -> int:
        """Wait for the command to end; returns its exit status."""
        deadline = time.monotonic() + timeout
        while (status := self.exit_status()) is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"gcptui still running {timeout:g}s after quitting\n{self.screen()}")
            time.sleep(interval)
        return status

    def __enter__(self) -> TmuxTerminal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill the server (SIGHUP to whatever still runs in the pane)."""
        if self.started:
            self._tmux("kill-server", check=False)
            self.started = False
            # tmux leaves the socket file of a killed server behind; one per run would pile up.
            if self._socket_path:
                Path(self._socket_path).unlink(missing_ok=True)


@dataclass
class DemoRun:
    """One demo under test: its terminal, its private TMPDIR and every pid seen in its process tree."""

    terminal: TmuxTerminal
    tmpdir: Path
    seen: dict[int, float] = field(default_factory=dict)


# -- processes -------------------------------------------------------------------------------------------


def descendants(pid: int) -> dict[int, float]:
    """``pid`` and its live descendants as ``{pid: create_time}`` (create_time tells a reused pid apart)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return {}
    found = {}
    for proc in procs:
        try:
            found[proc.pid] = proc.create_time()
        except psutil.Error:
            continue
    return found


def _references(proc: psutil.Process, marker: str) -> bool:
    """Whether a process's cwd, command line or environment mentions ``marker``."""
    try:
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
    except psutil.Error:
        return False
    probes: list[Callable[[], Iterable[str]]] = [
        lambda: [proc.cwd()],
        proc.cmdline,
        lambda: proc.environ().values(),
    ]
    for probe in probes:
        try:
            if any(marker in part for part in probe()):
                return True
        except (psutil.Error, OSError):
            continue  # gone meanwhile, or not ours to read
    return False


def leftovers(marker: str, seen: Mapping[int, float], ignore: Iterable[int] = ()) -> list[str]:
    """Live processes that belong to the demo: they mention ``marker`` or are ones recorded earlier.

    ``ignore``: the harness's own processes (the tmux server) that name the marker too.
    """
    skip = {os.getpid(), *ignore}
    found = []
    for proc in psutil.process_iter():
        if proc.pid in skip:
            continue
        try:
            recorded = seen.get(proc.pid) == proc.create_time() and proc.status() != psutil.STATUS_ZOMBIE
            if recorded or _references(proc, marker):
                found.append(f"{proc.pid} {' '.join(proc.cmdline())[:160]}")
        except psutil.Error:
            continue  # it ended meanwhile
    return found


def kill_leftovers(marker: str, seen: Mapping[int, float]) -> None:
    """Cleanup after a failed run (tmux already gone): end what this run started, as in ``leftovers``."""
    for line in leftovers(marker, seen):
        try:
            psutil.Process(int(line.split(" ", 1)[0])).kill()
        except psutil.Error:
            continue


def wait_no_leftovers(
    marker: str, seen: Mapping[int, float], timeout: float, ignore: Iterable[int] = ()
) -> list[str]:
    """Poll until no process of the run is left; returns what is still there at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        left = leftovers(marker, seen, ignore)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


# -- screen reading ---------------------------------------------------------------------------------------


def row(screen: str, name: str) -> str:
    """The table row of machine ``name`` ("" when it is not shown)."""
    return next((line for line in screen.splitlines() if re.search(rf"(^|\s){re.escape(name)}\s", line)), "")


def fleet_listed(screen: str, names: Iterable[str] = DEMO_VMS) -> bool:
    """Every machine has its row, with its status read from the Compute API."""
    return all(
        re.search(r"\b(RUNNING|TERMINATED|PREEMPTED|STAGING|PROVISIONING)\b", row(screen, n)) for n in names
    )


def demo_env(tmpdir: Path) -> dict[str, str]:
    """The pane's environment: a private TMPDIR so the demo's temp dir is known and owned by the run."""
    return {
        "TERM": "xterm-256color",
        "TMPDIR": str(tmpdir),
        "NO_GCE_CHECK": "true",
    }
