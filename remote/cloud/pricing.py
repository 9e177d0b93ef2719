"""Hourly price of a VM: its machine type's vCPUs and memory plus its GPUs, Spot or on-demand, by region.

Pure: rates come in a ``PriceBook`` (from the Cloud Billing Catalog, its cache, or the bundled
fallback table; see ``price_catalog``). A rate is keyed ``KIND/NAME/REGION/USAGE``:

- ``core/g2/us-central1/OnDemand``: USD per vCPU-hour of the G2 family;
- ``ram/g2/us-central1/Preemptible``: USD per GiB-hour (Spot VMs are billed at the catalog's
  ``Preemptible`` usage type);
- ``gpu/nvidia-l4/us-central1/OnDemand``: USD per GPU-hour.

REGION ``*`` is a rate for any region (the fallback table's approximation). Disks, networking and
licences are not counted: the price is what the VM costs per hour while it runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gcptui.remote.models import Instance

ON_DEMAND, SPOT = "OnDemand", "Preemptible"
# Memory per vCPU (GiB) of the predefined shapes FAMILY-KIND-N.
_PER_VCPU = {
    ("n1", "standard"): 3.75, ("n1", "highmem"): 6.5, ("n1", "highcpu"): 0.9,
    ("n2", "standard"): 4.0, ("n2", "highmem"): 8.0, ("n2", "highcpu"): 1.0,
    ("n2d", "standard"): 4.0, ("n2d", "highmem"): 8.0, ("n2d", "highcpu"): 1.0,
    ("e2", "standard"): 4.0, ("e2", "highmem"): 8.0, ("e2", "highcpu"): 1.0,
    ("c2", "standard"): 4.0, ("g2", "standard"): 4.0,
}  # fmt: skip
# Accelerator-optimized shapes whose memory is not a multiple of the vCPUs: (vCPUs, GiB).
_FIXED = {
    "a2-highgpu-1g": (12, 85.0), "a2-highgpu-2g": (24, 170.0), "a2-highgpu-4g": (48, 340.0),
    "a2-highgpu-8g": (96, 680.0), "a2-megagpu-16g": (96, 1360.0), "a2-ultragpu-1g": (12, 170.0),
    "a2-ultragpu-2g": (24, 340.0), "a2-ultragpu-4g": (48, 680.0), "a2-ultragpu-8g": (96, 1360.0),
    "a3-highgpu-1g": (26, 234.0), "a3-highgpu-2g": (52, 468.0), "a3-highgpu-4g": (104, 936.0),
    "a3-highgpu-8g": (208, 1872.0),
}  # fmt: skip
# Shared-core E2 shapes: 2 vCPUs that burst, billed as a fraction of one at the E2 core rate
# (cloud.google.com/compute/vm-instance-pricing: e2-micro 0.25, e2-small 0.5, e2-medium 1 vCPU): (vCPUs, GiB).
_SHARED = {"e2-micro": (0.25, 1.0), "e2-small": (0.5, 2.0), "e2-medium": (1.0, 4.0)}
# The catalog's GPU SKU names ("Nvidia L4 GPU running in Americas"), by GCE accelerator type.
GPU_SKU_NAMES = {
    "nvidia-l4": "nvidia l4 gpu",
    "nvidia-tesla-t4": "nvidia tesla t4 gpu",
    "nvidia-tesla-v100": "nvidia tesla v100 gpu",
    "nvidia-tesla-p100": "nvidia tesla p100 gpu",
    "nvidia-tesla-p4": "nvidia tesla p4 gpu",
    "nvidia-tesla-a100": "nvidia tesla a100 gpu",
    "nvidia-a100-80gb": "nvidia tesla a100 80gb gpu",
    "nvidia-h100-80gb": "nvidia h100 80gb gpu",
}
_MACHINE_SKU = re.compile(
    r"(?:spot preemptible |preemptible )?([a-z][a-z0-9]*) (?:predefined )?instance (core|ram) running in .+"
)
_GPU_SKU = re.compile(r"(?:spot preemptible |preemptible )?(.+ gpu) running in .+")


@dataclass(frozen=True, slots=True)
class MachineShape:
    family: str  # the catalog's family (n1, g2, a2, ...)
    vcpus: float  # as billed: a shared-core type's fraction of a vCPU
    memory_gib: float


def machine_shape(machine_type: str) -> MachineShape | None:
    """vCPUs and memory of a predefined machine type; None for one this table does not know (custom)."""
    if machine_type in _FIXED or machine_type in _SHARED:
        vcpus, memory = _FIXED.get(machine_type) or _SHARED[machine_type]
        return MachineShape(machine_type.split("-", 1)[0], vcpus, memory)
    parts = machine_type.split("-")
    if len(parts) == 3 and parts[2].isdigit() and (parts[0], parts[1]) in _PER_VCPU:
        vcpus = int(parts[2])
        return MachineShape(parts[0], vcpus, vcpus * _PER_VCPU[(parts[0], parts[1])])
    return None


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


@dataclass(frozen=True, slots=True)
class PriceBook:
    """Rates (USD per unit-hour) by key, where they came from and as of when."""

    rates: dict[str, float]
    source: str  # "catalog" (read now), "cache" (an earlier catalog read) or "fallback" (bundled table)
    as_of: str  # ISO date (catalog, cache) or the table's recorded date (fallback)
    note: str = ""  # why the fallback is used, for the faces

    def rate(self, kind: str, name: str, region: str, usage: str) -> float | None:
        found = self.rates.get(f"{kind}/{name}/{region}/{usage}")
        return found if found is not None else self.rates.get(f"{kind}/{name}/*/{usage}")

    def hourly(self, instance: Instance) -> float | None:
        """USD per hour of ``instance`` while it runs; None for a row without a Compute Engine machine
        type (a static host) or an unpriced part."""
        if not instance.machine_type:
            return None
        shape = machine_shape(instance.machine_type)
        if shape is None:
            return None
        region, usage = region_of(instance.zone), SPOT if instance.spot else ON_DEMAND
        core = self.rate("core", shape.family, region, usage)
        ram = self.rate("ram", shape.family, region, usage)
        if core is None or ram is None:
            return None
        total = core * shape.vcpus + ram * shape.memory_gib
        for gpu in instance.gpus:
            each = self.rate("gpu", gpu.type, region, usage)
            if each is None:
                return None
            total += each * gpu.count
        return round(total, 4)


def unit_price(money: dict[str, Any]) -> float:
    """A ``Money`` (``{"units": "1", "nanos": 500000000}``) as a float."""
    return int(money.get("units") or 0) + int(money.get("nanos") or 0) / 1e9


def sku_rates(sku: dict[str, Any]) -> dict[str, float]:
    """The rates one catalog SKU (``services.skus.list`` JSON, camelCase) gives, by key; empty when
    it is not a predefined machine core/RAM or GPU SKU at on-demand or Spot usage."""
    category = sku.get("category") or {}
    usage = category.get("usageType")
    if usage not in (ON_DEMAND, SPOT) or not sku.get("pricingInfo"):
        return {}
    description = str(sku.get("description", "")).lower()
    group = category.get("resourceGroup", "")
    key_start: str | None = None
    if group == "GPU":
        found = _GPU_SKU.fullmatch(description)
        names = {v: k for k, v in GPU_SKU_NAMES.items()}
        if found and found.group(1) in names:
            key_start = f"gpu/{names[found.group(1)]}"
    else:
        found = _MACHINE_SKU.fullmatch(description)
        if found:
            key_start = f"{found.group(2)}/{found.group(1)}"
    if key_start is None:
        return {}
    expression = (sku["pricingInfo"][0] or {}).get("pricingExpression") or {}
    tiers = expression.get("tieredRates") or []
    if not tiers:
        return {}
    # The steady rate is the last tier (a first tier may be a free allowance).
    steady = max(tiers, key=lambda t: float(t.get("startUsageAmount") or 0))
    price = unit_price(steady.get("unitPrice") or {})
    return {f"{key_start}/{region}/{usage}": price for region in sku.get("serviceRegions") or []}


def rates_from_skus(skus: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Every rate the SKUs give (later SKUs do not override earlier ones)."""
    rates: dict[str, float] = {}
    for sku in skus:
        for key, value in sku_rates(sku).items():
            rates.setdefault(key, value)
    return rates
