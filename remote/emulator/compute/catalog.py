"""The machine types and accelerator types every emulated zone offers, as GCE lists them.

``machineTypes.list``/``get``/``aggregatedList`` and ``acceleratorTypes.list``/``get``/
``aggregatedList`` answer from here, and ``instances.insert`` checks its machine type and GPUs against
the same lists, as GCE checks them against the zone's. Every emulated zone offers all of them (GCE's
zones differ; the emulator's do not). Custom shapes (``n2-custom-4-8192``) are accepted as GCE accepts
them, without being listed.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

API_ROOT = "https://www.googleapis.com/compute/v1"
CREATED = "1969-12-31T16:00:00.000-08:00"  # what GCE answers for its own predefined types

# FAMILY-KIND -> (vCPU counts offered, memory MB per vCPU).
_SIZES: dict[tuple[str, str], tuple[tuple[int, ...], int]] = {
    ("n1", "standard"): ((1, 2, 4, 8, 16, 32, 64, 96), 3840),
    ("n1", "highmem"): ((2, 4, 8, 16, 32, 64, 96), 6656),
    ("n1", "highcpu"): ((2, 4, 8, 16, 32, 64, 96), 922),
    ("n2", "standard"): ((2, 4, 8, 16, 32, 48, 64, 80, 96, 128), 4096),
    ("n2", "highmem"): ((2, 4, 8, 16, 32, 48, 64, 80, 96, 128), 8192),
    ("n2", "highcpu"): ((2, 4, 8, 16, 32, 48, 64, 80, 96), 1024),
    ("n2d", "standard"): ((2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 224), 4096),
    ("n2d", "highmem"): ((2, 4, 8, 16, 32, 48, 64, 80, 96), 8192),
    ("n2d", "highcpu"): ((2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 224), 1024),
    ("n4", "standard"): ((2, 4, 8, 16, 32, 48, 64, 80), 4096),
    ("e2", "standard"): ((2, 4, 8, 16, 32), 4096),
    ("e2", "highmem"): ((2, 4, 8, 16), 8192),
    ("e2", "highcpu"): ((2, 4, 8, 16, 32), 1024),
    ("c2", "standard"): ((4, 8, 16, 30, 60), 4096),
    ("c3", "standard"): ((4, 8, 22, 44, 88, 176), 4096),
    ("c3", "highcpu"): ((4, 8, 22, 44, 88, 176), 2048),
    ("c3", "highmem"): ((4, 8, 22, 44, 88, 176), 8192),
    ("t2d", "standard"): ((1, 2, 4, 8, 16, 32, 48, 60), 4096),
    ("g2", "standard"): ((4, 8, 12, 16, 24, 32, 48, 96), 4096),
}
# name -> (vCPUs, memory MB, GPU type, GPU count); shared-core and GPU-bundled types.
_NAMED: dict[str, tuple[int, int, str, int]] = {
    "e2-micro": (2, 1024, "", 0), "e2-small": (2, 2048, "", 0), "e2-medium": (2, 4096, "", 0),
    "f1-micro": (1, 614, "", 0), "g1-small": (1, 1740, "", 0),
    "a2-highgpu-1g": (12, 87040, "nvidia-tesla-a100", 1), "a2-highgpu-2g": (24, 174080, "nvidia-tesla-a100", 2),
    "a2-highgpu-4g": (48, 348160, "nvidia-tesla-a100", 4), "a2-highgpu-8g": (96, 696320, "nvidia-tesla-a100", 8),
    "a2-megagpu-16g": (96, 1392640, "nvidia-tesla-a100", 16),
    "a2-ultragpu-1g": (12, 174080, "nvidia-a100-80gb", 1), "a2-ultragpu-2g": (24, 348160, "nvidia-a100-80gb", 2),
    "a2-ultragpu-4g": (48, 696320, "nvidia-a100-80gb", 4), "a2-ultragpu-8g": (96, 1392640, "nvidia-a100-80gb", 8),
    "a3-highgpu-1g": (26, 239616, "nvidia-h100-80gb", 1), "a3-highgpu-2g": (52, 479232, "nvidia-h100-80gb", 2),
    "a3-highgpu-4g": (104, 958464, "nvidia-h100-80gb", 4), "a3-highgpu-8g": (208, 1916928, "nvidia-h100-80gb", 8),
    "a3-megagpu-8g": (208, 1916928, "nvidia-h100-mega-80gb", 8),
    "a3-ultragpu-8g": (224, 3022848, "nvidia-h200-141gb", 8),
    "a3-edgegpu-8g": (208, 1916928, "nvidia-h100-80gb", 8),
}  # fmt: skip
_SHARED_CORE = frozenset({"e2-micro", "e2-small", "e2-medium", "f1-micro", "g1-small"})
_CUSTOM = re.compile(r"(?:(?:n1|n2|n2d|e2)-)?custom-([0-9]+)-([0-9]+)(?:-ext)?")
# name -> (description, the most cards one instance may have)
ACCELERATORS: dict[str, tuple[str, int]] = {
    "nvidia-tesla-t4": ("NVIDIA T4", 4), "nvidia-tesla-t4-vws": ("NVIDIA T4 Virtual Workstation", 4),
    "nvidia-tesla-p4": ("NVIDIA Tesla P4", 4), "nvidia-tesla-p4-vws": ("NVIDIA Tesla P4 Virtual Workstation", 4),
    "nvidia-tesla-p100": ("NVIDIA Tesla P100", 4),
    "nvidia-tesla-p100-vws": ("NVIDIA Tesla P100 Virtual Workstation", 4),
    "nvidia-tesla-v100": ("NVIDIA V100", 8), "nvidia-tesla-k80": ("NVIDIA Tesla K80", 8),
    "nvidia-l4": ("NVIDIA L4", 8), "nvidia-l4-vws": ("NVIDIA L4 Virtual Workstation", 8),
    "nvidia-tesla-a100": ("NVIDIA A100 40GB", 16), "nvidia-a100-80gb": ("NVIDIA A100 80GB", 8),
    "nvidia-h100-80gb": ("NVIDIA H100 80GB", 8), "nvidia-h100-mega-80gb": ("NVIDIA H100 80GB MEGA", 8),
    "nvidia-h200-141gb": ("NVIDIA H200 141GB", 8), "nvidia-b200": ("NVIDIA B200", 8),
    "nvidia-gb200": ("NVIDIA GB200", 4), "nvidia-rtx-pro-6000": ("NVIDIA RTX PRO 6000", 8),
}  # fmt: skip


@dataclass(frozen=True)
class MachineType:
    name: str
    cpus: int
    memory_mb: int
    gpu: str = ""
    gpus: int = 0


def _g2_gpus(cpus: int) -> int:
    return {24: 2, 48: 4, 96: 8}.get(cpus, 1)


def machine_types() -> list[MachineType]:
    """Every predefined machine type a zone offers, sorted by name as GCE lists them."""
    found = [MachineType(name, *spec) for name, spec in _NAMED.items()]
    for (family, kind), (sizes, per_cpu) in _SIZES.items():
        for cpus in sizes:
            gpus = _g2_gpus(cpus) if family == "g2" else 0
            found.append(
                MachineType(
                    f"{family}-{kind}-{cpus}", cpus, cpus * per_cpu, "nvidia-l4" if gpus else "", gpus
                )
            )
    return sorted(found, key=lambda m: m.name)


_BY_NAME = {m.name: m for m in machine_types()}


def machine_type(name: str) -> MachineType | None:
    """The zone's machine type ``name`` (a custom shape too), None when GCE has none of that name."""
    if name in _BY_NAME:
        return _BY_NAME[name]
    custom = _CUSTOM.fullmatch(name)
    return MachineType(name, int(custom.group(1)), int(custom.group(2))) if custom else None


def catalog_id(kind: str, name: str) -> str:
    """A stable numeric id for one of GCE's own resources (a type, a region)."""
    return _id(kind, name)


def _id(kind: str, name: str) -> str:
    return str(int(hashlib.sha256(f"{kind}/{name}".encode()).hexdigest()[:15], 16))


def machine_type_json(project: str, zone: str, machine: MachineType) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "compute#machineType", "id": _id("machineTypes", machine.name), "creationTimestamp": CREATED,
        "name": machine.name, "description": _describe(machine), "guestCpus": machine.cpus,
        "memoryMb": machine.memory_mb, "imageSpaceGb": 0, "maximumPersistentDisks": 128,
        "maximumPersistentDisksSizeGb": "263168", "zone": zone, "isSharedCpu": machine.name in _SHARED_CORE,
        "architecture": "X86_64",
        "selfLink": f"{API_ROOT}/projects/{project}/zones/{zone}/machineTypes/{machine.name}",
    }  # fmt: skip
    if machine.gpus:
        body["accelerators"] = [{"guestAcceleratorType": machine.gpu, "guestAcceleratorCount": machine.gpus}]
    return body


def _describe(machine: MachineType) -> str:
    memory = machine.memory_mb / 1024
    shown = f"{memory:g}" if memory == int(memory) or memory >= 10 else f"{memory:.2f}".rstrip("0")
    return f"{machine.cpus} vCPU{'s' if machine.cpus > 1 else ''}, {shown} GB RAM"


def accelerator_type_json(project: str, zone: str, name: str) -> dict[str, Any]:
    description, most = ACCELERATORS[name]
    return {
        "kind": "compute#acceleratorType", "id": _id("acceleratorTypes", name), "creationTimestamp": CREATED,
        "name": name, "description": description, "maximumCardsPerInstance": most,
        "zone": f"{API_ROOT}/projects/{project}/zones/{zone}",
        "selfLink": f"{API_ROOT}/projects/{project}/zones/{zone}/acceleratorTypes/{name}",
    }  # fmt: skip


# disk type -> (description, valid sizes, default size in GB)
_DISK_TYPES = {
    "pd-standard": ("Standard Persistent Disk", "10GB-65536GB", 500),
    "pd-balanced": ("Balanced Persistent Disk", "10GB-65536GB", 100),
    "pd-ssd": ("SSD Persistent Disk", "10GB-65536GB", 100),
    "pd-extreme": ("Extreme Persistent Disk", "500GB-65536GB", 1000),
    "hyperdisk-balanced": ("Hyperdisk Balanced Persistent Disk", "4GB-65536GB", 100),
}


def disk_type_json(project: str, zone: str, name: str) -> dict[str, Any]:
    description, sizes, default = _DISK_TYPES.get(name, (name, "10GB-65536GB", 100))
    return {
        "kind": "compute#diskType", "id": _id("diskTypes", name), "creationTimestamp": CREATED, "name": name,
        "description": description, "validDiskSize": sizes, "defaultDiskSizeGb": str(default),
        "zone": f"{API_ROOT}/projects/{project}/zones/{zone}",
        "selfLink": f"{API_ROOT}/projects/{project}/zones/{zone}/diskTypes/{name}",
    }  # fmt: skip
