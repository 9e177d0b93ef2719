"""`keeper deploy` where the project uses OS Login: metadata keys open no VM there, so the keeper's key
goes into its VM's service account's login profile (imported by the keeper, as that account) and the
keeper reaches the training VM as that profile's POSIX user: it recovers a preempted VM alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcptui.remote.emulator.emulator import wait_until_running
from gcptui.remote.keeper.deploy import DeployPlan, KeeperDeploy
from gcptui.remote.keeper.status import keeper_report
from gcptui.remote.keeper.vm_service import KeeperService
from tests.helpers.emulator import eventually
from tests.helpers.gcs import FakeGcs
from tests.keeper.test_one_actor import COMMAND, RESUME

SA = "keeper-runner@demo-project.iam.gserviceaccount.com"


async def test_a_keeper_under_os_login_logs_in_as_its_service_account(
    fleet_factory, fake_gcs: FakeGcs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GCPTUI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CLOUDSDK_CORE_ACCOUNT", "ada@example.com")  # the laptop's own OS Login user
    fake_gcs.make_bucket("runs")
    fleet = await fleet_factory(
        ["spot-o"], command=COMMAND, resume=RESUME, metadata={"enable-oslogin": "TRUE"},
        extra_config='\n[storage]\nbucket = "gs://runs/o"\n\n[keepalive]\npoll_seconds = 0.3\n',
    )  # fmt: skip
    emu, services = fleet.emu, fleet.services
    emu.fleet.project_metadata["enable-oslogin"] = "TRUE"  # type: ignore[union-attr]
    emu.timing.preempt_grace_seconds = 0.2
    keeper_vm = emu.add_instance("keeper-vm", spot=False)
    keeper_vm.extra["serviceAccounts"] = [
        {"email": SA, "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}
    ]
    await wait_until_running(emu, ["keeper-vm"])
    await fleet.start_job("spot-o")

    said: list[str] = []
    deployed = await KeeperDeploy(
        services, DeployPlan("keeper-vm", "", "e2-small", existing=True), said.append
    ).run()
    profile = emu.oslogin.profiles[SA]
    assert any(f"logs in as {profile.username}" in line for line in said), said
    public = (keeper_vm.disk / "home" / ".gcptui-keeper" / "id_ed25519.pub").read_text().split()[1]  # type: ignore[operator]
    assert any(key.split()[1] == public for key in profile.keys.values())  # its own key, in its own profile
    assert "gcptui-keeper" not in emu.fleet.project_metadata.get("ssh-keys", "")  # type: ignore[union-attr]

    await eventually(lambda: "spot-o" in keeper_report(services).to_json()["watched"], timeout=60)
    await eventually(lambda: fleet.steps("spot-o") > 20, timeout=30)
    emu.preempt("spot-o")

    def resumed() -> bool:
        timeline = keeper_report(services).to_json()["timeline"]
        return any(e["machine"] == "spot-o" and e["kind"] == "resumed" for e in timeline)

    await eventually(resumed, timeout=60)
    assert len((emu.instance("spot-o").disk / "home" / "job-starts").read_text().split()) == 2  # type: ignore[operator]
    logs = [line async for line in KeeperService(services, deployed).logs(50, follow=False)]
    assert any(f"OS Login user {profile.username}" in line for line in logs), logs
    await KeeperService(services, deployed).stop()
