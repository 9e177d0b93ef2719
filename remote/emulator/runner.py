"""``gcptui emulator``: the emulated fleet alone, in the foreground, until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import TextIO

from gcptui.remote.emulator import toy_train
from gcptui.remote.emulator.demo import add_fleet, demo_fleet
from gcptui.remote.emulator.emulator import Emulator


async def serve_emulator(
    directory: Path,
    vms: int = 4,
    *,
    ssh: bool = True,
    boot_seconds: float = 3.0,
    stop_seconds: float = 3.0,
    preempt_grace_seconds: float = 30.0,
    api_port: int = 0,
    out: TextIO | None = None,
    stop: asyncio.Event | None = None,
    spot_action: str = "stop",
    tpus: int = 0,
    tpu_workers: int = 1,
    gke_nodes: int = 0,
) -> None:
    """Serve until ``stop`` is set (or SIGINT/SIGTERM); writes ``directory/gcptui.toml``."""
    out = out or sys.stdout
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread, or Windows: the caller sets ``stop``
    emulator = Emulator(
        directory,
        ssh=ssh,
        boot_seconds=boot_seconds,
        stop_seconds=stop_seconds,
        preempt_grace_seconds=preempt_grace_seconds,
        api_port=api_port,
    )
    await emulator.start()
    try:
        add_fleet(emulator, demo_fleet(vms, spot_action))
        for n in range(tpus):  # Spot TPU VM nodes of ``tpu_workers`` hosts each, in a TPU v4 zone
            emulator.add_tpu(f"tpu-{n + 1}", "us-central2-b", workers=tpu_workers, spot=True)
        if gke_nodes:  # one cluster of Spot L4 nodes; DIR/kubeconfig reaches its API server
            cluster = await emulator.add_gke_cluster("training", "us-central1-a", nodes=gke_nodes)
            # A small training workload to watch: the torch-free toy trainer, one pod per node (up to 2).
            toy = [sys.executable, "-IS", str(Path(toy_train.__file__)), "--run-dir", "run", "--steps", "100000",
                   "--step-delay", "0.5"]  # fmt: skip
            cluster.add_statefulset("trainer", min(2, gke_nodes), toy)
        project = directory / "project"  # what sync sends: never the emulator's state (its SSH key)
        project.mkdir(parents=True, exist_ok=True)
        config = emulator.write_config(sync_source=project)
        # Vertex AI and Cloud Logging are always served: name them (`vertex submit` also needs
        # [storage] bucket, and [job] command, which the user sets).
        with config.open("a") as handle:
            handle.write(
                '\n[vertex]\nregions = ["us-central1"]\nimage = "emulated-pytorch-cpu"\nmachine_type = "n1-standard-4"\n'
            )
        tpu_note = f", {tpus} TPU nodes of {tpu_workers} workers" if tpus else ""
        if gke_nodes:
            tpu_note += f", a GKE cluster of {gke_nodes} nodes (kubeconfig {emulator.kubeconfig})"
        print(f"emulator ready: {vms} VMs{tpu_note}, config {config}, API {emulator.endpoint}, token file {emulator.token_file}",
              file=out, flush=True)  # fmt: skip
        await stop.wait()
    finally:
        await emulator.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass


def run_emulator(directory: Path, vms: int = 4, **options: object) -> int:
    """Blocking entry for the CLI; returns the exit code (0 after a clean shutdown)."""
    asyncio.run(serve_emulator(Path(directory), vms, **options))  # type: ignore[arg-type]
    return 0
