"""The VM-side supervisor script run directly, for what SSH tests cannot vary: a VM without setsid(1)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from gcptui.remote.jobs.protocol import parse_status
from tests.ssh.conftest import group_members, process_alive

SCRIPT = Path(__file__).parents[2] / "remote" / "vm" / "gcptui-job.sh"


def test_supervisor_detaches_with_python_where_setsid_is_missing(tmp_path: Path) -> None:
    # A PATH with the basic tools and a Python but no setsid, as on macOS under the emulator.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "date", "mv", "cat", "rm", "mkdir", "sleep", "ps", "awk"):
        (bin_dir / tool).symlink_to(shutil.which(tool))  # type: ignore[arg-type]
    (bin_dir / "python3").symlink_to(sys.executable)
    home = tmp_path / "home"
    (home / "project").mkdir(parents=True)
    env = {"HOME": str(home), "PATH": str(bin_dir)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sh", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=30)

    started = parse_status("local", run("start", "~/project", "sleep 600", "").stdout)
    try:
        assert started.state == "running" and started.pid and started.pgid
        assert os.getsid(started.pgid) == started.pgid  # its own session, detached from ours
        assert os.getpgid(started.pid) == started.pgid
        killed = parse_status("local", run("kill", "5").stdout)
        assert (killed.state, killed.exit_code) == ("killed", 143)
        assert not process_alive(started.pid) and group_members(started.pgid) == []
    finally:
        if started.pgid and group_members(started.pgid):
            os.killpg(started.pgid, 9)
