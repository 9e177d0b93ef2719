"""`keeper deploy` where OS Login is on: metadata keys open no VM there, so the keeper's key goes into
its VM's service account's login profile (imported by the keeper, as that account) and the keeper
reaches the training VM as that profile's POSIX user: it recovers a preempted VM alone. OS Login is
turned on by the VMs' own ``enable-oslogin`` here (the project's is off: the instance's wins), and
`keeper remove` deletes the keeper's key from that profile (as that account, on the VM), no other."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import aiohttp
import pytest

from gcptui.remote.emulator.emulator import wait_until_running
from gcptui.remote.emulator.oslogin.api import fingerprint
from gcptui.remote.keeper.deploy import DeployPlan, KeeperDeploy
from gcptui.remote.keeper.oslogin import oslogin_on
from gcptui.remote.keeper.status import keeper_report
from gcptui.remote.keeper.vm_service import KeeperService
from gcptui.tui.cli.keeper import _stop
from tests.helpers.emulator import eventually
from tests.helpers.gcs import FakeGcs
from tests.keeper.test_one_actor import COMMAND, RESUME

SA = "keeper-runner@demo-project.iam.gserviceaccount.com"
OTHER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILuUDUjeEmUqwpXw+/4yX3OEhfEF8tfEqTTYjsDm7L4R someone-else"


async def _delete(endpoint: str, token: str, account: str, fp: str) -> int:
    """``users.sshPublicKeys.delete`` as the holder of ``token``: the HTTP status."""
    url = f"{endpoint}/v1/users/{account}/sshPublicKeys/{fp}"
    async with aiohttp.ClientSession() as session:
        async with session.delete(url, headers={"Authorization": f"Bearer {token}"}) as response:
            return response.status


async def test_a_keeper_under_os_login_logs_in_as_its_service_account(
    fleet_factory, fake_gcs: FakeGcs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("GCPTUI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CLOUDSDK_CORE_ACCOUNT", "ada@example.com")  # the laptop's own OS Login user
    fake_gcs.make_bucket("runs")
    fleet = await fleet_factory(
        ["spot-o"], command=COMMAND, resume=RESUME, metadata={"enable-oslogin": "TRUE"},
        extra_config='\n[storage]\nbucket = "gs://runs/o"\n\n[keepalive]\npoll_seconds = 0.3\n',
    )  # fmt: skip
    emu, services = fleet.emu, fleet.services
    emu.timing.preempt_grace_seconds = 0.2
    keeper_vm = emu.add_instance("keeper-vm", spot=False, metadata={"enable-oslogin": "TRUE"})
    keeper_vm.extra["serviceAccounts"] = [
        {"email": SA, "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}
    ]
    # A Spot VM without its own enable-oslogin: the project's (off) applies, so metadata keys open it.
    emu.add_instance("spot-m", spot=True)
    await wait_until_running(emu, ["keeper-vm", "spot-m"])
    await fleet.start_job("spot-o")

    said: list[str] = []
    deployed = await KeeperDeploy(
        services, DeployPlan("keeper-vm", "", "e2-small", existing=True), said.append
    ).run()
    profile = emu.oslogin.profiles[SA]
    assert any(f"logs in as {profile.username}" in line for line in said), said
    public = (keeper_vm.disk / "home" / ".gcptui-keeper" / "id_ed25519.pub").read_text().split()[1]  # type: ignore[operator]
    assert any(key.split()[1] == public for key in profile.keys.values())  # its own key, in its own profile
    # The fleet mixes the two: the key is in spot-m's own ssh-keys too (never the project's), for
    # [ssh].user (whom the keeper logs in as where OS Login is off), not for the laptop's OS Login user.
    spot_m = emu.instance("spot-m")
    [spot_m_row] = await services.resolve(["spot-m"])
    user = services.target(spot_m_row).user
    assert spot_m.metadata.get("enable-oslogin") is None and user != profile.username
    keys = spot_m.metadata.get("ssh-keys", "").splitlines()
    assert [line.split()[1] for line in keys if line.startswith(f"{user}:")] == [public], keys
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

    # The other direction: the project's on, the keeper VM's own FALSE: OS Login does not apply.
    emu.fleet.project_metadata["enable-oslogin"] = "TRUE"  # type: ignore[union-attr]
    assert deployed.oslogin is True and not oslogin_on(services, dataclasses.replace(deployed, oslogin=False))
    del emu.fleet.project_metadata["enable-oslogin"]  # type: ignore[union-attr]

    # As Google: only the principal reaches its own profile; an unknown fingerprint is a 404.
    other = fingerprint(OTHER_KEY)
    profile.keys[other] = OTHER_KEY  # another key of the same account: remove must leave it
    ada_token = emu.oslogin.principal_token("ada@example.com")
    assert await _delete(emu.endpoint, ada_token, SA, other) == 403
    sa_token = emu.oslogin.principal_token(SA)
    assert await _delete(emu.endpoint, sa_token, SA, "0" * 64) == 404
    ada_keys = dict(emu.oslogin.profiles["ada@example.com"].keys)

    # `keeper remove`: the keeper deletes its own key, as its account (its own token, from now on).
    (keeper_vm.disk / "home" / ".gcptui-keeper" / "token").write_text(sa_token + "\n")  # type: ignore[operator]
    capsys.readouterr()
    assert await _stop(services, "keeper-vm", remove=True) == 0
    out = capsys.readouterr().out
    assert f"its SSH key deleted from {SA}'s OS Login profile" in out, out
    assert list(profile.keys) == [other]  # its own key gone, the other one kept
    assert emu.oslogin.profiles["ada@example.com"].keys == ada_keys
    assert emu.oslogin.calls["deleteSshPublicKey"] == 3
    assert not (keeper_vm.disk / "home" / ".gcptui-keeper").exists()  # type: ignore[operator]
    assert "gcptui-keeper" not in spot_m.metadata.get("ssh-keys", "")

    # Again, with nothing left on the VM to run the deletion: it says what may be left, and how.
    assert await _stop(services, "keeper-vm", remove=True) == 0
    out = capsys.readouterr().out
    assert f"gcloud compute os-login ssh-keys remove --account={SA} --key=FINGERPRINT" in out, out
    assert list(profile.keys) == [other]
