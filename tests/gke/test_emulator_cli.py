"""``gcptui emulator --gke-nodes N``: a GKE cluster beside the VMs, its kubeconfig in DIR/kubeconfig
(what kubectl reads) and a ``[[gke]]`` entry in DIR/gcptui.toml (what gcptui reads)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gcptui.remote.config.loader import load_config
from tests.cli.test_ls import gcptui

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")


def test_emulator_gke_nodes_writes_kubeconfig_and_config(tmp_path: Path) -> None:
    directory = tmp_path / "emu"
    emulator = subprocess.Popen(
        [sys.executable, "-m", "gcptui.tui", "emulator", "--vms", "1", "--gke-nodes", "3", "--dir", str(directory)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert emulator.stdout is not None
        deadline = time.monotonic() + 90
        line = ""
        while "emulator ready" not in line:
            assert time.monotonic() < deadline and emulator.poll() is None, line
            line = emulator.stdout.readline()
        assert f"a GKE cluster of 3 nodes (kubeconfig {directory / 'kubeconfig'})" in line
        assert (directory / "kubeconfig").stat().st_mode & 0o077 == 0  # it holds the token
        config = load_config(directory / "gcptui.toml")
        (entry,) = config.gke
        assert entry.context == "gke_gcptui-demo_us-central1-a_training" and entry.kubeconfig == str(
            directory / "kubeconfig"
        )
        nodes = subprocess.run(["kubectl", "--kubeconfig", entry.kubeconfig, "--context", entry.context, "get", "nodes",
                                "-o", "json"], capture_output=True, text=True, timeout=30, check=True)  # fmt: skip
        items = json.loads(nodes.stdout)["items"]
        assert len(items) == 3 and all(n["status"]["capacity"]["nvidia.com/gpu"] == "1" for n in items)
        # The demo's workload: a StatefulSet of 2 pods running the toy trainer, listed by gcptui.
        subprocess.run(["kubectl", "--kubeconfig", entry.kubeconfig, "wait", "pod/trainer-0", "pod/trainer-1",
                        "--for=condition=Ready", "--timeout=30s"], check=True, capture_output=True, timeout=60)  # fmt: skip
        listed = gcptui("ls", "--json", "--config", str(directory / "gcptui.toml"))
        assert listed.returncode == 0, listed.stderr
        (trainer,) = [row for row in json.loads(listed.stdout) if row["source"] == "gke"]
        assert trainer["name"] == "trainer" and [w["name"] for w in trainer["workers"]] == [
            "trainer-0",
            "trainer-1",
        ]
        assert trainer["state"] == "running" and trainer["spot"] is True
    finally:
        emulator.send_signal(signal.SIGINT)
        assert emulator.wait(timeout=30) == 0


def test_gke_nodes_out_of_range_is_one_line(tmp_path: Path) -> None:
    result = gcptui("emulator", "--vms", "1", "--gke-nodes", "17", "--dir", str(tmp_path / "emu"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "--gke-nodes 17" in result.stderr
