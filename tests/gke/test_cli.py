"""A GKE workload from the command line, on the emulated cluster: its pods as machines
(``WORKLOAD/POD``), its $/h (the nodes its pods occupy), ``gcptui logs`` of its pods side by side,
``job restart`` recreating its pods, and ``vm delete`` asking first and naming the nodes that keep
billing with their $/h."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gcptui.remote.config.loader import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.emulator.gke.cluster import Cluster
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.services import Services
from tests.cli.test_ls import gcptui
from tests.helpers.emulator import eventually

TALK = "i=0; while true; do i=$((i+1)); echo line $i of $HOSTNAME; sleep 0.2; done"


class Setup:
    def __init__(self, emu: EmulatorThread, cluster: Cluster, config: Path) -> None:
        self.emu, self.cluster, self.config = emu, cluster, config

    def pods(self, app: str) -> dict[str, dict[str, Any]]:
        found = self.emu.call(lambda: self.cluster.store.select("pods", "default"))
        return {p["metadata"]["name"]: p for p in found if p["metadata"]["labels"].get("app") == app}

    def wait_running(self, app: str, count: int) -> dict[str, dict[str, Any]]:
        deadline = time.monotonic() + 30
        while True:
            pods = self.pods(app)
            running = [p for p in pods.values() if p["status"].get("phase") == "Running"]
            if len(running) == count and not any(
                p["metadata"].get("deletionTimestamp") for p in pods.values()
            ):
                return pods
            assert time.monotonic() < deadline, pods
            time.sleep(0.1)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("gke-cli")
    with EmulatorThread(root / "emu", ssh=False) as emu:
        cluster = emu.add_gke_cluster("training", "us-central1-a", nodes=2)
        emu.call(cluster.add_statefulset, "trainer", 2, ["sh", "-c", TALK])
        found = Setup(emu, cluster, emu.write_config(root / "gcptui.toml"))
        found.wait_running("trainer", 2)
        yield found


def test_pods_are_machines_and_the_row_costs_its_nodes(setup: Setup) -> None:
    async def read() -> tuple[list[str], list[str], float | None, list[float | None]]:
        services = Services(load_config(str(setup.config)))
        try:
            pods = await services.machines(["trainer"])
            one = await services.machines(["trainer/trainer-1"])
            row = services.latest("trainer")
            assert row is not None
            return (
                [p.name for p in pods],
                [p.name for p in one],
                row.usd_per_hour,
                [p.usd_per_hour for p in pods],
            )
        finally:
            await services.close()

    pods, one, row_price, pod_prices = asyncio.run(read())
    assert pods == ["trainer/trainer-0", "trainer/trainer-1"] and one == ["trainer/trainer-1"]
    # Two Spot g2-standard-8 nodes, one pod each: the row bills both nodes, each pod its own.
    assert row_price is not None and row_price > 0 and all(p is not None for p in pod_prices)
    assert row_price == pytest.approx(sum(p for p in pod_prices if p is not None), abs=1e-3)
    listed = json.loads(gcptui("ls", "--json", "--config", str(setup.config)).stdout)
    assert next(o for o in listed if o["name"] == "trainer")["usd_per_hour"] == pytest.approx(row_price)


def test_logs_of_the_pods_side_by_side(setup: Setup) -> None:
    both = gcptui("logs", "trainer", "-n", "3", "--config", str(setup.config))
    assert both.returncode == 0, both.stderr
    lines = both.stdout.splitlines()
    assert any(
        line.startswith("trainer/trainer-0 | line ") and line.endswith("of trainer-0") for line in lines
    )
    assert any(
        line.startswith("trainer/trainer-1 | line ") and line.endswith("of trainer-1") for line in lines
    )
    one = gcptui("logs", "trainer/trainer-1", "-n", "2", "--config", str(setup.config))
    assert one.returncode == 0, one.stderr
    assert len(one.stdout.splitlines()) == 2 and all(
        line.startswith("line ") and line.endswith("of trainer-1") for line in one.stdout.splitlines()
    )
    missing = gcptui("logs", "trainer/trainer-7", "--config", str(setup.config))
    assert missing.returncode == 2 and "has no pod 'trainer-7'" in missing.stderr


def test_job_restart_recreates_the_pods(setup: Setup) -> None:
    before = {p["metadata"]["uid"] for p in setup.pods("trainer").values()}  # type: ignore[index]
    result = gcptui("job", "restart", "trainer", "--config", str(setup.config))
    assert result.returncode == 0, result.stderr
    assert "trainer: pods being recreated" in result.stderr
    after = setup.wait_running("trainer", 2)
    assert not before & {p["metadata"]["uid"] for p in after.values()}  # type: ignore[index]


def test_delete_asks_first_naming_the_nodes_that_keep_billing(setup: Setup) -> None:
    leader, follower = pty.openpty()
    run = subprocess.Popen(
        [sys.executable, "-m", "gcptui.tui", "--config", str(setup.config), "vm", "delete", "trainer"],
        stdin=follower, stdout=follower, stderr=follower,
    )  # fmt: skip
    os.close(follower)
    seen = b""
    try:
        deadline = time.monotonic() + 60
        while b"Type 'yes'" not in seen:
            assert time.monotonic() < deadline, seen.decode(errors="replace")
            seen += os.read(leader, 4096)
        os.write(leader, b"no\n")
        assert run.wait(timeout=60) == 1
    finally:
        run.kill()
        os.close(leader)
    text = seen.decode(errors="replace")
    assert "Delete trainer (the pods go with it)?" in text and "keep billing" in text, text
    nodes = [n["metadata"]["name"] for n in setup.emu.call(lambda: setup.cluster.store.select("nodes"))]
    for node in nodes:  # both nodes of the pool, each with its machine, Spot and $/h
        assert f"{node} (g2-standard-8, 1× nvidia-l4, Spot, pool pool-1): $" in text, text
    assert "together $" in text and "boot disks" not in text
    assert len(setup.pods("trainer")) == 2  # nothing deleted


def test_ssh_a_shell_in_a_pod_with_a_terminal_that_resizes(setup: Setup) -> None:
    # A command, no terminal: its output and exit status, as `ssh VM -- COMMAND` gives them.
    ran = subprocess.run(
        [sys.executable, "-m", "gcptui.tui", "--config", str(setup.config), "ssh", "trainer/trainer-1", "--",
         "read x; echo $x on $HOSTNAME; tty || true; exit 4"],
        input="hello", capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert ran.returncode == 4, ran.stderr
    assert ran.stdout.splitlines() == ["hello on trainer-1", "not a tty"]
    # The interactive shell: a TTY in the pod, sized as ours, resized with it.
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    run = subprocess.Popen(
        [sys.executable, "-m", "gcptui.tui", "--config", str(setup.config), "ssh", "trainer"],
        stdin=follower, stdout=follower, stderr=follower,
    )  # fmt: skip
    os.close(follower)
    seen = b""

    def until(*markers: bytes) -> None:
        nonlocal seen
        deadline = time.monotonic() + 30
        while not any(marker in seen for marker in markers):
            assert time.monotonic() < deadline, seen.decode(errors="replace")
            if select.select([leader], [], [], 1)[0]:
                seen += os.read(leader, 4096)

    try:
        until(b"# ", b"$ ")  # the prompt: typed ahead of it, a line may be flushed as the shell sets up
        os.write(leader, b"echo on $HOSTNAME; stty size; tty\r")
        until(b"30 100")
        fcntl.ioctl(leader, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        run.send_signal(signal.SIGWINCH)  # what the kernel sends the terminal's foreground process
        # The resize travels on its own channel, beside the keystrokes: a `stty size` typed at once
        # may run before it lands (seen at load 6), so it is asked again until the new size shows.
        deadline = time.monotonic() + 30
        while b"40 120" not in seen:
            assert time.monotonic() < deadline, seen.decode(errors="replace")
            os.write(leader, b"stty size\r")
            asked = time.monotonic()
            while b"40 120" not in seen and time.monotonic() - asked < 2:
                if select.select([leader], [], [], 0.5)[0]:
                    seen += os.read(leader, 4096)
        os.write(leader, b"exit 3\r")
        assert run.wait(timeout=30) == 3
    finally:
        run.kill()
        os.close(leader)
    text = seen.decode(errors="replace")
    assert "on trainer-0" in text and "/dev/pts/" in text, text


def test_the_demo_workload_in_the_table_with_its_nodes_price(tmp_path: Path) -> None:
    from gcptui.tui.cli.demo import _add_gke_workload

    with EmulatorThread(tmp_path / "emu", ssh=False) as emu:
        _add_gke_workload(emu, 2)  # what `gcptui demo --gke-nodes 2` adds
        config = emu.write_config(tmp_path / "gcptui.toml")
        deadline = time.monotonic() + 30
        while True:
            listed = json.loads(gcptui("ls", "--json", "--config", str(config)).stdout)
            trainer = next((o for o in listed if o["name"] == "trainer"), None)
            if trainer is not None and trainer["state"] == "running":
                break
            assert time.monotonic() < deadline, listed
        table = gcptui("ls", "--config", str(config))
    assert table.returncode == 0, table.stderr
    line = next(line for line in table.stdout.splitlines() if line.split()[:1] == ["trainer"])
    assert f"{trainer['usd_per_hour']:.2f}" in line, line  # both Spot L4 nodes' $/h on the row


async def test_keepalive_names_a_spot_workload_or_its_pod_and_refuses_one_nothing_preempts(
    emulator: Emulator, tmp_path: Path
) -> None:
    """`gcptui keepalive WORKLOAD` (or `WORKLOAD/POD`): the workload, watched over the seam
    as an unnamed run watches it; a workload on on-demand nodes is one line."""
    from gcptui.remote.errors import ConfigError
    from gcptui.remote.keepalive.relaunch import build_keepalive
    from gcptui.tui.cli.keepalive import keep_alive, watched_names

    spot = await emulator.add_gke_cluster("training", "us-central1-a", nodes=1)
    spot.add_statefulset("trainer", 1, ["sleep", "600"], gpus=0)
    steady = await emulator.add_gke_cluster("steady", "us-central1-b", nodes=1, spot=False)
    steady.add_statefulset("serve", 1, ["sleep", "600"], gpus=0)
    services = Services(load_config(str(emulator.write_config(tmp_path / "gcptui.toml"))))
    try:
        await eventually(lambda: ("default", "trainer-0") in spot.runners, timeout=20)
        assert await watched_names(services, ["trainer/trainer-0", "trainer"]) == ["trainer"]
        keepalive = build_keepalive(services, names=["trainer"])
        listed = await keepalive.poll_once()
        assert [row.name for row in listed if keepalive.watched(row)] == ["trainer"]
        with pytest.raises(ConfigError, match="nothing preempts serve \\(not on Spot\\)"):
            await watched_names(services, ["serve"])
        lines: list[str] = []
        stop = asyncio.Event()

        def write(line: str) -> None:
            lines.append(line)
            if line.startswith("keep-alive: watching"):
                stop.set()

        assert await keep_alive(services, ["trainer/trainer-0"], write, stop) == 0
        assert any(line.startswith("keep-alive: watching trainer;") for line in lines), lines
    finally:
        await services.close()
