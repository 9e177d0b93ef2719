"""The records of the emulated Cloud TPU API: nodes, their worker hosts, operations, queued resources."""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gcptui.remote.emulator.core.names import Accelerator
from gcptui.remote.emulator.tpu.types import TpuType


def timestamp(at: float | None = None) -> str:
    """RFC 3339 with nanoseconds, as the TPU API writes ``createTime`` (proto3 JSON)."""
    at = time.time() if at is None else at
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at))
    return f"{whole}.{int((at % 1) * 1e9):09d}Z"


def new_id() -> int:
    return secrets.randbits(62) | (1 << 61)


@dataclass(eq=False)
class TpuWorker:
    """One worker host of a node: an emulated machine with its own SSH and metadata servers.

    Implements the hosts' ``Machine`` protocol, so the same ``SshVmHost`` that runs the GCE VMs
    gives it a disk (``DIR/vms/NODE-wN``), an address per boot and a shell."""

    node: TpuNode
    index: int
    labels: dict[str, str] = field(default_factory=dict)
    network_ip: str = ""
    external_ip: str | None = None  # set while the node is up
    disk: Path | None = None
    uid: str = field(default_factory=lambda: secrets.token_hex(6))

    @property
    def name(self) -> str:
        return f"{self.node.name}-w{self.index}"

    @property
    def zone(self) -> str:
        return self.node.zone

    @property
    def machine_type(self) -> str:
        return f"tpu-{self.node.type.name}"

    @property
    def metadata(self) -> dict[str, str]:
        return self.node.metadata

    @property
    def id(self) -> int:
        return self.node.id

    @property
    def gpus(self) -> tuple[Accelerator, ...]:
        return ()

    def host_alias(self, host_key: str) -> str:
        # gcloud compute tpus tpu-vm ssh: tpu.<node id>-<worker>-<last 6 characters of the ed25519 key>.
        return f"tpu.{self.node.id}-{self.index}-{host_key[-6:]}"


@dataclass(eq=False)
class TpuNode:
    name: str
    zone: str
    type: TpuType
    runtime_version: str
    state: str = "CREATING"
    health: str | None = None
    spot: bool = False
    preemptible: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    description: str = ""
    # Fields of the create body we do not model but echo back (serviceAccount, tags, dataDisks, ...).
    extra: dict[str, Any] = field(default_factory=dict)
    by_config: bool = False  # made with acceleratorConfig {type, topology} instead of acceleratorType
    external_ips: bool = True
    queued_resource: str | None = None
    id: int = field(default_factory=new_id)
    created: str = field(default_factory=timestamp)
    workers: list[TpuWorker] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    @property
    def key(self) -> tuple[str, str]:
        return (self.zone, self.name)


@dataclass(eq=False)
class TpuOperation:
    """A long-running operation (``google.longrunning.Operation``) of the TPU API."""

    zone: str
    verb: str  # create, delete, start, stop, update, reset
    target: str  # the resource's full name
    name: str = field(default_factory=lambda: f"operation-{int(time.time() * 1000)}-{secrets.token_hex(16)}")
    created: str = field(default_factory=timestamp)
    ended: str | None = None
    response: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    @property
    def done(self) -> bool:
        return self.ended is not None

    def finish(self, response: dict[str, Any] | None = None, error: dict[str, Any] | None = None) -> None:
        self.response = response
        self.error = error
        self.ended = timestamp()


@dataclass(eq=False)
class QueuedResource:
    """A queued request for a node (``queuedResources``): ACCEPTED, then PROVISIONING, then ACTIVE."""

    name: str
    zone: str
    node_id: str
    node_body: dict[str, Any]
    spot: bool = False
    state: str = "ACCEPTED"
    created: str = field(default_factory=timestamp)
