"""The real ``gcloud builds list`` and ``gcloud artifacts docker images list`` (and ``repositories
list``) against the emulator's Cloud Build and Artifact Registry rooms, after ``gcptui build``
(``api_endpoint_overrides/cloudbuild`` and ``/artifactregistry``). Skipped without gcloud."""

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


def _gcloud_env(emu: EmulatorThread, root: Path) -> dict[str, str]:
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
    )
    return env


def test_gcloud_lists_the_build_and_the_image_gcptui_made(
    tmp_path: Path, source: Path, fake_gcs: FakeGcs, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    with EmulatorThread(tmp_path / "emu", ssh=False) as emu:
        emu.emulator.vertex_env["STORAGE_EMULATOR_HOST"] = fake_gcs.host
        assert main(["build", "--yes", "--config", _config(emu, tmp_path, source)]) == 0
        reference = capsys.readouterr().out.splitlines()[-1]
        path, digest = reference.split("@")
        env = _gcloud_env(emu, tmp_path)
        commands = [
            ["builds", "list", "--region=us-central1", "--format=json"],
            ["artifacts", "docker", "images", "list", path.rsplit("/", 1)[0], "--include-tags", "--format=json"],
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

        [build] = json.loads(builds)
        assert build["status"] == "SUCCESS"
        assert {"name": f"{path}:latest", "digest": digest} in build["results"]["images"]
        [image] = json.loads(images)
        assert image["package"] == path and image["version"] == digest
        assert "latest" in image["tags"]
        assert repositories.split() == ["gcptui"]
