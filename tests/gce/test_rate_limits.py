"""GCE's rate quotas answer 403 rateLimitExceeded (or 429): retried with backoff, reported as rate limits."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from gcptui.remote.cloud.errors import RateLimitError
from gcptui.remote.emulator.thread import EmulatorThread
from tests.helpers.emulator import gce_for

ROOT = Path(__file__).resolve().parents[2]


def test_a_403_rate_limit_burst_is_retried_and_the_list_succeeds(api_emulator: EmulatorThread) -> None:
    api_emulator.add_instance("vm", "us-central1-a")
    api_emulator.rate_limit("instances.aggregatedList", count=3)
    names = [i.name for i in gce_for(api_emulator).list_instances()]
    assert names == ["vm"]
    assert api_emulator.calls("instances.aggregatedList") == 4


def test_429_and_per_user_limits_on_a_start_are_retried(api_emulator: EmulatorThread) -> None:
    api_emulator.add_instance("vm", "us-central1-a", status="TERMINATED")
    api_emulator.rate_limit("instances.start", count=1, status=429)
    api_emulator.rate_limit("instances.start", count=1, per_user=True)
    gce = gce_for(api_emulator)
    gce.start("vm", "us-central1-a")
    assert gce.get("vm", "us-central1-a").status == "RUNNING"  # type: ignore[union-attr]
    assert api_emulator.calls("instances.start") == 3


def test_a_lasting_rate_limit_says_so_and_never_blames_permissions(api_emulator: EmulatorThread) -> None:
    api_emulator.rate_limit("instances.aggregatedList", count=1000)
    with pytest.raises(RateLimitError) as caught:
        gce_for(api_emulator, timeout=2.0).list_instances()
    text = str(caught.value)
    assert "rate limit" in text and "Permission" not in text and "roles/" not in text
    assert api_emulator.calls("instances.aggregatedList") >= 2  # it did retry


def test_operation_waits_keep_a_minimum_pause(tmp_path: Path) -> None:
    with EmulatorThread(tmp_path / "emu", ssh=False, boot_seconds=0.15, stop_seconds=2.0) as emu:
        emu.add_instance("vm", "us-central1-a")
        emu.wait_for_status("vm", "RUNNING")
        emu.emulator.api.max_wait_seconds = 0.0  # type: ignore[union-attr]  # GCE may answer at once
        began = time.monotonic()
        gce_for(emu).stop("vm", "us-central1-a")
        elapsed = time.monotonic() - began
        waits = emu.calls("zoneOperations.wait")
    assert elapsed >= 2.0 and 1 <= waits <= elapsed / 1.0 + 2, (waits, elapsed)


def test_ls_succeeds_through_a_burst(api_emulator: EmulatorThread, tmp_path: Path) -> None:
    api_emulator.add_instance("vm", "us-central1-a")
    config = api_emulator.write_config(tmp_path / "gcptui.toml")
    api_emulator.rate_limit("instances.aggregatedList", count=2)
    result = subprocess.run(
        [sys.executable, "-m", "gcptui.tui", "ls", "--config", str(config)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "vm" in result.stdout
