"""The tour's preemptions, as a user of `gcptui emulator --tpus 1 --tpu-workers 2 --gke-nodes 2` acts
them out: `gcptui vm preempt` of the Spot TPU node (the emulator's control path) and of the GKE node
running the StatefulSet's pod 0 (a Compute Engine instance labelled goog-gke-node, Compute Engine's
simulateMaintenanceEvent) both exit 0, and `gcptui keepalive` runs the job again on both workers of
the new node and in the new pod. The job is the torch-free toy trainer, so the test stays light."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")

RECOVERED_WITHIN = 180.0
TOY = "python3 toy_train.py --run-dir runs/r --steps 100000 --checkpoint-every 20 --log-every 5 --step-delay 0.1"


def _cli(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gcptui.tui", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)  # fmt: skip


def _lines(process: subprocess.Popen[str]) -> queue.Queue[str]:
    """Each line the process prints, as it prints it."""
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _until(lines: queue.Queue[str], pattern: str, deadline: float, seen: list[str]) -> str:
    """The first line matching ``pattern``, among those seen already or those to come (all kept in
    ``seen``: the recoveries' lines interleave), or fail at ``deadline``."""
    found = next((line for line in seen if re.search(pattern, line)), None)
    if found is not None:
        return found
    while True:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(
                f"no line matching {pattern!r}; keep-alive said:\n" + "\n".join(seen)
            ) from None
        seen.append(line)
        if re.search(pattern, line):
            return line


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_vm_preempt_reaches_a_tpu_node_and_a_gke_node_and_keepalive_runs_the_job_again(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "emu"
    env = {k: v for k, v in os.environ.items() if k != "STORAGE_EMULATOR_HOST"}
    emulator = subprocess.Popen(
        [sys.executable, "-m", "gcptui.tui", "emulator", "--vms", "1", "--tpus", "1", "--tpu-workers", "2",
         "--gke-nodes", "2", "--preempt-grace", "5", "--dir", str(directory)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    keepalive: subprocess.Popen[str] | None = None
    try:
        assert emulator.stdout is not None
        assert "emulator ready" in emulator.stdout.readline()
        # The emulator's own config, its job made the toy trainer (the demo's project carries it).
        assert (directory / "project" / "toy_train.py").is_file()
        text = (directory / "gcptui.toml").read_text()
        text = re.sub(r"(?m)^command = .*$", f"command = {json.dumps(TOY)}", text, count=1)
        text = re.sub(r"(?m)^resume = .*$", f"resume = {json.dumps(TOY + ' --resume')}", text, count=1)
        config = directory / "toy.toml"
        config.write_text(text)
        at = ["--config", str(config)]

        listed = _cli("ls", "--json", "--all", *at, env=env)
        assert listed.returncode == 0, listed.stderr
        rows = {row["name"]: row for row in json.loads(listed.stdout)}
        nodes = [
            name for name, row in rows.items() if name.startswith("gke-training-") and row["source"] == "gce"
        ]
        assert len(nodes) == 2 and {"tpu-1", "trainer"} <= set(rows)
        assert not set(nodes) & {row["name"] for row in json.loads(_cli("ls", "--json", *at, env=env).stdout)}

        keepalive = subprocess.Popen([sys.executable, "-m", "gcptui.tui", "keepalive", *at], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env)  # fmt: skip
        lines, seen = _lines(keepalive), []
        _until(lines, r"keep-alive: watching", time.monotonic() + 60, seen)
        # The node boots while the emulator says ready: its workers are reachable once their host keys
        # are published (a `job status` that answers), as a user's first command would find them.
        reachable = time.monotonic() + 90
        while _cli("job", "status", "tpu-1", *at, env=env).returncode != 0:
            assert time.monotonic() < reachable, "tpu-1's workers never became reachable"
        started = _cli("job", "start", "tpu-1", "trainer", *at, env=env)
        assert started.returncode == 0, started.stderr

        begin = time.monotonic()
        deadline = begin + RECOVERED_WITHIN
        preempted = _cli("vm", "preempt", "tpu-1", *at, env=env)
        assert preempted.returncode == 0, preempted.stderr
        # Keep-alive polls every row at once: by the time it reads the TPU node preempted (after the
        # grace), it has read the GKE workload running its job too, which it needs to resume it.
        _until(lines, r"tpu-1: preempted", deadline, seen)
        pod = subprocess.run(["kubectl", "--kubeconfig", str(directory / "kubeconfig"), "get", "pod", "trainer-0",
                              "-o", "jsonpath={.spec.nodeName}"], capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
        assert pod.stdout in nodes
        preempted = _cli("vm", "preempt", pod.stdout, *at, env=env)
        assert preempted.returncode == 0, preempted.stderr

        _until(lines, r"tpu-1: started - 2 workers", deadline, seen)
        _until(lines, r"trainer: started - 2 workers", deadline, seen)
        print(f"both jobs running again {time.monotonic() - begin:.0f} s after the first preempt")
        status = _cli("job", "status", "tpu-1", "trainer", "--json", *at, env=env)
        assert status.returncode == 0, status.stderr
        states = {row["name"]: row["state"] for row in json.loads(status.stdout)}
        assert set(states) == {"tpu-1/w0", "tpu-1/w1", "trainer/trainer-0", "trainer/trainer-1"}, states
        assert set(states.values()) == {"running"}, states
    finally:
        if keepalive is not None:
            _stop(keepalive)
        _stop(emulator)
