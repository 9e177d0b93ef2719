"""`gcptui emulator --dir DIR`: one emulator per folder (a second would rewrite the first one's config
and API token), and a --dir that cannot be a folder is one line, exit 2."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.cli.test_ls import gcptui


def test_a_second_emulator_on_the_same_dir_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "emu"
    first = subprocess.Popen(
        [sys.executable, "-m", "gcptui.tui", "emulator", "--vms", "1", "--dir", str(directory)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert first.stdout is not None
        deadline = time.monotonic() + 90
        line = ""
        while "emulator ready" not in line:
            assert time.monotonic() < deadline and first.poll() is None, line
            line = first.stdout.readline()
        config = (directory / "gcptui.toml").read_text()

        second = gcptui("emulator", "--vms", "1", "--dir", str(directory))

        assert second.returncode == 2, second.stderr
        assert f"in use by another emulator (pid {first.pid})" in second.stderr
        assert second.stderr.count("\n") == 1
        assert (directory / "gcptui.toml").read_text() == config  # the first one's, untouched
    finally:
        first.send_signal(signal.SIGINT)
        first.wait(timeout=30)


def test_a_dir_that_cannot_be_a_folder_is_one_line(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    for directory in (afile, Path("/proc/nope")):
        result = gcptui("emulator", "--vms", "1", "--dir", str(directory))
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
