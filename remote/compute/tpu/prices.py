"""What a TPU node costs per hour: Cloud TPU's list prices per chip-hour, dated, by generation.

A bundled table (the Billing Catalog's Cloud TPU SKUs are priced per chip-hour by generation and
region; this table holds us-central prices, on-demand and Spot). Shown as ``fallback`` with its date.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

AS_OF = "2026-11-01"
# generation -> (on-demand, Spot) USD per chip-hour, us-central regions.
_CHIP_HOUR = {
    "v2": (1.125, 0.3375),
    "v3": (2.00, 0.60),
    "v4": (3.22, 0.97),
    "v5p": (4.20, 1.26),
    "v5litepod": (1.20, 0.36),
    "v6e": (2.70, 0.81),
}
_CORES_PER_CHIP = {"v2": 2, "v3": 2, "v4": 2, "v5p": 2}  # these types count TensorCores, not chips


@dataclass(frozen=True, slots=True)
class TpuPrice:
    usd_per_hour: float
    as_of: str


def tpu_price(accelerator_type: str, zone: str, *, spot: bool) -> TpuPrice | None:
    """The hourly price of a node of ``accelerator_type`` (``v4-16``), None when the table lacks it."""
    found = re.fullmatch(r"(v2|v3|v4|v5p|v5litepod|v6e)-(\d+)", accelerator_type)
    if found is None:
        return None
    generation, size = found.group(1), int(found.group(2))
    chips = size // _CORES_PER_CHIP.get(generation, 1)
    on_demand, spot_rate = _CHIP_HOUR[generation]
    return TpuPrice(round(chips * (spot_rate if spot else on_demand), 4), AS_OF)
