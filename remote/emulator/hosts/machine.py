"""What the hosts need of an emulated machine, whichever API made it (a GCE instance today, a TPU
VM's worker next): its identity, GPUs, labels and where its disk lives."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from gcptui.remote.emulator.core.names import Accelerator


class Machine(Protocol):
    labels: dict[str, str]  # the hosts keep the SSH port label of one-address mode here
    network_ip: str  # the hosts move it to 127.0.0.1 where the OS routes only that address
    disk: Path | None  # set by the host: DIR/vms/NAME

    @property
    def name(self) -> str: ...
    @property
    def zone(self) -> str: ...
    @property
    def machine_type(self) -> str: ...
    @property
    def metadata(self) -> dict[str, str]: ...  # its own metadata items (enable-oslogin, ...)
    @property
    def id(self) -> int: ...
    @property
    def uid(self) -> str: ...  # unique per machine, marks its processes
    @property
    def gpus(self) -> tuple[Accelerator, ...]: ...
    def host_alias(self, host_key: str) -> str:
        """The name gcloud pins this machine's host key under in ``google_compute_known_hosts``
        (``host_key``: the base64 ed25519 key): ``compute.<id>`` for a VM, ``tpu.<id>-<w>-<suffix>``
        for a TPU worker."""
        ...
