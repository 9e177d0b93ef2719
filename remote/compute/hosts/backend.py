"""The static hosts backend: each ``[[hosts]]`` entry is one row, state ``unknown`` (SSH tells).

gcptui has no lifecycle for them (no start, stop, delete, recovery or price); it runs processes on
them over SSH like on any VM.
"""

from __future__ import annotations

from typing import ClassVar

from gcptui.remote.compute.backend import Backend, BackendContext, Capability, Rows, Unsupported
from gcptui.remote.compute.exec_channel import ExecChannel
from gcptui.remote.errors import NotFoundError
from gcptui.remote.models import Instance, Source, State
from gcptui.remote.ssh.target import SshTarget, target_for_host

_CAPABILITIES = frozenset({Capability.SHELL, Capability.DISK_OUTLIVES})


def host_rows(context: BackendContext) -> tuple[Instance, ...]:
    """Static ``[[hosts]]`` as fleet rows, status UNKNOWN and state ``unknown``: gcptui neither starts
    nor stops them, and whether one answers is known only once SSH reaches it."""
    return tuple(
        Instance(
            name=h.name, zone="", status="UNKNOWN", external_ip=h.address, source="host", state=State.UNKNOWN
        )
        for h in context.config.hosts
    )


class HostsBackend(Backend):
    kind: ClassVar[Source] = "host"
    listed_by_fleet: ClassVar[bool] = True

    def __init__(self, context: BackendContext) -> None:
        self.context = context

    @classmethod
    def configured(cls, context: BackendContext) -> HostsBackend | None:
        return cls(context) if context.config.hosts else None

    def list_rows(self) -> Rows:
        return Rows(host_rows(self.context))

    def capabilities(self, row: Instance) -> frozenset[Capability]:
        return _CAPABILITIES

    def ssh_target(self, row: Instance, user: str | None = None) -> SshTarget:
        config = self.context.config
        for host in config.hosts:
            if host.name == row.name:
                return target_for_host(host, config.ssh, base_dir=config.base_dir)
        raise NotFoundError(f"no [[hosts]] entry named {row.name!r}: check the config")

    def exec_channel(self, row: Instance, worker: str | None = None) -> ExecChannel:
        if self.context.connect is None:
            raise Unsupported(row, "run a command in this process (no SSH pool)")
        return self.context.connect(row)
