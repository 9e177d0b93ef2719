"""The demo project's reference trainer as a Spot Vertex AI job on the emulator: a preempted worker is
restarted by Vertex, runs ``[job] resume`` and continues from its last mirrored checkpoint, losing no
step beyond it; the progress reaches ``job status`` from the job's log lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.tui.cli.demo_project import write_demo_project
from gcptui.tui.cli.main import main
from tests.helpers.gcs import FakeGcs


def _events(emu: EmulatorThread, job_id: str) -> list[dict[str, Any]]:
    """The chief's progress-protocol records so far (the trainer writes them to stdout)."""
    found = []
    for entry in list(emu.emulator.logs.entries):
        labels = entry["resource"]["labels"]
        text = entry["jsonPayload"]["message"]
        if (
            labels.get("job_id") == job_id
            and labels.get("task_name") == "workerpool0-0"
            and text.startswith("{")
        ):
            found.append(json.loads(text))
    return found


def _until(emu: EmulatorThread, job_id: str, test: Any, timeout: float = 120.0) -> list[dict[str, Any]]:
    async def wait() -> list[dict[str, Any]]:
        while not test(events := _events(emu, job_id)):
            await emu.emulator.logs.changed.wait()  # woken by every entry written
        return events

    return emu.run(wait(), timeout=timeout)


def test_a_preempted_spot_worker_resumes_from_its_last_mirrored_checkpoint(
    tmp_path: Path, fake_gcs: FakeGcs, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    fake_gcs.make_bucket("demo")
    with EmulatorThread(tmp_path / "emu", ssh=False) as emu:
        vertex = emu.emulator.vertex
        assert vertex is not None
        vertex.env["STORAGE_EMULATOR_HOST"] = fake_gcs.host
        emu.emulator.vertex_timing.kill_grace_seconds = 20.0  # the trainer checkpoints and mirrors on SIGTERM
        config = emu.emulator.write_config(tmp_path / "gcptui.toml")
        write_demo_project(tmp_path, config, storage=("gs://demo", fake_gcs.host))
        text = (
            config.read_text()
            .replace("--steps 3000", "--steps 60")
            .replace("--checkpoint-every 100", "--checkpoint-every 10")
        )
        config.write_text(text + '\n[vertex]\nregions = ["us-central1"]\nimage = "pytorch-cpu"\n')
        assert main(["vertex", "submit", "--spot", "--name", "demo", "--config", str(config)]) == 0
        job_id = capsys.readouterr().out.splitlines()[-1].rsplit("/", 1)[1]
        job = vertex.jobs[job_id]

        _until(
            emu, job_id, lambda events: any(e.get("event") == "mirrored" and e["step"] >= 20 for e in events)
        )
        emu.call(vertex.preempt, job, "workerpool0-0")
        events = _until(emu, job_id, lambda events: any(e.get("event") == "resumed" for e in events))
        cut = next(i for i, e in enumerate(events) if e.get("event") == "resumed")
        mirrored = [e["step"] for e in events[:cut] if e.get("event") == "mirrored"]
        assert events[cut]["step"] == max(mirrored) > 0  # nothing lost beyond the last mirrored copy

        emu.run(job.ended_event.wait(), timeout=120)
        assert job.state == "JOB_STATE_SUCCEEDED" and job.tasks[0].preemptions == 1
        assert main(["job", "status", job_id, "--json", "--config", str(config)]) == 0
        status = json.loads(capsys.readouterr().out)
        assert (status["step"], status["total_steps"]) == (60, 60)
