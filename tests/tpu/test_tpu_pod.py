"""A TPU slice of 16 worker hosts: `job start` reaches every worker at once, each job on its own
worker (its own disk, its own rank, its own process tree); and `gcptui emulator` takes up to 64
workers per node. Real SSH to the emulator's worker hosts."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import psutil

from gcptui.remote.compute.tpu.backend import TpuBackend
from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.emulator.hosts.vm_processes import MARKER
from gcptui.remote.jobs.workers import WorkerJobRunner
from gcptui.remote.services import Services

WORKERS = 16
COMMAND = 'echo "$TPU_WORKER_ID $GCPTUI_WORKERS $$" > rank.txt; exec sleep 60'


def _marker_of(pid: int) -> str | None:
    try:
        return psutil.Process(pid).environ().get(MARKER)
    except psutil.Error:
        return None


async def test_job_start_reaches_all_16_workers_each_on_its_own_host(
    emulator: Emulator, tmp_path: Path
) -> None:
    emulator.add_tpu("pod", workers=WORKERS, spot=True)
    await emulator.wait_for_tpu("pod", "READY", timeout=60)
    node = emulator.tpu("pod")
    for worker in node.workers:
        assert worker.disk is not None
        (worker.disk / "home" / "project").mkdir(parents=True)
    config = load_config(str(emulator.write_config(tmp_path / "gcptui.toml")))
    config = config.model_copy(update={"job": config.job.model_copy(update={"command": COMMAND})})
    services = Services(config)
    try:
        backend = services.compute.backends["tpu"]
        assert isinstance(backend, TpuBackend)
        (row,) = (await asyncio.to_thread(backend.list_rows)).rows
        workers = backend.worker_rows(row)
        assert len(workers) == WORKERS
        runner = WorkerJobRunner(config)
        runner.prepare(row.name, workers)
        hosts = [services.reach(w) for w in workers]
        started = await runner.run_all("start", hosts)
        failed = [r for r in started if not (r.ok and r.value is not None and r.value.state == "running")]
        assert not failed, failed

        addresses = {w.network_ip for w in node.workers}
        assert len(addresses) == WORKERS  # a loopback address of its own per worker
        pids = set()
        for rank, worker in enumerate(node.workers):
            rank_file = Path(worker.disk or "") / "home" / "project" / "rank.txt"
            for _ in range(400):  # the job writes it just after the supervisor reports it running
                if rank_file.exists() and rank_file.read_text().strip():
                    break
                await asyncio.sleep(0.05)
            told_rank, told_workers, pid = rank_file.read_text().split()
            assert (told_rank, told_workers) == (str(rank), str(WORKERS))
            # The job's process belongs to this worker and no other (its own process tree).
            assert _marker_of(int(pid)) == worker.uid
            pids.add(pid)
        assert len(pids) == WORKERS

        killed = await runner.run_all("kill", hosts)
        assert all(r.value is not None and r.value.state == "killed" for r in killed), killed
    finally:
        await services.close()


def test_the_emulator_command_takes_up_to_64_workers_and_says_so_past_it(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "gcptui.tui", "emulator", "--tpus", "1", "--dir", str(tmp_path / "emu")]
    past = subprocess.run([*argv, "--tpu-workers", "65"], capture_output=True, text=True, timeout=60)
    assert past.returncode != 0
    assert "--tpu-workers 65: choose 0-16 nodes of 1-64 workers" in past.stderr
    assert "Traceback" not in past.stderr


def test_every_node_the_emulator_makes_can_be_made_again_by_its_type() -> None:
    """A preempted node is recreated through the TPU API by its accelerator type: the API takes the
    type of a node of any worker count `--tpu-workers` allows (v4-512 for 64; v4-24, a 2x2x3 slice)."""
    from gcptui.remote.emulator.tpu.types import parse_type, type_from_config, type_with_hosts

    for hosts in range(1, 65):
        made = type_with_hosts(hosts)
        again = parse_type(made.name)
        assert again is not None and again.hosts == hosts, made.name
    by_shape = type_from_config("V4", "2x2x3")
    assert by_shape is not None and by_shape.hosts == 3
    assert parse_type("v4-520") is None and parse_type("v4-12") is None  # past 64 hosts, not whole hosts
