"""``gcptui build`` and ``vertex submit --build | --image`` against the emulator's Cloud Build, Artifact
Registry and Vertex AI, the context uploaded to fake-gcs-server and fetched from there by the build."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.tui.cli.main import main
from tests.helpers.gcs import FakeGcs

DOCKERFILE = """\
# the trainer's image
FROM python:3.11-slim
WORKDIR /app
COPY . /app
ENV GREETING=hello-from-image \\
    MODE=train
RUN pip install --no-cache-dir nothing-at-all
ENTRYPOINT ["python3", "train.py"]
CMD ["--epochs", "2"]
"""
TRAIN = """\
import os, sys
print(os.environ["GREETING"], os.environ["MODE"], sys.argv[1:], flush=True)
print("cwd", os.path.basename(os.getcwd()), sorted(os.listdir(".")), flush=True)
"""
REFERENCE = re.compile(r"us-central1-docker\.pkg\.dev/gcptui-demo/gcptui/trainer@sha256:[0-9a-f]{64}")


@pytest.fixture
def source(tmp_path: Path, fake_gcs: FakeGcs) -> Path:
    fake_gcs.make_bucket("runs")
    tree = tmp_path / "trainer"
    tree.mkdir()
    (tree / "Dockerfile").write_text(DOCKERFILE)
    (tree / "train.py").write_text(TRAIN)
    (tree / ".dockerignore").write_text("notes/\n")
    (tree / "notes").mkdir()
    (tree / "notes" / "draft.txt").write_text("not in the image")
    (tree / ".env").write_text("TOKEN=secret\n")  # the secret guard keeps it out of the context
    return tree


def _config(emu: EmulatorThread, tmp_path: Path, source: Path) -> str:
    config = emu.emulator.write_config(tmp_path / "gcptui.toml", sync_source=source)
    extra = '\n[storage]\nbucket = "gs://runs"\n\n[vertex]\nregions = ["us-central1"]\n'
    config.write_text(config.read_text() + extra)
    return str(config)


def test_build_then_submit_runs_the_images_entrypoint_and_an_unchanged_tree_is_not_rebuilt(
    tmp_path: Path, source: Path, fake_gcs: FakeGcs, capsys: pytest.CaptureFixture[str]
) -> None:
    with EmulatorThread(tmp_path / "emu", ssh=False) as emu:
        emu.emulator.vertex_env["STORAGE_EMULATOR_HOST"] = fake_gcs.host
        config = _config(emu, tmp_path, source)

        # No terminal and no --yes: the missing repository is not created.
        assert main(["build", "--config", config]) != 0
        assert "pass --yes" in capsys.readouterr().err
        assert not emu.emulator.registry.repositories

        assert main(["build", "--yes", "--config", config]) == 0
        out, err = capsys.readouterr()
        reference = out.splitlines()[-1]
        assert REFERENCE.fullmatch(reference), out
        assert "Step 1/7 : FROM python:3.11-slim" in err  # the build's log, followed
        assert "not in the build context: .env" in err
        assert builds(emu) == 1

        # The image: the context's files less .dockerignore's and the secret, at WORKDIR.
        digest = reference.split("@")[1]
        rootfs = emu.emulator.registry.image_dir(digest) / "rootfs" / "app"
        assert sorted(p.name for p in rootfs.iterdir()) == [".dockerignore", "Dockerfile", "train.py"]

        # Unchanged: the same reference, no second build.
        assert main(["build", "--yes", "--config", config]) == 0
        out, err = capsys.readouterr()
        assert out.splitlines()[-1] == reference
        assert "not rebuilding" in err
        assert builds(emu) == 1

        assert main(["vertex", "submit", "--build", "--name", "img", "--config", config]) == 0
        out = capsys.readouterr().out
        assert f"image {reference}" in out
        job_id = out.splitlines()[-1].rsplit("/", 1)[1]
        assert builds(emu) == 1  # --build found the image built already
        assert main(["logs", "-f", job_id, "--config", config]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert "[workerpool0-0] hello-from-image train ['--epochs', '2']" in lines
        assert "[workerpool0-0] cwd app ['.dockerignore', 'Dockerfile', 'train.py']" in lines
        assert lines[-1] == "[service] Job completed successfully."

        # `job restart` submits the same digest again.
        assert main(["job", "restart", job_id, "--config", config]) == 0
        again = capsys.readouterr().out.splitlines()[-1].rsplit("/", 1)[1]
        assert emu.emulator.vertex is not None
        images = {
            p["containerSpec"]["imageUri"]
            for p in emu.emulator.vertex.jobs[again].body["jobSpec"]["workerPoolSpecs"]
        }
        assert images == {reference}
        assert main(["logs", "-f", again, "--config", config]) == 0
        assert (
            "[workerpool0-0] hello-from-image train ['--epochs', '2']" in capsys.readouterr().out.splitlines()
        )

        # A changed tree is built again, to a new digest.
        (source / "train.py").write_text(TRAIN + "print('v2', flush=True)\n")
        assert main(["build", "--yes", "--tag", "v2", "--config", config]) == 0
        second = capsys.readouterr().out.splitlines()[-1]
        assert REFERENCE.fullmatch(second) and second != reference
        assert builds(emu) == 2

        # --image runs a given image; [job] command, when set, replaces its entrypoint.
        assert main(["vertex", "submit", "--image", second, "--name", "img2", "--config", config]) == 0
        job_id = capsys.readouterr().out.splitlines()[-1].rsplit("/", 1)[1]
        assert main(["logs", "-f", job_id, "--config", config]) == 0
        assert "[workerpool0-0] v2" in capsys.readouterr().out.splitlines()


def builds(emu: EmulatorThread) -> int:
    assert emu.emulator.builds is not None
    return len(emu.emulator.builds.builds)


def test_a_dockerfile_docker_refuses_fails_the_build_with_its_line(
    tmp_path: Path, source: Path, fake_gcs: FakeGcs, capsys: pytest.CaptureFixture[str]
) -> None:
    (source / "Dockerfile").write_text("FROM python:3.11\nCOPY missing.txt /app/\n")
    with EmulatorThread(tmp_path / "emu", ssh=False) as emu:
        emu.emulator.vertex_env["STORAGE_EMULATOR_HOST"] = fake_gcs.host
        config = _config(emu, tmp_path, source)
        assert main(["build", "--yes", "--config", config]) != 0
        out, err = capsys.readouterr()
        assert "ended FAILURE" in err and "missing.txt: not found in the build context" in err
        assert out == ""
        assert main(["build", "--yes", "--dockerfile", "Containerfile", "--config", config]) != 0
        assert "no Containerfile in" in capsys.readouterr().err
        (source / "Dockerfile").write_text("FORM python\n")
        assert main(["build", "--yes", "--config", config]) != 0
        assert "unknown instruction: FORM" in capsys.readouterr().err
        assert json.dumps(builds(emu)) == "2"


def test_a_gke_pod_runs_the_built_image(
    tmp_path: Path, source: Path, fake_gcs: FakeGcs, capsys: pytest.CaptureFixture[str]
) -> None:
    with EmulatorThread(tmp_path / "emu", ssh=False) as emu:
        emu.emulator.vertex_env["STORAGE_EMULATOR_HOST"] = fake_gcs.host
        config = _config(emu, tmp_path, source)
        assert main(["build", "--yes", "--config", config]) == 0
        reference = capsys.readouterr().out.splitlines()[-1]
        cluster = emu.add_gke_cluster("training", "us-central1-a", nodes=1)
        container = {"name": "train", "image": reference, "args": ["--gke"]}  # args replace the image's CMD
        labels = {"app": "img"}
        manifest = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "img", "labels": labels},
                    "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "serviceName": "img",
                             "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}}}  # fmt: skip
        emu.call(cluster.store.create, "statefulsets", "default", manifest)
        deadline = time.monotonic() + 30
        log = ""
        while "hello-from-image" not in log:
            assert time.monotonic() < deadline, f"the pod did not run the image: {log!r}"
            runner = cluster.runners.get(("default", "img-0"))
            log = runner.log_file(0).read_text() if runner and runner.log_file(0).exists() else ""
            time.sleep(0.05)  # polling the emulator's thread
        assert "hello-from-image train ['--gke']" in log

        # `job restart WORKLOAD --image` rolls the StatefulSet to a new build: its pod runs that.
        config = _config(emu, tmp_path, source)  # now with the cluster's [[gke]]
        (source / "train.py").write_text(TRAIN + "print('v2', flush=True)\n")
        assert main(["build", "--yes", "--tag", "v2", "--config", config]) == 0
        second = capsys.readouterr().out.splitlines()[-1]
        assert main(["job", "restart", "img", "--image", second, "--config", config]) == 0
        assert f"with {second}" in capsys.readouterr().err
        while "v2" not in log:
            assert time.monotonic() < deadline + 30, f"the pod did not roll to the new image: {log!r}"
            runner = cluster.runners.get(("default", "img-0"))
            log = runner.log_file(0).read_text() if runner and runner.log_file(0).exists() else ""
            time.sleep(0.05)  # polling the emulator's thread
        workload = cluster.store.get("statefulsets", "default", "img")
        assert workload is not None
        assert workload["spec"]["template"]["spec"]["containers"][0]["image"] == second
        assert workload["spec"]["template"]["spec"]["containers"][0]["args"] == ["--gke"]  # the rest kept
