"""Cloud TPU accelerator types and runtime versions as the emulator offers them.

A type names a generation and a size: TensorCores for v2, v3, v4 and v5p (``v4-16``: 16 cores, 8 per
host, so 2 worker hosts), chips for v5e and v6e (``v5litepod-16``: 16 chips, 4 per host, 4 hosts; up
to 8 chips fit one host). Each worker host is one VM that gcptui reaches by SSH.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# generation -> (API enum of acceleratorConfig.type, unit the size counts, units per host, sizes offered)
_GENERATIONS: dict[str, tuple[str, str, int, tuple[int, ...]]] = {
    "v2": ("V2", "cores", 8, (8, 32, 128)),
    "v3": ("V3", "cores", 8, (8, 32, 128)),
    "v4": ("V4", "cores", 8, (8, 16, 32, 64, 128, 256, 512)),
    "v5p": ("V5P", "cores", 8, (8, 16, 32)),
    "v5litepod": ("V5LITE_POD", "chips", 4, (1, 4, 8, 16, 32)),
    "v6e": ("V6E", "chips", 4, (1, 4, 8, 16, 32)),
}
_SINGLE_HOST_CHIPS = 8  # v5e and v6e: up to 8 chips on one host
# v4 slices take any 3-D shape of whole hosts (acceleratorConfig topology 2x2x3 is 12 chips, 3 hosts),
# so any whole number of hosts up to the emulator's largest node is accepted, listed or not: the
# node `--tpu-workers N` makes must be recreated as itself after a preemption.
_V4_MAX_HOSTS = 64
_TYPE = re.compile(r"(v2|v3|v4|v5p|v5litepod|v6e)-(\d+)")

RUNTIME_VERSIONS = (
    "tpu-ubuntu2204-base",
    "tpu-vm-tf-2.16.1-pjrt",
    "v2-alpha-tpuv5",
    "v2-alpha-tpuv5-lite",
    "v2-alpha-tpuv6e",
)


@dataclass(frozen=True, slots=True)
class TpuType:
    """One accelerator type: ``v4-16`` is generation v4, size 16, 2 hosts of 4 chips."""

    name: str
    generation: str
    size: int

    @property
    def api_type(self) -> str:
        return _GENERATIONS[self.generation][0]

    @property
    def chips(self) -> int:
        unit = _GENERATIONS[self.generation][1]
        return self.size // 2 if unit == "cores" else self.size

    @property
    def hosts(self) -> int:
        _, unit, per_host, _ = _GENERATIONS[self.generation]
        if unit == "chips" and self.size <= _SINGLE_HOST_CHIPS:
            return 1
        return max(1, self.size // per_host)

    @property
    def chips_per_host(self) -> int:
        return max(1, self.chips // self.hosts)

    @property
    def topology(self) -> str:
        """acceleratorConfig.topology: 2-D for v2/v3/v5e/v6e, 3-D for v4/v5p (chips per axis)."""
        chips = self.chips
        if self.generation in ("v4", "v5p"):
            x = 2 if chips >= 8 else max(1, chips // 2)
            y = 2 if chips >= 4 else 1
            return f"{x}x{y}x{max(1, chips // (x * y))}"
        x = 1
        while (2 * x) * (2 * x) <= chips:
            x *= 2
        return f"{x}x{chips // x}"


def parse_type(name: str) -> TpuType | None:
    """The type ``name`` names, None when the emulator does not offer it (Google answers 400)."""
    found = _TYPE.fullmatch(name or "")
    if found is None:
        return None
    generation, size = found.group(1), int(found.group(2))
    whole_v4_hosts = generation == "v4" and size % 8 == 0 and 0 < size <= 8 * _V4_MAX_HOSTS
    if size not in _GENERATIONS[generation][3] and not whole_v4_hosts:
        return None
    return TpuType(name, generation, size)


def type_from_config(api_type: str, topology: str) -> TpuType | None:
    """The type an ``acceleratorConfig {type, topology}`` asks for (None: not offered)."""
    generation = next((g for g, spec in _GENERATIONS.items() if spec[0] == api_type), None)
    if generation is None or not re.fullmatch(r"\d+(x\d+){1,2}", topology or ""):
        return None
    chips = 1
    for part in topology.split("x"):
        chips *= int(part)
    size = chips * 2 if _GENERATIONS[generation][1] == "cores" else chips
    return parse_type(f"{generation}-{size}")


def type_with_hosts(hosts: int) -> TpuType:
    """A v4 type with ``hosts`` worker hosts (the emulator's ``--tpu-workers``)."""
    size = 8 * max(1, hosts)
    return TpuType(f"v4-{size}", "v4", size)


def offered_types() -> list[TpuType]:
    return [TpuType(f"{g}-{s}", g, s) for g, spec in _GENERATIONS.items() for s in spec[3]]
