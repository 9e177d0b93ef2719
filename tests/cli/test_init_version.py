"""``gcptui --version`` and ``gcptui init``: a starter config from gcloud's project and zone, commented,
loadable as it is, and never written over an existing one (exit 2) unless ``--force``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gcptui.remote.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def gcptui(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gcptui.tui", *args],
        cwd=cwd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env={**os.environ, **env},
    )  # fmt: skip


def test_version_prints_the_installed_version(tmp_path: Path) -> None:
    from importlib.metadata import version

    result = gcptui("--version", cwd=tmp_path)
    assert (result.returncode, result.stdout.strip()) == (0, f"gcptui {version('gcptui')}")


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="needs gcloud to set its own configuration")
def test_init_writes_gcloud_s_project_and_zone_and_refuses_to_overwrite(tmp_path: Path) -> None:
    subprocess.run(["gcloud", "config", "set", "project", "my-proj-7"], check=True, capture_output=True)
    # The zone as gcloud's environment property (`gcloud config set compute/zone` asks the API first).
    result = gcptui("init", cwd=tmp_path, CLOUDSDK_COMPUTE_ZONE="europe-west4-a")
    assert result.returncode == 0, result.stderr
    path = tmp_path / "gcptui.toml"
    config = load_config(str(path))
    assert config.gcp is not None and config.gcp.project == "my-proj-7"
    assert config.gcp.zones == ["europe-west4-a"]
    assert "# command = " in path.read_text()  # commented: the user's own command goes there

    path.write_text("# mine\n")
    again = gcptui("init", cwd=tmp_path)
    assert again.returncode == 2 and path.read_text() == "# mine\n"
    assert again.stderr.count("\n") == 1 and "--force" in again.stderr
    assert gcptui("init", "--force", cwd=tmp_path).returncode == 0
    assert "my-proj-7" in path.read_text()


def test_init_without_a_gcloud_project_says_how_to_set_one(tmp_path: Path) -> None:
    assert gcptui("init", cwd=tmp_path).returncode == 0
    text = (tmp_path / "gcptui.toml").read_text()
    assert "gcloud config set project" in text
    load_config(str(tmp_path / "gcptui.toml"))  # loads as written


def test_ls_without_credentials_names_what_is_missing_and_the_demo(tmp_path: Path) -> None:
    # The hermetic HOME and gcloud config: no credentials, no project, no gcptui.toml.
    result = gcptui("ls", cwd=tmp_path)
    assert result.returncode == 2, result.stderr  # a setup problem, as a config error
    said = result.stderr.strip()
    assert said.count("\n") == 0 and "gcloud auth application-default login" in said
    assert "gcloud config set project" in said and "`gcptui demo`" in said
