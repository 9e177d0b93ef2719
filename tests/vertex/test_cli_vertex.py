"""``gcptui vertex submit``, ``logs``, ``job kill|restart|status`` against the emulator's Vertex AI and
Cloud Logging, the tree packaged into fake-gcs-server and fetched from there by the job's workers."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from gcptui.remote.config import load_config
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.vertex_workflows import package
from gcptui.tui.cli.main import main
from tests.helpers.gcs import FakeGcs

TRAIN = """\
import os, pathlib, sys, time
print("hello from rank", os.environ["RANK"], "resume" if "--resume" in sys.argv else "fresh", flush=True)
print("checkpoints at", os.environ["GCPTUI_CHECKPOINT_URL"], flush=True)
if os.environ["RANK"] == "0":
    with open(os.environ["GCPTUI_METRICS"], "a") as metrics:
        metrics.write('{"step": 7, "total_steps": 10, "loss": 0.5, "samples_per_s": 3.0}\\n')
gate = pathlib.Path(os.environ["GATE"])
while os.environ["GATE"] != "none" and not gate.exists():
    time.sleep(0.05)
"""


@pytest.fixture
def project(tmp_path: Path, fake_gcs: FakeGcs) -> tuple[EmulatorThread, Path]:
    fake_gcs.make_bucket("runs")
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(TRAIN)
    (source / ".gitignore").write_text("data/\n")
    (source / "data").mkdir()
    (source / "data" / "big.bin").write_bytes(b"x" * 10)
    return source


def _config(emu: EmulatorThread, tmp_path: Path, source: Path, gate: str) -> Path:
    config = emu.emulator.write_config(tmp_path / "gcptui.toml", sync_source=source)
    q = json.dumps
    extra = (
        '\n[storage]\nbucket = "gs://runs"\n\n[vertex]\nregions = ["us-central1"]\n'
        'image = "us-docker.pkg.dev/vertex-ai/training/pytorch-xla.2-4.py310:latest"\n\n'
        f'[job]\ncommand = "python3 train.py"\nresume = "python3 train.py --resume"\nenv = {{GATE = {q(gate)}}}\n'
    )
    text = config.read_text().replace("# [job]\n", "").replace('# command = "python train.py"\n', "")
    config.write_text(text.replace('# resume = "python train.py --resume"\n', "") + extra)
    return config


def test_submit_runs_two_workers_whose_logs_follow_to_the_end_and_restart_resumes(
    tmp_path: Path, project: Path, fake_gcs: FakeGcs, capsys: pytest.CaptureFixture[str]
) -> None:
    with EmulatorThread(tmp_path / "emu", ssh=False) as emu:
        assert emu.emulator.vertex is not None
        emu.emulator.vertex.env["STORAGE_EMULATOR_HOST"] = fake_gcs.host
        config = str(_config(emu, tmp_path, project, "none"))
        assert (
            main(["vertex", "submit", "--name", "run-a", "--replicas", "2", "--spot", "--config", config])
            == 0
        )
        name = capsys.readouterr().out.splitlines()[-1]
        assert name.startswith(f"projects/{emu.emulator.project_number}/locations/us-central1/customJobs/")
        job_id = name.rsplit("/", 1)[1]

        assert main(["logs", "-f", job_id, "--config", config]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert "[workerpool0-0] hello from rank 0 fresh" in lines
        assert "[workerpool1-0] hello from rank 1 fresh" in lines
        assert "[workerpool0-0] checkpoints at gs://runs/vertex/run-a/checkpoints" in lines
        assert lines[-1] == "[service] Job completed successfully."  # followed to the job's end
        assert len(lines) == len(set(lines))  # no line twice across the polls

        assert main(["ls", "--json", "--config", config]) == 0
        (listed,) = [row for row in json.loads(capsys.readouterr().out) if row["source"] == "vertex"]
        assert listed["name"] == job_id and listed["zone"] == "us-central1" and listed["spot"]
        assert main(["ls", "--config", config]) == 0
        assert "\nrun-a\t" in capsys.readouterr().out  # the table names it by its display name

        assert main(["job", "status", job_id, "--json", "--config", config]) == 0
        status = json.loads(capsys.readouterr().out)
        assert (status["source"], status["state"], status["status"]) == (
            "vertex",
            "succeeded",
            "JOB_STATE_SUCCEEDED",
        )
        assert [w["name"] for w in status["workers"]] == ["workerpool0-0", "workerpool1-0"] and status["spot"]
        assert (status["step"], status["total_steps"], status["loss"]) == (7, 10, 0.5)  # from the log
        # The package followed sync's rules: data/ is ignored by .gitignore.
        blobs = sorted(b.name for b in fake_gcs.client().list_blobs("runs"))
        assert len(blobs) == 3 and blobs[2].startswith("vertex/run-a/code-")  # the package alone
        # Each task's first start left its marker (a restart by Vertex runs [job] resume).
        assert blobs[:2] == [f"vertex/run-a/.started/{job_id}-0", f"vertex/run-a/.started/{job_id}-1"]

        assert main(["job", "restart", job_id, "--config", config]) == 0
        again = capsys.readouterr().out.splitlines()[-1].rsplit("/", 1)[1]
        assert main(["logs", "-f", again, "--config", config]) == 0
        assert "[workerpool0-0] hello from rank 0 resume" in capsys.readouterr().out.splitlines()


def test_job_kill_cancels_restart_resumes_and_a_mixed_name_list_is_refused(
    tmp_path: Path, project: Path, fake_gcs: FakeGcs, capsys: pytest.CaptureFixture[str]
) -> None:
    with EmulatorThread(tmp_path / "emu", ssh=False) as emu:
        assert emu.emulator.vertex is not None
        emu.emulator.vertex.env["STORAGE_EMULATOR_HOST"] = fake_gcs.host
        emu.emulator.vertex_timing.kill_grace_seconds = 0.5
        config = str(_config(emu, tmp_path, project, str(tmp_path / "never")))
        assert main(["vertex", "submit", "--name", "run-b", "--config", config]) == 0
        job_id = capsys.readouterr().out.splitlines()[-1].rsplit("/", 1)[1]
        assert main(["job", "kill", job_id, "--config", config]) == 0
        assert main(["logs", "-f", job_id, "--config", config]) == 0  # ends once the job is CANCELLED
        assert capsys.readouterr().out.splitlines()[-1] == "[service] Job was cancelled."
        assert main(["job", "status", job_id, "--config", config]) == 0
        header, line = capsys.readouterr().out.splitlines()
        status = line.split("\t")
        # A loaded machine may let the trainer take a few steps before the cancel lands.
        assert header.split("\t") == ["Id", "Name", "Status", "State", "Step"]
        assert status[:4] == [job_id, "run-b", "CANCELLED", "stopped"], status
        assert status[4] == "-" or re.fullmatch(r"\d+/10", status[4]), status
        # Restarting the cancelled job resubmits it with [job] resume into the same output folder.
        (tmp_path / "never").touch()
        assert main(["job", "restart", job_id, "--config", config]) == 0
        again = capsys.readouterr().out.splitlines()[-1].rsplit("/", 1)[1]
        assert main(["logs", "-f", again, "--config", config]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert "[workerpool0-0] hello from rank 0 resume" in lines
        assert "[workerpool0-0] checkpoints at gs://runs/vertex/run-b/checkpoints" in lines
        assert main(["job", "restart", again, "--config", config]) == 0  # ended: may be restarted again
        capsys.readouterr()
        assert main(["job", "kill", job_id, "vm-a", "--config", config]) == 2
        assert main(["job", "kill", "123456789", "--config", config]) == 1


def test_package_leaves_a_private_key_out_and_names_it(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "id_rsa").write_text(
        "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----\n"
    )
    (source / "train.py").write_text("print(1)\n")
    config = tmp_path / "gcptui.toml"
    config.write_text(f"[sync]\nsource = {json.dumps(str(source))}\n")
    said: list[str] = []
    with tarfile.open(fileobj=io.BytesIO(package(load_config(str(config)), said.append))) as archive:
        assert archive.getnames() == ["train.py"]
    assert len(said) == 1 and "id_rsa" in said[0] and "[sync].allow_secrets" in said[0]


def test_submit_without_the_storage_library_names_what_needs_it(tmp_path: Path) -> None:
    """An install without google-cloud-storage: the line names the submit's upload, not a pull."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print(1)\n")
    config = tmp_path / "gcptui.toml"
    config.write_text(
        '[gcp]\nproject = "my-project"\n[sync]\nsource = "src"\n[storage]\nbucket = "gs://runs"\n'
        '[vertex]\nregions = ["us-central1"]\nimage = "us-docker.pkg.dev/vertex-ai/training/pytorch:latest"\n'
        '[job]\ncommand = "python3 train.py"\n'
    )
    without = (
        "import sys; sys.modules['google.cloud.storage'] = None\n"  # an import of it raises ImportError
        "from gcptui.tui.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", without, "vertex", "submit", "--name", "run-a", "--config", str(config)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        "gcptui: `vertex submit` (uploading the packaged tree) needs google-cloud-storage: "
        "pip install google-cloud-storage\n"
    )
