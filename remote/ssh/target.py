"""Where and how to reach one machine over SSH, resolved once from the config and the fleet.

A ``SshTarget`` is a plain frozen value: the pool keys its connections by ``name`` and reconnects
when the target of a name changes (a restarted VM gets a new external IP).
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from pathlib import Path

from gcptui.remote.config import HostConfig, SshConfig
from gcptui.remote.models import SSH_PORT_LABEL, Instance
from gcptui.remote.ssh.errors import SshConfigError


@dataclass(frozen=True, slots=True)
class SshTarget:
    """One SSH endpoint.

    ``host_key_alias`` is the name the host key is filed under in ``known_hosts`` (gcloud files GCE
    VMs as ``compute.<instance id>``); None files it under the address (``[addr]:port`` off port 22).
    ``key`` None lets asyncssh fall back to the SSH agent and ``~/.ssh/id_*``.
    """

    name: str
    address: str
    port: int
    user: str
    key: Path | None
    known_hosts: Path
    host_key_alias: str | None = None
    proxy_command: str | None = None
    zone: str | None = None  # a GCE VM's zone: where to read its host keys from guest attributes

    @property
    def where(self) -> str:
        """``user@address:port`` for messages."""
        return f"{self.user}@{self.address}:{self.port}"


def default_user() -> str:
    """gcloud's rule for the SSH user: the local user name (OS Login users set ``[ssh].user``)."""
    return getpass.getuser()


def _path(value: str, base_dir: Path | None) -> Path:
    path = Path(os.path.expanduser(value))
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return path


def _fill_proxy(template: str, name: str, zone: str, port: int) -> str | None:
    # Plain replacement, not str.format: a proxy command may hold other braces of its own.
    if not template.strip():
        return None
    return template.replace("{name}", name).replace("{zone}", zone).replace("{port}", str(port))


def _label_port(instance: Instance) -> int | None:
    """The instance's own SSH port from its ``gcptui-ssh-port`` label, if it has a valid one."""
    value = instance.labels.get(SSH_PORT_LABEL, "")
    return int(value) if value.isdigit() and 0 < int(value) < 65536 else None


def target_for_instance(
    instance: Instance, ssh: SshConfig, *, base_dir: Path | None = None, user: str | None = None
) -> SshTarget:
    """The target of a GCE instance: external IP, else internal IP; host key under ``compute.<id>``;
    ``user`` (OS Login's) over ``[ssh].user``.

    Raises ``SshConfigError`` when the VM has no address and no proxy command could reach it.
    """
    port = _label_port(instance) or ssh.port
    proxy = _fill_proxy(ssh.proxy_command, instance.name, instance.zone, port)
    address = instance.external_ip or instance.internal_ip
    if address is None:
        if proxy is None:
            raise SshConfigError(
                instance.name,
                f"{instance.name} has no IP address (status {instance.status}): start it with "
                f"`gcptui vm start {instance.name}`, or set [ssh].proxy_command to reach it through IAP",
            )
        address = instance.name  # the proxy command does the routing; the address is only a label
    # gcloud files a VM's host key under compute.<id>: the address changes across restarts, the id does
    # not. A backend that names its own alias (a TPU worker: tpu.<id>-<worker>-<key suffix>) sets it.
    alias = instance.host_key_alias or (f"compute.{instance.instance_id}" if instance.instance_id else None)
    return SshTarget(
        name=instance.name,
        address=address,
        port=port,
        user=user or ssh.user or default_user(),
        key=_path(ssh.key, base_dir) if ssh.key else None,
        known_hosts=_path(ssh.known_hosts, base_dir),
        host_key_alias=alias,
        proxy_command=proxy,
        # Only a GCE VM's keys are read from Compute's guest attributes; a backend that names the alias
        # pins its keys itself (a TPU node's, from the TPU API's).
        zone=instance.zone if alias and not instance.host_key_alias else None,
    )


def target_for_host(host: HostConfig, ssh: SshConfig, *, base_dir: Path | None = None) -> SshTarget:
    """The target of a ``[[hosts]]`` entry: its own user/key/known_hosts override ``[ssh]``."""
    key = host.key or ssh.key
    return SshTarget(
        name=host.name,
        address=host.address,
        port=host.port,
        user=host.user or ssh.user or default_user(),
        key=_path(key, base_dir) if key else None,
        known_hosts=_path(host.known_hosts or ssh.known_hosts, base_dir),
        host_key_alias=None,
        # [ssh].proxy_command is the GCE route (IAP needs a zone); a static host that needs a jump
        # host says so in ~/.ssh/config, which asyncssh reads.
        proxy_command=None,
    )
