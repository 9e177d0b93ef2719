"""An instance made with ``deletionProtection`` cannot be deleted: GCE's 400, the VM stays, and
`gcptui vm delete` says so in one line."""

from __future__ import annotations

from pathlib import Path

from gcptui.remote.emulator.thread import EmulatorThread
from tests.cli.test_ls import gcptui
from tests.emulator.test_strict_api import ZONE, _call, _insert_body

PROTECTED = "Invalid resource usage: 'Resource cannot be deleted if it's protected against deletion.'"


def test_a_protected_instance_is_not_deleted(api_emulator: EmulatorThread, tmp_path: Path) -> None:
    body = {**_insert_body("keep"), "deletionProtection": True}
    assert _call(api_emulator, f"zones/{ZONE}/instances", method="POST", body=body)[0] == 200
    api_emulator.wait_for_status("keep", "RUNNING")
    status, answer = _call(api_emulator, f"zones/{ZONE}/instances/keep", method="DELETE")
    assert status == 400, answer
    assert answer["error"]["message"] == PROTECTED
    assert answer["error"]["errors"][0]["reason"] == "invalidResourceUsage"
    assert api_emulator.instance("keep").status == "RUNNING"

    assert _call(api_emulator, f"zones/{ZONE}/instances/keep/stop", method="POST")[0] == 200
    api_emulator.wait_for_status("keep", "TERMINATED")  # no checkpoints to read on a stopped VM
    config = str(api_emulator.write_config(tmp_path / "gcptui.toml"))
    result = gcptui("vm", "delete", "keep", "--yes", "--config", config)
    assert result.returncode == 1 and "protected against deletion" in result.stderr, result.stderr
    # The next step, whole: the command that lifts the protection.
    assert f"`gcloud compute instances update keep --zone {ZONE} --no-deletion-protection`" in result.stderr
    assert "Traceback" not in result.stderr
    assert api_emulator.instance("keep").status == "TERMINATED"
