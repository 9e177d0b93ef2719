"""gcptui's loop in a GKE workload's pods, over Kubernetes exec, as on VMs: `gcptui sync` reaches each
pod (an edit is visible in it), `gcptui job start WORKLOAD` runs the job supervisor in every pod at
once (each told its rank), `job status`, `gpu` and the progress protocol read from the pods, and
`gcptui logs` prints the job's own output log of each pod side by side."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gcptui.remote.config.loader import load_config
from gcptui.remote.emulator import toy_train
from gcptui.remote.emulator.gke.cluster import Cluster
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.jobs.protocol import metrics_path
from gcptui.remote.services import Services
from gcptui.remote.telemetry.progress import Progress, follow_progress
from tests.cli.test_ls import gcptui

JOB = """
[sync]
source = "{source}"
dest = "~/project"

[job]
command = "echo rank $GCPTUI_WORKER_RANK of $GCPTUI_WORKERS on $HOSTNAME; {python} -IS toy_train.py --run-dir run --steps 100000 --log-every 10 --step-delay 0.05"
"""


class Setup:
    def __init__(self, cluster: Cluster, config: Path, source: Path) -> None:
        self.cluster, self.config, self.source = cluster, config, source

    def home(self, pod: str) -> Path:
        """The pod's own folder (its HOME), where the emulator runs it."""
        return self.cluster.runners[("default", pod)].directory

    def cli(self, *args: str) -> str:
        result = gcptui(*args, "--config", str(self.config))
        assert result.returncode == 0, result.stderr
        return result.stdout


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("gke-jobs")
    source = root / "src"
    source.mkdir()
    (source / "toy_train.py").write_text(Path(toy_train.__file__).read_text())
    (source / "notes.txt").write_text("first\n")
    with EmulatorThread(root / "emu", ssh=False) as emu:
        cluster = emu.add_gke_cluster("training", "us-central1-a", nodes=2)
        emu.call(cluster.add_statefulset, "trainer", 2, ["sleep", "3600"])  # the pods: hosts for the job
        config = emu.write_config(root / "gcptui.toml")
        config.write_text(config.read_text() + JOB.format(source=source, python=sys.executable))
        found = Setup(cluster, config, source)
        deadline = time.monotonic() + 30
        while len(cluster.runners) < 2 or any(r.process is None for r in cluster.runners.values()):
            assert time.monotonic() < deadline, "the pods did not start"
            time.sleep(0.05)  # polling the emulator's thread
        yield found


def test_sync_reaches_each_pod_and_an_edit_is_visible(setup: Setup) -> None:
    (setup.source / "notes.txt").write_text("first\n")
    setup.cli("sync", "trainer", "--once")
    for pod in ("trainer-0", "trainer-1"):
        assert (setup.home(pod) / "project" / "notes.txt").read_text() == "first\n"
    (setup.source / "notes.txt").write_text("edited\n")
    setup.cli("sync", "trainer/trainer-1", "--once")
    assert (setup.home("trainer-1") / "project" / "notes.txt").read_text() == "edited\n"


def test_job_start_runs_in_every_pod_with_its_rank_and_reports_back(setup: Setup) -> None:
    (setup.source / "notes.txt").write_text("for the job\n")  # tests may run on other workers: no order
    setup.cli("job", "start", "trainer")
    status = json.loads(setup.cli("job", "status", "trainer", "--json"))
    assert sorted((s["name"], s["state"]) for s in status) == [
        ("trainer/trainer-0", "running"),
        ("trainer/trainer-1", "running"),
    ]
    for pod in ("trainer-0", "trainer-1"):  # the start synced first (the edit too)
        assert (setup.home(pod) / "project" / "notes.txt").read_text() == "for the job\n"

    # Progress: the protocol's lines from rank 0's pod, over its exec channel.
    async def progress() -> Progress | None:
        services = Services(load_config(str(setup.config)))
        try:
            (pod,) = await services.machines(["trainer/trainer-0"])
            path = metrics_path(services.config.job, services.config.sync.dest)
            for _ in range(100):
                last = None
                async for item in follow_progress(services.channel(pod), path, follow=False):
                    if isinstance(item, Progress):
                        last = item
                if last is not None and last.step:
                    return last
                await asyncio.sleep(0.1)  # the job's first steps are still to come
            return None
        finally:
            await services.close()

    found = asyncio.run(progress())
    assert found is not None and found.step is not None and found.step >= 1

    gpus = json.loads(setup.cli("gpu", "trainer", "--once", "--json"))
    assert sorted(g["name"] for g in gpus) == ["trainer/trainer-0", "trainer/trainer-1"]
    assert all(g["gpus"] and g["gpus"][0]["name"] for g in gpus), gpus  # the node's L4, as nvidia-smi says

    logs = setup.cli("logs", "trainer", "-n", "200")  # [job].command set: the job's own output log
    assert "trainer/trainer-0 | rank 0 of 2 on trainer-0" in logs, logs
    assert "trainer/trainer-1 | rank 1 of 2 on trainer-1" in logs, logs

    setup.cli("job", "kill", "trainer")
    status = json.loads(setup.cli("job", "status", "trainer", "--json"))
    assert {s["state"] for s in status} <= {"killed", "stopped", "exited"}, status
