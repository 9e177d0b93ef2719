"""A job on a 2-worker TPU node: one key starts the same program on both workers at once, each told
its rank and every worker's address; kill stops both. Real SSH to the emulator's worker hosts, their
host keys pinned from the TPU API's guest attributes."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gcptui.remote.compute.tpu.backend import TpuBackend
from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.jobs.workers import WorkerJobRunner
from gcptui.remote.services import Services

COMMAND = (
    'echo "$TPU_WORKER_ID $GCPTUI_WORKERS $TPU_WORKER_HOSTNAMES $GCPTUI_COORDINATOR" > rank.txt; sleep 60'
)


async def test_a_job_runs_on_every_worker_with_its_rank_and_is_killed_on_all(
    emulator: Emulator, tmp_path: Path
) -> None:
    emulator.add_tpu("tpu-a", accelerator_type="v4-16", spot=True)
    await emulator.wait_for_tpu("tpu-a", "READY")
    node = emulator.tpu("tpu-a")
    for worker in node.workers:
        assert worker.disk is not None
        (worker.disk / "home" / "project").mkdir(parents=True)
    config_path = emulator.write_config(tmp_path / "gcptui.toml")
    config = load_config(str(config_path))
    config = config.model_copy(update={"job": config.job.model_copy(update={"command": COMMAND})})
    services = Services(config)
    try:
        backend = services.compute.backends["tpu"]
        assert isinstance(backend, TpuBackend)
        (row,) = (await asyncio.to_thread(backend.list_rows)).rows
        workers = backend.worker_rows(row)
        assert [w.name for w in workers] == ["tpu-a/w0", "tpu-a/w1"]
        runner = WorkerJobRunner(config)
        runner.prepare(row.name, workers)
        targets = [services.target(w) for w in workers]
        assert all(t.host_key_alias and t.host_key_alias.startswith(f"tpu.{node.id}-") for t in targets)

        hosts = [services.reach(w) for w in workers]
        started = await runner.run_all("start", hosts)
        assert all(r.ok and r.value is not None and r.value.state == "running" for r in started), started

        internal = ",".join(w.network_ip for w in node.workers)
        for rank, worker in enumerate(node.workers):
            rank_file = Path(worker.disk or "") / "home" / "project" / "rank.txt"
            for _ in range(200):
                if rank_file.exists() and rank_file.read_text().strip():
                    break
                await asyncio.sleep(0.05)
            assert rank_file.read_text().split() == [
                str(rank),
                "2",
                internal,
                f"{node.workers[0].network_ip}:8476",
            ]

        killed = await runner.run_all("kill", hosts)
        assert [r.value.state if r.value else None for r in killed] == ["killed", "killed"]
    finally:
        await services.close()
