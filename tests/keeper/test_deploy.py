"""`keeper deploy` onto an emulated VM, with no laptop keep-alive running: a training VM preempted, the
keeper (its own venv, config, key and lease, under the job supervisor there) recovers it, the job
resumes with 0 steps lost, and `keeper status` shows the timeline."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcptui.remote.emulator.emulator import wait_until_running
from gcptui.remote.keeper.deploy import DeployPlan, KeeperDeploy
from gcptui.remote.keeper.status import keeper_report
from gcptui.remote.keeper.vm_service import KeeperService
from tests.helpers.emulator import eventually
from tests.helpers.gcs import FakeGcs
from tests.keepalive.conftest import TRAIN

STARTS = "$HOME/job-starts"


async def test_a_deployed_keeper_recovers_a_preempted_vm_alone(
    fleet_factory,
    fake_gcs: FakeGcs,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,  # noqa: F811
) -> None:
    monkeypatch.setenv("GCPTUI_STATE_DIR", str(tmp_path / "state"))
    fake_gcs.make_bucket("runs")
    train = TRAIN.format(steps=100000, delay=0.02)
    fleet = await fleet_factory(
        ["spot-t"], command=f"echo start >> {STARTS}; {train}", resume=f"echo start >> {STARTS}; {train} --resume",
        extra_config=f'env = {{ STORAGE_EMULATOR_HOST = "{fake_gcs.host}" }}\n\n[storage]\nbucket = "gs://runs/t"\n'
                     "\n[keepalive]\npoll_seconds = 0.5\n",
    )  # fmt: skip
    emu, services = fleet.emu, fleet.services
    emu.timing.preempt_grace_seconds = 0.5
    emu.add_instance("keeper-vm", spot=False)
    await wait_until_running(emu, ["keeper-vm"])
    await fleet.start_job("spot-t")

    said: list[str] = []
    keeper_vm = await KeeperDeploy(
        services, DeployPlan("keeper-vm", "", "e2-small", existing=True), said.append
    ).run()
    assert any("ssh-keys" in line for line in said), said
    # The keeper reached the training VM with its own key, not the laptop's: the project's metadata has it.
    assert "gcptui-keeper" in emu.fleet.project_metadata.get("ssh-keys", "")  # type: ignore[union-attr]
    config = (emu.instance("keeper-vm").disk / "home" / ".gcptui-keeper" / "gcptui.toml").read_text()  # type: ignore[operator]
    # Installed as on a bare Debian VM: its own venv, no system site-packages, nothing but the wheels.
    venv = emu.instance("keeper-vm").disk / "home" / ".gcptui-keeper" / "venv"  # type: ignore[operator]
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
    assert any("wheels for Python 3." in line for line in said), said
    service = KeeperService(services, keeper_vm)
    rc, out = await service.sh("python3 -c 'import asyncssh'")
    assert rc != 0 and "No module named 'asyncssh'" in out, out  # the VM's python3 is bare
    assert str(emu.client_key) not in config and ".gcptui-keeper/id_ed25519" in config

    report = await eventually(lambda: (r := keeper_report(services)).up and r.lease_holder and r, timeout=60)
    assert report.lease_holder.startswith("keeper:"), report
    await eventually(lambda: "spot-t" in keeper_report(services).to_json()["watched"], timeout=20)

    await eventually(lambda: fleet.steps("spot-t") > 20, timeout=30)
    emu.preempt("spot-t")

    def resumed() -> dict[str, object] | None:
        timeline = keeper_report(services).to_json()["timeline"]
        return next((e for e in timeline if e["machine"] == "spot-t" and e["kind"] == "resumed"), None)

    event = await eventually(resumed, timeout=60)
    assert "0 steps lost" in str(event["detail"]), keeper_report(services).lines()
    starts = emu.instance("spot-t").disk / "home" / "job-starts"  # type: ignore[operator]
    assert len(starts.read_text().split()) == 2
    assert any("resumed" in line for line in keeper_report(services).lines())

    assert await service.running()
    logs = [line async for line in service.logs(50, follow=False)]
    assert any("spot-t: resumed" in line for line in logs), logs
    await service.stop()  # the keeper gives its lease back as it goes
    await eventually(lambda: keeper_report(services).lease_holder is None, timeout=20)
