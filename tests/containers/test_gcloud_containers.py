"""The real ``gcloud builds submit --async``, ``builds list`` and ``artifacts docker images list`` (and
``repositories list``) against the emulator's Cloud Build and Artifact Registry rooms, beside ``gcptui
build`` (``api_endpoint_overrides/cloudbuild``, ``/artifactregistry``, and ``/storage`` for the source
gcloud uploads to fake-gcs-server). Skipped without gcloud.

Without ``--async``, ``gcloud builds submit`` reads the build's log from
``https://storage.googleapis.com/<logsBucket>/log-ID.txt``, an address no override moves: not here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.tui.cli.main import main
from tests.containers.test_build import _config
from tests.containers.test_build import source as source  # noqa: F401 - the tree fixture
from tests.helpers.gcs import FakeGcs

pytestmark = pytest.mark.skipif(shutil.which("gcloud") is None, reason="the gcloud CLI is not installed")


def _gcloud_env(emu: EmulatorThread, root: Path, storage: str) -> dict[str, str]:
    env = {
        **os.environ, "HOME": str(root), "CLOUDSDK_CONFIG": str(root / "gcloud"),
        "CLOUDSDK_CORE_DISABLE_PROMPTS": "1", "CLOUDSDK_CORE_DISABLE_USAGE_REPORTING": "1",
        "CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK": "1",
    }  # fmt: skip
    env.pop("CLOUDSDK_CORE_PROJECT", None)
    config = root / "gcloud" / "configurations"
    config.mkdir(parents=True)
    (root / "gcloud" / "active_config").write_text("default")
    (config / "config_default").write_text(
        f"[core]\nproject = {emu.project}\n[auth]\naccess_token_file = {emu.emulator.token_file}\n"
        f"[api_endpoint_overrides]\ncloudbuild = {emu.endpoint}/\nartifactregistry = {emu.endpoint}/\n"
        f"storage = {storage}/storage/v1/\n"
    )
    return env


def test_gcloud_lists_the_build_and_the_image_gcptui_made(
    tmp_path: Path,
    source: Path,
    fake_gcs: FakeGcs,
    capsys: pytest.CaptureFixture[str],  # noqa: F811
) -> None:
    with EmulatorThread(tmp_path / "emu", ssh=False) as emu:
        emu.emulator.vertex_env["STORAGE_EMULATOR_HOST"] = fake_gcs.host
        assert main(["build", "--yes", "--config", _config(emu, tmp_path, source)]) == 0
        reference = capsys.readouterr().out.splitlines()[-1]
        path, digest = reference.split("@")
        env = _gcloud_env(emu, tmp_path, fake_gcs.host)
        tagged = f"{path}:by-gcloud"
        submit = [
            "gcloud",
            "builds",
            "submit",
            "--async",
            "--region=us-central1",
            "--tag",
            tagged,
            str(source),
        ]
        run = subprocess.run(submit, env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        assert emu.emulator.builds is not None
        [theirs] = [b for b in emu.emulator.builds.builds.values() if b.body.get("images") == [tagged]]
        emu.run(theirs.ended.wait(), timeout=60)
        assert theirs.status == "SUCCESS", theirs.detail
        commands = [
            ["builds", "list", "--region=us-central1", "--format=json"],
            [
                "artifacts",
                "docker",
                "images",
                "list",
                path.rsplit("/", 1)[0],
                "--include-tags",
                "--format=json",
            ],
            ["artifacts", "repositories", "list", "--location=us-central1", "--format=value(name)"],
        ]
        runs = [subprocess.Popen(["gcloud", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True) for args in commands]  # fmt: skip
        outputs = []
        for args, run in zip(commands, runs, strict=True):
            out, err = run.communicate(timeout=120)
            assert run.returncode == 0, f"gcloud {' '.join(args)} failed:\n{err}"
            outputs.append(out)
        builds, images, repositories = outputs

        listed = json.loads(builds)
        assert [b["status"] for b in listed] == ["SUCCESS", "SUCCESS"]
        assert {"name": f"{path}:latest", "digest": digest} in listed[1]["results"]["images"]  # newest first
        # gcloud's tarball holds what gcptui left out (.env, notes/): another context, another digest.
        [image, ours] = json.loads(images)
        assert ours["package"] == path and ours["version"] == digest and "latest" in ours["tags"]
        assert image["package"] == path and image["version"] != digest and image["tags"] == ["by-gcloud"]
        assert repositories.split() == ["gcptui"]
