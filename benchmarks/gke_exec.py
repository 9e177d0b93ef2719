"""The exec channel into a GKE pod (Kubernetes exec over WebSocket, v5.channel.k8s.io) beside the SSH
channel into an emulated VM, on the emulator: what each command of gcptui pays to reach the machine.

    python benchmarks/gke_exec.py [--repeat 50] [--edits 100]

Measures, per channel, p50 and p99 over ``--repeat`` runs (``--edits`` for the last):

- ``true``: one command to its exit status (a fresh exec session each time; over SSH, a new channel on
  the pool's warm connection);
- ``edit_visible``: a file written through one command (its content over stdin) and read back by the
  next, the smallest "an edit is visible there" (one exec session per step);
- ``sync_edit_visible``: gcptui's live sync (``SyncSession.follow``, its agent running in the pod or
  the VM over the channel) of a 200-file tree: a local file rewritten until the machine's copy holds
  the new bytes (read from the machine's folder, which the emulator keeps on this disk).

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

from bench_run import owned_run, quick, quick_flag  # noqa: E402

from gcptui.remote.compute.exec_channel import ExecChannel  # noqa: E402
from gcptui.remote.config import load_config  # noqa: E402
from gcptui.remote.emulator.emulator import Emulator  # noqa: E402
from gcptui.remote.services import Services  # noqa: E402
from gcptui.remote.sync import SyncSession  # noqa: E402


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


async def _live_sync(session: SyncSession, source: Path, remote: Path, edits: int) -> dict[str, float]:
    """Edit → visible on the machine under a following sync session (as benchmarks/sync.py measures)."""
    task = asyncio.create_task(session.follow())
    try:
        while session.state != "in_sync":
            await asyncio.sleep(0.01)
        samples = []
        edited = source / "pkg" / "file0.py"
        for index in range(edits):
            payload = f"edit {index}\n".encode() * (1 + index % 50)
            started = time.perf_counter()
            edited.write_bytes(payload)
            while _read(remote / "pkg" / "file0.py") != payload:
                await asyncio.sleep(0.0005)
            samples.append(time.perf_counter() - started)
            await asyncio.sleep(0.01 + (index % 7) / 1000)  # edits apart, as a person saves
        return _percentiles(samples)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await session.close()


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


async def main(repeat: int, edits: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="gcptui-bench-gke-") as directory:
        project = Path(directory) / "project"
        for index in range(200):  # a small code tree: what live sync follows
            (project / "pkg").mkdir(parents=True, exist_ok=True)
            (project / "pkg" / f"file{index}.py").write_text(f"x = {index}\n" * 40)
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
            services = Services(load_config(str(emulator.write_config(sync_source=project))))
            rows = await asyncio.to_thread(lambda: services.compute.list_rows().rows)  # type: ignore[union-attr]
            pod_row = next(r for r in rows if r.source == "gke")
            vm_row = next(r for r in rows if r.name == "vm-0")
            pod = services.compute.of(pod_row).exec_channel(pod_row)
            vm = services.exec_channel(vm_row)
            print("measuring the pod's exec channel ...", file=sys.stderr)
            pod_figures = await _measure(pod, repeat)
            print("measuring the VM's SSH channel ...", file=sys.stderr)
            vm_figures = await _measure(vm, repeat)
            dest = services.config.sync.dest.removeprefix("~/")
            pod_home = cluster.runners[("default", "pod-0")].directory
            vm_disk = emulator.instance("vm-0").disk
            assert vm_disk is not None
            print("measuring live sync into the pod ...", file=sys.stderr)
            pod_figures["sync_edit_visible"] = await _live_sync(
                services.sync_session(pod_row), project, pod_home / dest, edits
            )
            print("measuring live sync into the VM ...", file=sys.stderr)
            vm_figures["sync_edit_visible"] = await _live_sync(
                services.sync_session(vm_row), project, Path(vm_disk) / "home" / dest, edits
            )
        finally:
            if services is not None:
                await services.close()
            await emulator.close()
    return {"benchmark": "gke_exec", "repeat": repeat, "edits": edits, "pod_exec": pod_figures,
            "vm_ssh": vm_figures}  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--edits", type=int, default=100)
    quick_flag(parser)
    arguments = quick(parser.parse_args(), repeat=10, edits=10)
    with owned_run("gke_exec"):
        result = asyncio.run(main(arguments.repeat, arguments.edits))
    # The pod's exec channel beside SSH into a VM, in the same run: p50 over p50.
    for figure in ("true", "edit_visible", "sync_edit_visible"):
        pod, vm = result["pod_exec"][figure]["p50_ms"], result["vm_ssh"][figure]["p50_ms"]  # type: ignore[index]
        result[f"pod_over_vm_{figure}_p50"] = round(pod / vm, 3) if vm else None
    print(json.dumps(result))
