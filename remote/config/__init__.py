"""The ``gcptui.toml`` file of docs/REFERENCE.md, validated with pydantic.

Every mistake becomes one ``ConfigError`` line naming the file, the line, the key and what to do.
The sections live beside this module (``connection``: where the fleet is; ``work``: what runs on
it), ``Config`` in ``schema``; ``loader`` finds, reads and explains. Import from here.
"""

from __future__ import annotations

from gcptui.remote.config.base import Port
from gcptui.remote.config.connection import GcpConfig, HostConfig, SshConfig
from gcptui.remote.config.groups import GroupConfig
from gcptui.remote.config.loader import (
    CONFIG_NAME,
    default_config_paths,
    find_config,
    load_config,
    parse_config,
)
from gcptui.remote.config.schema import Config
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

__all__ = [
    "CONFIG_NAME",
    "AutostopConfig",
    "Config",
    "GcpConfig",
    "GpuConfig",
    "GroupConfig",
    "HostConfig",
    "JobConfig",
    "KeepaliveConfig",
    "LogsConfig",
    "NotifyConfig",
    "Port",
    "SshConfig",
    "StorageConfig",
    "SyncConfig",
    "TpuConfig",
    "VertexConfig",
    "default_config_paths",
    "find_config",
    "load_config",
    "parse_config",
]
