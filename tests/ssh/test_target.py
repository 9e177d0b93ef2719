"""How a fleet member becomes an SSH target: addresses, gcloud's alias and user rule, overrides."""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest

from gcptui.remote.compute.backend import BackendContext
from gcptui.remote.compute.registry import Compute
from gcptui.remote.config import Config, HostConfig, SshConfig
from gcptui.remote.models import Instance
from gcptui.remote.ssh.errors import SshConfigError
from gcptui.remote.ssh.host_keys import lookup_name
from gcptui.remote.ssh.target import target_for_host, target_for_instance


def vm(**changes: object) -> Instance:
    values: dict[str, object] = {
        "name": "train-1", "zone": "us-central1-a", "status": "RUNNING",
        "external_ip": "34.1.2.3", "internal_ip": "10.0.0.5", "instance_id": "8812345",
    }  # fmt: skip
    values.update(changes)
    return Instance(**values)  # type: ignore[arg-type]


def test_gce_instance_uses_external_ip_gcloud_alias_and_local_user() -> None:
    target = target_for_instance(vm(), SshConfig())
    assert (target.address, target.port, target.user) == ("34.1.2.3", 22, getpass.getuser())
    assert target.host_key_alias == "compute.8812345" and lookup_name(target) == "compute.8812345"
    assert target.known_hosts == Path("~/.ssh/google_compute_known_hosts").expanduser()
    assert target.key == Path("~/.ssh/google_compute_engine").expanduser()
    assert target.proxy_command is None


def test_internal_ip_when_there_is_no_external_one_and_configured_user_wins() -> None:
    target = target_for_instance(vm(external_ip=None), SshConfig(user="alice", port=2222))
    assert (target.address, target.port, target.user) == ("10.0.0.5", 2222, "alice")


def test_proxy_command_gets_name_zone_and_port_filled_in() -> None:
    ssh = SshConfig(
        proxy_command="gcloud compute start-iap-tunnel {name} {port} --listen-on-stdin --zone {zone}"
    )
    target = target_for_instance(vm(external_ip=None, internal_ip=None, status="RUNNING"), ssh)
    assert (
        target.proxy_command
        == "gcloud compute start-iap-tunnel train-1 22 --listen-on-stdin --zone us-central1-a"
    )
    assert target.address == "train-1"


def test_vm_without_address_or_proxy_says_how_to_start_it() -> None:
    with pytest.raises(SshConfigError, match="no IP address.*gcptui vm start train-1"):
        target_for_instance(vm(external_ip=None, internal_ip=None, status="TERMINATED"), SshConfig())


def test_static_host_overrides_ssh_section_and_is_filed_under_its_address(tmp_path: Path) -> None:
    ssh = SshConfig(user="bob", key="keys/id", known_hosts="kh")
    host = HostConfig(name="box", address="192.168.1.7", port=2200, key="other/id")
    target = target_for_host(host, ssh, base_dir=tmp_path)
    assert (target.user, target.key, target.known_hosts) == ("bob", tmp_path / "other/id", tmp_path / "kh")
    assert target.host_key_alias is None and lookup_name(target) == "[192.168.1.7]:2200"


def test_the_hosts_backend_picks_the_hosts_entry_for_static_hosts(tmp_path: Path) -> None:
    config = Config(
        hosts=[HostConfig(name="box", address="127.0.0.5", user="root")], path=tmp_path / "gcptui.toml"
    )
    compute = Compute.from_context(BackendContext(config))
    member = compute.list_rows().rows[0]
    target = compute.of(member).ssh_target(member)
    assert (target.address, target.user, target.host_key_alias) == ("127.0.0.5", "root", None)
    assert lookup_name(target) == "127.0.0.5"
