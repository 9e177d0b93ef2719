"""`keeper deploy` onto an emulated VM, with no laptop keep-alive running: a training VM preempted, the
keeper (its own venv, config, key and lease, under the job supervisor there) recovers it, the job
resumes with 0 steps lost, and `keeper status` shows the timeline."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from gcptui.remote.aio import within
from gcptui.remote.emulator.emulator import wait_until_running
from gcptui.remote.keeper.deploy import DeployPlan, KeeperDeploy
from gcptui.remote.keeper.status import keeper_report
from gcptui.remote.keeper.vm_service import KeeperService
from gcptui.tui.cli.keeper import _lease_after
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
    assert any("ssh-keys metadata of the VMs it watches (spot-t)" in line for line in said), said
    # The keeper reaches the training VM with its own key, not the laptop's: that VM's own metadata has
    # it, the project's does not (it opens no other VM).
    assert "gcptui-keeper" in emu.instance("spot-t").metadata.get("ssh-keys", "")
    assert "gcptui-keeper" not in emu.fleet.project_metadata.get("ssh-keys", "")  # type: ignore[union-attr]
    assert "gcptui-keeper" not in emu.instance("keeper-vm").metadata.get("ssh-keys", "")
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
    # A Spot VM made after deploy: the keeper puts its key on it itself, with its own credentials.
    emu.add_instance("spot-late", spot=True)
    await eventually(
        lambda: "gcptui-keeper" in emu.instance("spot-late").metadata.get("ssh-keys", ""), timeout=30
    )

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
    # Without --name, `keeper logs` and `keeper stop` find the keeper by the bucket's keeper status
    # (its VM is not deploy's default name).
    rc, logs = await cli(fleet.config_path, "keeper", "logs", "-n", "50")
    assert rc == 0 and "spot-t: resumed" in logs, logs
    rc, out = await cli(fleet.config_path, "keeper", "stop")  # the keeper gives its lease back as it goes
    assert rc == 0 and "stopped on keeper-vm (its lease given back)" in out, out
    assert keeper_report(services).lease_holder is None
    assert not await service.running()
    rc, out = await cli(fleet.config_path, "keeper", "remove")
    assert rc == 0 and "removed from the ssh-keys metadata of spot-late, spot-t" in out, out
    assert not any(
        "gcptui-keeper" in emu.instance(n).metadata.get("ssh-keys", "") for n in ("spot-t", "spot-late")
    )


async def cli(config: Path, *args: str) -> tuple[int, str]:
    """`gcptui ARGS --config CONFIG` in a process of its own (the emulator serves from this loop)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gcptui.tui", *args, "--config", str(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await within(120, process.communicate())
    return int(process.returncode or 0), out.decode()


def test_stop_says_what_became_of_the_lease() -> None:
    assert _lease_after("k", None, None) == "it held no lease"
    assert _lease_after("k", "laptop:l:1:ab", "laptop:l:1:ab") == "it held no lease"
    assert _lease_after("k", "keeper:k2:ab", None) == "it held no lease"
    assert _lease_after("k", "keeper:k:ab", None) == "its lease given back"
    assert "not given back" in _lease_after("k", "keeper:k:ab", "keeper:k:ab")
