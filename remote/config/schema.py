"""The whole ``gcptui.toml``: ``Config``, one table per section (the sections live beside it)."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, model_validator

from gcptui.remote.config.base import _Section
from gcptui.remote.config.connection import GcpConfig, HostConfig, SshConfig
from gcptui.remote.config.gke import GkeConfig
from gcptui.remote.config.groups import GroupConfig
from gcptui.remote.config.tpu import TpuConfig
from gcptui.remote.config.vertex import VertexConfig
from gcptui.remote.config.work import (
    AutostopConfig,
    GpuConfig,
    JobConfig,
    KeepaliveConfig,
    LogsConfig,
    NotifyConfig,
    StorageConfig,
    SyncConfig,
)


class Config(_Section):
    """The whole ``gcptui.toml``: one table per section below, every one optional."""

    gcp: GcpConfig | None = Field(
        default=None,
        description="Google Compute Engine settings; see the section's note on leaving it out.",
    )
    ssh: SshConfig = Field(default=SshConfig(), description="SSH settings for GCE instances.")
    hosts: list[HostConfig] = Field(default=[], description="Static machines reached by SSH alone.")
    sync: SyncConfig = Field(default=SyncConfig(), description="Live sync of the local tree.")
    job: JobConfig = Field(default=JobConfig(), description="The training job.")
    groups: list[GroupConfig] = Field(
        default=[], description="Multi-node jobs: one torchrun per VM, recovered as a group."
    )
    keepalive: KeepaliveConfig = Field(default=KeepaliveConfig(), description="Preemption recovery.")
    storage: StorageConfig = Field(default=StorageConfig(), description="Checkpoints in Cloud Storage.")
    logs: LogsConfig = Field(default=LogsConfig(), description="Log following.")
    vertex: VertexConfig = Field(default=VertexConfig(), description="Vertex AI custom jobs.")
    gpu: GpuConfig = Field(default=GpuConfig(), description="The idle-GPU warning.")
    tpu: TpuConfig = Field(default=TpuConfig(), description="Cloud TPU nodes in the fleet.")
    gke: list[GkeConfig] = Field(
        default=[], description="Kubernetes clusters whose training workloads are fleet rows."
    )
    notify: NotifyConfig = Field(default=NotifyConfig(), description="Telling of recoveries by webhook.")
    autostop: AutostopConfig = Field(
        default=AutostopConfig(), description="Stopping VMs that idle or whose job finished."
    )
    keys: dict[str, str] = Field(
        default={},
        description=(
            'Key bindings: action id = key, overriding the default keymap, e.g. `"fleet.refresh" = '
            '"ctrl+r"`. Keys are named as Textual names them (`ctrl+r`, `question_mark`); several keys are '
            "comma-separated. An unknown id or an empty key stops the TUI with an error."
        ),
    )

    # Set by parse_config to the file it read (None: built-in defaults); never read from the file.
    path: Path | None = Field(
        default=None,
        exclude=True,
        description="Where the file was read from (None: built-in defaults); relative paths resolve against its folder.",
    )

    @model_validator(mode="after")
    def _host_names_unique(self) -> Config:
        seen: set[str] = set()
        for host in self.hosts:
            if host.name in seen:
                raise ValueError(f"host name {host.name!r} appears twice in [[hosts]]: names must be unique")
            seen.add(host.name)
        groups: set[str] = set()
        for group in self.groups:
            if group.name in groups:
                raise ValueError(
                    f"group name {group.name!r} appears twice in [[groups]]: names must be unique"
                )
            groups.add(group.name)
        return self

    def group(self, name: str) -> GroupConfig | None:
        """The ``[[groups]]`` entry called ``name``, if any."""
        return next((g for g in self.groups if g.name == name), None)

    @property
    def base_dir(self) -> Path:
        return self.path.parent if self.path else Path.cwd()

    def sync_source(self) -> Path:
        """``[sync].source``: relative to the config file's folder when written relative, the
        current directory when not written at all (the project one runs gcptui from)."""
        if self.sync.source is None:
            return Path.cwd()
        return self.resolve_local(self.sync.source)

    def resolve_local(self, value: str) -> Path:
        """A local path from the file: ``~`` expanded, relative to the config file's folder."""
        path = Path(os.path.expanduser(value))
        return path if path.is_absolute() else (self.base_dir / path)
