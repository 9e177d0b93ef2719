"""A zone that answers UNREACHABLE in an aggregated list is named on stderr; what was listed still prints."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.errors import CloudError
from tests.helpers.emulator import gce_for

ROOT = Path(__file__).resolve().parents[2]


def test_ls_names_the_unreachable_zone_and_exits_0(api_emulator: EmulatorThread, tmp_path: Path) -> None:
    api_emulator.add_instance("seen", "us-central1-a")
    api_emulator.add_instance("hidden", "us-east1-b")
    api_emulator.make_unreachable("us-east1-b")
    config = api_emulator.write_config(tmp_path / "gcptui.toml")
    result = subprocess.run(
        [sys.executable, "-m", "gcptui.tui", "ls", "--json", "--config", str(config)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert [i["name"] for i in json.loads(result.stdout)] == ["seen"]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "us-east1-b" in lines[0] and "unreachable" in lines[0], result.stderr


def test_ls_with_listed_zones_names_a_zone_whose_list_fails(
    api_emulator: EmulatorThread, tmp_path: Path
) -> None:
    """With [gcp] zones, each zone is listed on its own: one that keeps failing (503) is named, not fatal."""
    api_emulator.add_instance("seen", "us-central1-a")
    api_emulator.add_instance("hidden", "us-east1-b")
    api_emulator.make_unreachable("us-east1-b")
    config = api_emulator.write_config(tmp_path / "gcptui.toml")
    text = config.read_text().replace("[gcp]\n", '[gcp]\nzones = ["us-central1-a", "us-east1-b"]\n', 1)
    config.write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "gcptui.tui", "ls", "--json", "--config", str(config)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert [i["name"] for i in json.loads(result.stdout)] == ["seen"]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "us-east1-b" in lines[0] and "unreachable" in lines[0], result.stderr

    # Every zone failing is no partial list: an error (the client, in-process: no second CLI start).
    api_emulator.make_unreachable("us-central1-a")
    gce = gce_for(api_emulator, ["us-central1-a", "us-east1-b"], timeout=2.0)
    with pytest.raises(CloudError):
        gce.list_raw()
