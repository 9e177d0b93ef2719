"""The log follower and the GPU monitor on a pod whose exec does not open yet (it does not exist:
the API server answers 404): a reconnect with backoff, as the job watch does, never the end; once
the pod runs they read it."""

from __future__ import annotations

from contextlib import aclosing
from pathlib import Path

from gcptui.remote.aio import within
from gcptui.remote.compute.gke.backend import GkeBackend
from gcptui.remote.compute.gke.pod_exec import PodExecChannel
from gcptui.remote.config.loader import load_config
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.services import Services
from gcptui.remote.telemetry.gpu import GpuMonitor
from gcptui.remote.telemetry.log_stream import LogChunk, LogNotice, LogStream


async def test_a_pod_that_cannot_be_exec_d_into_is_reconnected_to_until_it_runs(
    api_emulator: EmulatorThread, tmp_path: Path
) -> None:
    cluster = api_emulator.add_gke_cluster("training", nodes=1)
    services = Services(load_config(str(api_emulator.write_config(tmp_path / "gcptui.toml"))))
    try:
        backend = services.compute.backends["gke"]
        assert isinstance(backend, GkeBackend)
        channel = PodExecChannel(backend.cluster(0), "default", "late")
        log = tmp_path / "train.log"
        log.write_text("step 1\n")

        stream = LogStream(channel, str(log), history_lines=5, retry_delay=0.05)
        gpus = GpuMonitor(channel, nvidia_smi=str(tmp_path / "no-smi"), retry_delay=0.05)
        async with aclosing(stream.events()) as events, aclosing(gpus.snapshots()) as snapshots:
            assert await within(30, anext(events)) == LogNotice("connecting", str(log))
            notice = await within(30, anext(events))
            assert notice.kind == "reconnecting" and "cannot exec in pod default/late" in notice.message
            gpu = await within(30, anext(snapshots))
            assert gpu.state == "reconnecting" and "pod default/late" in gpu.message

            spec = {"containers": [{"name": "c", "image": "i", "command": ["sleep", "600"]}]}
            api_emulator.call(
                cluster.create_pod,
                "default",
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "late"}, "spec": spec},
            )
            lines: list[str] = []
            while "step 1" not in lines:  # reconnecting notices until the pod runs, then its file
                event = await within(30, anext(events))
                if isinstance(event, LogChunk):
                    lines += event.lines
                else:
                    assert event.kind in ("reconnecting", "following"), event
            while (gpu := await within(30, anext(snapshots))).state == "reconnecting":
                pass
            assert gpu.state == "no_gpu"  # the pod answered: no nvidia-smi there
    finally:
        await services.close()
