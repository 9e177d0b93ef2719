"""The exec channel into a GKE pod (Kubernetes exec over WebSocket, v5.channel.k8s.io) beside the SSH
channel into an emulated VM, on the emulator: what each command of gcptui pays to reach the machine.

    python benchmarks/gke_exec.py [--repeat 50]

Measures, per channel, p50 and p99 over ``--repeat`` runs:

- ``true``: one command to its exit status (a fresh exec session each time; over SSH, a new channel on
  the pool's warm connection);
- ``edit_visible``: a file written through one command (its content over stdin) and read back by the
  next, the smallest "an edit is visible there" (what sync's agent will pay per change over exec).

Both machines are local processes of the emulator on loopback (the pod's API server over TLS), so the
figures are the protocols' and servers' own costs, without a network. Prints ONE JSON object last.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gcptui.remote.compute.exec_channel import ExecChannel  # noqa: E402
from gcptui.remote.config import load_config  # noqa: E402
from gcptui.remote.emulator.emulator import Emulator  # noqa: E402
from gcptui.remote.services import Services  # noqa: E402


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50_ms": round(statistics.median(ordered) * 1000, 2), "p99_ms": round(p99 * 1000, 2)}


async def _time(repeat: int, step: Callable[[int], Awaitable[None]]) -> dict[str, float]:
    samples = []
    for index in range(repeat):
        started = time.perf_counter()
        await step(index)
        samples.append(time.perf_counter() - started)
    return _percentiles(samples)


async def _measure(channel: ExecChannel, repeat: int) -> dict[str, dict[str, float]]:
    async def true(_: int) -> None:
        assert (await channel.run("true", timeout=30)).ok

    async def edit(index: int) -> None:
        text = f"edit {index}\n".encode()
        assert (await channel.run("cat > edited.txt", input=text, timeout=30)).ok
        assert (await channel.run("cat edited.txt", timeout=30)).stdout == text

    await true(0)  # warm: the first TLS handshake, the SSH connection
    return {"true": await _time(repeat, true), "edit_visible": await _time(repeat, edit)}


async def main(repeat: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="gcptui-bench-gke-") as directory:
        emulator = Emulator(Path(directory) / "emu", boot_seconds=0.1, stop_seconds=0.1)
        await emulator.start()
        services: Services | None = None
        try:
            emulator.add_instance("vm-0")
            await emulator.wait_for_status("vm-0", "RUNNING")
            cluster = await emulator.add_gke_cluster("training", nodes=1)
            spec = {"containers": [{"name": "c", "image": "i", "command": ["sleep", "3600"]}]}
            cluster.create_pod(
                "default", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pod-0"}, "spec": spec}
            )
            while (cluster.store.get("pods", "default", "pod-0") or {}).get("status", {}).get(
                "phase"
            ) != "Running":
                await asyncio.sleep(0.05)
            services = Services(load_config(str(emulator.write_config())))
            rows = await asyncio.to_thread(lambda: services.compute.list_rows().rows)  # type: ignore[union-attr]
            pod_row = next(r for r in rows if r.source == "gke")
            vm_row = next(r for r in rows if r.name == "vm-0")
            pod = services.compute.of(pod_row).exec_channel(pod_row)
            vm = services.exec_channel(vm_row)
            print("measuring the pod's exec channel ...", file=sys.stderr)
            pod_figures = await _measure(pod, repeat)
            print("measuring the VM's SSH channel ...", file=sys.stderr)
            vm_figures = await _measure(vm, repeat)
        finally:
            if services is not None:
                await services.close()
            await emulator.close()
    return {"benchmark": "gke_exec", "repeat": repeat, "pod_exec": pod_figures, "vm_ssh": vm_figures}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    print(json.dumps(asyncio.run(main(parser.parse_args().repeat))))
