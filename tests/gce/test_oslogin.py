"""OS Login: a VM of a project with ``enable-oslogin`` is reached as the login profile's POSIX user,
after gcptui imported its key into the profile, as ``gcloud compute ssh`` does; metadata keys no
longer open it."""

from __future__ import annotations

import asyncio
import getpass
from pathlib import Path

import asyncssh
import pytest

from gcptui.remote.config import load_config
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.errors import GcptuiError
from gcptui.remote.services import Services
from tests.helpers.emulator import FAST

ACCOUNT = "ada.lovelace@example.com"


async def _whoami(services: Services, name: str) -> str:
    [instance] = await services.resolve([name])
    conn = await services.pool.connection(services.target(instance))
    return (await conn.run("echo $USER", check=True)).stdout.strip()


def test_oslogin_vm_is_reached_as_the_profiles_user_after_the_key_is_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLOUDSDK_CORE_ACCOUNT", ACCOUNT)
    with EmulatorThread(tmp_path / "emu", project_metadata={"enable-oslogin": "TRUE"}, **FAST) as emu:
        emu.add_instance("vm-o", "us-central1-a")
        emu.add_instance("vm-plain", "us-central1-a", metadata={"enable-oslogin": "false"})
        emu.wait_for_status("vm-o", "RUNNING")
        emu.wait_for_status("vm-plain", "RUNNING")
        config = load_config(emu.write_config(tmp_path / "gcptui.toml"))
        assert config.ssh.user == getpass.getuser()  # what metadata-key VMs get

        async def main() -> tuple[str, str]:
            services = Services(config)
            try:
                return await _whoami(services, "vm-o"), await _whoami(services, "vm-plain")
            finally:
                await services.close()

        oslogin_user, plain_user = asyncio.run(main())
        assert oslogin_user == "ada_lovelace_example_com"
        assert plain_user == getpass.getuser(), "the instance's own enable-oslogin=false wins"
        profiles = emu.emulator.oslogin
        assert profiles.calls.get("importSshPublicKey") == 1, "the key went into the profile once"

        # The same VM refuses the metadata-key user: OS Login decides who gets in.
        async def as_local_user() -> None:
            [instance] = await Services(config).resolve(["vm-o"])
            await asyncssh.connect(
                instance.external_ip or instance.internal_ip or "", port=emu.ssh_port_of("vm-o"),
                username=getpass.getuser(), client_keys=[str(emu.emulator.client_key)], known_hosts=None,
            )  # fmt: skip

        with pytest.raises(asyncssh.PermissionDenied):
            asyncio.run(as_local_user())


def test_without_an_account_an_oslogin_vm_gets_one_line_saying_what_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CLOUDSDK_CORE_ACCOUNT", raising=False)
    with EmulatorThread(tmp_path / "emu", project_metadata={"enable-oslogin": "TRUE"}, **FAST) as emu:
        emu.add_instance("vm-o", "us-central1-a")
        emu.wait_for_status("vm-o", "RUNNING")
        config = load_config(emu.write_config(tmp_path / "gcptui.toml"))

        async def main() -> str:
            services = Services(config)
            try:
                snapshot = await asyncio.to_thread(services.fleet.snapshot)
                [instance] = [i for i in snapshot.instances if i.name == "vm-o"]
                with pytest.raises(GcptuiError) as caught:
                    services.target(instance)
                assert any("OS Login" in note for note in snapshot.errors)
                return str(caught.value)
            finally:
                await services.close()

        message = asyncio.run(main())
        assert "gcloud config set account" in message and "\n" not in message
