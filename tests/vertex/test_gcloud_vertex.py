"""The real ``gcloud ai custom-jobs`` and ``gcloud logging read`` against the emulator's Vertex AI and
Cloud Logging rooms (``api_endpoint_overrides/aiplatform`` and ``/logging``). Skipped without gcloud."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gcptui.remote.compute.vertex.backend import VertexBackend
from gcptui.remote.config import load_config
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.models import State, Worker
from gcptui.remote.services import Services

pytestmark = pytest.mark.skipif(shutil.which("gcloud") is None, reason="the gcloud CLI is not installed")
REGION = "--region=us-central1"
POOL = "--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,container-image-uri=us-docker.pkg.dev/p/r/i:1"


class Gcloud:
    def __init__(self, emu: EmulatorThread, root: Path) -> None:
        self.env = {
            **os.environ, "HOME": str(root), "CLOUDSDK_CONFIG": str(root / "gcloud"),
            "CLOUDSDK_CORE_DISABLE_PROMPTS": "1", "CLOUDSDK_CORE_DISABLE_USAGE_REPORTING": "1",
            "CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK": "1",
        }  # fmt: skip
        self.env.pop("CLOUDSDK_CORE_PROJECT", None)
        # The properties `gcloud config set` would write, written directly (each gcloud start costs seconds).
        config = root / "gcloud" / "configurations"
        config.mkdir(parents=True)
        (root / "gcloud" / "active_config").write_text("default")
        (config / "config_default").write_text(
            f"[core]\nproject = {emu.project}\n[auth]\naccess_token_file = {emu.emulator.token_file}\n"
            f"[api_endpoint_overrides]\naiplatform = {emu.endpoint}/\nlogging = {emu.endpoint}/\n"
        )

    def __call__(self, *args: str) -> str:
        return self.together([args])[0]

    def together(self, commands: list[tuple[str, ...]]) -> list[str]:
        """Run gcloud commands side by side (each start costs seconds on a loaded machine)."""
        runs = [subprocess.Popen(["gcloud", *args], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True) for args in commands]  # fmt: skip
        outputs = []
        for args, run in zip(commands, runs, strict=True):
            out, err = run.communicate(timeout=120)
            assert run.returncode == 0, f"gcloud {' '.join(args)} failed:\n{err}"
            outputs.append(out)
        return outputs


def test_gcloud_creates_lists_describes_follows_and_cancels_custom_jobs(tmp_path: Path) -> None:
    with EmulatorThread(tmp_path / "emu", ssh=False) as emu:
        emu.emulator.vertex_timing.kill_grace_seconds = 0.5
        vertex = emu.emulator.vertex
        assert vertex is not None
        gcloud = Gcloud(emu, tmp_path)
        script = "import sys; print('step one'); print('step two'); sys.stderr.write('to stderr')"
        gcloud.together([
            ("ai", "custom-jobs", "create", REGION, "--display-name=short", POOL, "--command=python3", f"--args=-c,{script}"),
            ("ai", "custom-jobs", "create", REGION, "--display-name=long", POOL, "--command=python3",
             "--args=-c,import time; time.sleep(600)"),
        ])  # fmt: skip
        by_name = {job.body["displayName"]: job for job in vertex.jobs.values()}
        short, long = by_name["short"], by_name["long"]

        # stream-logs polls until it sees the job ended: every line, in order, each with its task.
        logs, listed, _ = gcloud.together([
            ("ai", "custom-jobs", "stream-logs", short.id, REGION, "--polling-interval=1"),
            ("ai", "custom-jobs", "list", REGION, "--format=value(name,displayName)"),
            ("ai", "custom-jobs", "cancel", long.id, REGION),
        ])  # fmt: skip
        lines = [line.split("\t") for line in logs.splitlines()]
        worker = [(severity, message) for severity, _, task, message in lines if task == "workerpool0-0"]
        assert sorted(worker) == [("ERROR", "to stderr"), ("INFO", "step one"), ("INFO", "step two")]
        assert worker.index(("INFO", "step one")) < worker.index(("INFO", "step two"))
        prefix = f"projects/{emu.emulator.project_number}/locations/us-central1/customJobs"
        assert sorted(listed.splitlines()) == sorted(
            [f"{prefix}/{long.id}\tlong", f"{prefix}/{short.id}\tshort"]
        )

        emu.run(long.ended_event.wait(), timeout=30)
        # gcptui lists the jobs gcloud made; gcloud describes the one gcptui's client submits.
        config = emu.emulator.write_config(tmp_path / "gcptui.toml")
        config.write_text(config.read_text() + '\n[vertex]\nregions = ["us-central1"]\n')
        services = Services(load_config(str(config)))
        backend = services.compute.backends["vertex"]
        assert isinstance(backend, VertexBackend)
        rows = {row.name: row for row in backend.list_rows().rows}
        assert rows[short.id].state is State.SUCCEEDED and rows[long.id].status == "JOB_STATE_CANCELLED"
        assert rows[short.id].workers == (Worker("workerpool0-0", None, State.SUCCEEDED),)
        body = {"displayName": "from-gcptui", "jobSpec": {"workerPoolSpecs": [
            {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
             "containerSpec": {"imageUri": "i", "command": ["python3", "-c", "pass"]}}]}}  # fmt: skip
        mine = backend.rest().create_job("us-central1", body)["name"].rsplit("/", 1)[1]
        asyncio.run(services.close())
        first, second, read, third = gcloud.together([
            ("ai", "custom-jobs", "describe", short.id, REGION, "--format=value(state,jobSpec.workerPoolSpecs[0].replicaCount)"),
            ("ai", "custom-jobs", "describe", long.id, REGION, "--format=value(state,error.code)"),
            ("logging", "read", f'resource.type="ml_job" AND resource.labels.job_id="{short.id}"',
             "--format=value(resource.labels.task_name,jsonPayload.message)"),
            ("ai", "custom-jobs", "describe", mine, REGION, "--format=value(displayName)"),
        ])  # fmt: skip
        assert third.strip() == "from-gcptui"
        assert first.split() == ["JOB_STATE_SUCCEEDED", "1"]
        assert second.split() == ["JOB_STATE_CANCELLED", "1"]
        assert "workerpool0-0\tstep two" in read.splitlines()
