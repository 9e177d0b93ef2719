"""A command in a pod that writes 512 MiB to stderr while its caller reads only stdout: what the
laptop buffers of it stays bounded (dropped past the buffer), and stdout still arrives whole."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from gcptui.remote.aio import within
from gcptui.remote.compute.gke.backend import GkeBackend
from gcptui.remote.compute.gke.pod_exec import PodExecChannel
from gcptui.remote.config.loader import load_config
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.services import Services
from tests.helpers.emulator import wait_until

FLOOD = 512 << 20


def _rss() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def test_512_mib_of_unread_pod_stderr_is_bounded(api_emulator: EmulatorThread, tmp_path: Path) -> None:
    cluster = api_emulator.add_gke_cluster("training", nodes=1)
    spec = {"containers": [{"name": "c", "image": "i", "command": ["sleep", "600"]}]}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "noisy"}, "spec": spec}
    api_emulator.call(cluster.create_pod, "default", pod)
    wait_until(lambda: ("default", "noisy") in cluster.runners and cluster.runners[("default", "noisy")].process,
               timeout=30)  # fmt: skip
    services = Services(load_config(str(api_emulator.write_config(tmp_path / "gcptui.toml"))))
    backend = services.compute.backends["gke"]
    assert isinstance(backend, GkeBackend)
    channel = PodExecChannel(backend.cluster(0), "default", "noisy")
    peak = start = _rss()

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, _rss())
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    try:
        process = await channel.start(f"head -c {FLOOD} /dev/zero >&2; echo done")
        try:
            out = await within(120, process.stdout.read())  # stderr is never read
            await within(30, process.wait_closed())
        finally:
            process.close()
    finally:
        sampler.cancel()
        await services.close()
    assert out == b"done\n" and process.exit_status == 0
    assert peak - start < 100 << 20, (peak - start) >> 20
    assert process.stderr_dropped > FLOOD - (16 << 20)
