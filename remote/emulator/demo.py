"""A small mixed fleet that reads like a real one, for ``gcptui demo`` and ``gcptui emulator``."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gcptui.remote.emulator.emulator import Emulator


@dataclass(frozen=True)
class InstanceSpec:
    """Arguments for ``Emulator.add_instance``."""

    name: str
    zone: str
    machine_type: str
    gpus: tuple[tuple[str, int], ...] = ()
    spot: bool = False
    preemptible: bool = False
    external_ip: bool = True
    status: str = "RUNNING"
    labels: dict[str, str] = field(default_factory=dict)
    termination_action: str | None = None  # Spot VMs: STOP (GCE's default) or DELETE

    def options(self) -> dict[str, Any]:
        return {
            "termination_action": self.termination_action,
            "machine_type": self.machine_type,
            "gpus": list(self.gpus),
            "spot": self.spot,
            "preemptible": self.preemptible,
            "external_ip": self.external_ip,
            "status": self.status,
            "labels": dict(self.labels),
        }


# (name stem, zone, machine type, GPUs, spot, legacy preemptible, external IP, status)
_TEMPLATES: list[tuple[str, str, str, tuple[tuple[str, int], ...], bool, bool, bool, str]] = [
    ("trainer-l4", "us-central1-a", "g2-standard-8", (("nvidia-l4", 1),), True, False, True, "RUNNING"),
    (
        "trainer-a100",
        "us-central1-a",
        "a2-highgpu-1g",
        (("nvidia-tesla-a100", 1),),
        False,
        False,
        True,
        "RUNNING",
    ),
    ("trainer-h100", "us-east4-a", "a3-highgpu-2g", (("nvidia-h100-80gb", 2),), True, False, True, "RUNNING"),
    (
        "eval-t4",
        "us-central1-b",
        "n1-standard-8",
        (("nvidia-tesla-t4", 2),),
        False,
        True,
        False,
        "TERMINATED",
    ),
    ("trainer-l4", "us-east4-a", "g2-standard-4", (("nvidia-l4", 1),), True, False, True, "RUNNING"),
    ("data-prep", "us-central1-b", "n2-standard-8", (), False, False, True, "RUNNING"),
]


def demo_fleet(
    n: int = 4, spot_action: str = "stop", delete_action: Collection[str] = ()
) -> list[InstanceSpec]:
    """``n`` instances: Spot and on-demand, L4/A100/H100/T4 GPUs, two regions, one without external IP.

    ``spot_action`` ("stop" or "delete") is the Spot VMs' termination action: "delete" makes a
    preemption take the VM and its disk, as managed Spot fleets do. ``delete_action`` names Spot VMs
    that are DELETE-action whatever ``spot_action`` says.
    """
    specs: list[InstanceSpec] = []
    counts: dict[str, int] = {}
    for i in range(n):
        stem, zone, machine, gpus, spot, preemptible, external, status = _TEMPLATES[i % len(_TEMPLATES)]
        counts[stem] = counts.get(stem, 0) + 1
        specs.append(
            InstanceSpec(
                name=f"{stem}-{counts[stem]}",
                zone=zone,
                machine_type=machine,
                gpus=gpus,
                spot=spot,
                preemptible=preemptible,
                external_ip=external,
                status=status,
                labels={"team": "ml", "purpose": stem.split("-")[0]},
                termination_action=(
                    ("DELETE" if f"{stem}-{counts[stem]}" in delete_action else spot_action.upper())
                    if spot
                    else None
                ),
            )
        )
    return specs


def gke_trainer_argv() -> list[str]:
    """The container of the demo's GKE workload (a StatefulSet ``trainer``): the torch-free toy trainer,
    in a shell entrypoint that ignores SIGTERM, as many containers' PID 1 does. A node's shutdown then
    ends the trainer (it checkpoints and exits) while the pod itself lives out the kubelet's grace
    period, as on GKE: long enough for a watcher to read the shutdown on the pod (its DisruptionTarget
    condition) before the StatefulSet makes the pod anew on another node."""
    import shlex
    import sys

    from gcptui.remote.emulator import toy_train

    toy = shlex.join([sys.executable, "-IS", str(Path(toy_train.__file__)), "--run-dir", "run", "--steps",
                      "100000", "--step-delay", "0.5"])  # fmt: skip
    return ["sh", "-c", f"trap '' TERM; {toy}; exec sleep 86400"]


def add_fleet(emulator: Emulator, specs: list[InstanceSpec]) -> None:
    """Add every spec to a started emulator (call on its loop)."""
    for spec in specs:
        emulator.add_instance(spec.name, spec.zone, **spec.options())


def large_fleet(n: int, zones: int = 10) -> list[InstanceSpec]:
    """``n`` API-only instances spread over ``zones`` zones (for ``Emulator(ssh=False)`` benchmarks)."""
    from gcptui.remote.emulator.emulator import DEFAULT_ZONES

    chosen = DEFAULT_ZONES[:zones]
    models = [
        ("g2-standard-8", (("nvidia-l4", 1),)),
        ("a2-highgpu-1g", (("nvidia-tesla-a100", 1),)),
        ("n2-standard-4", ()),
    ]
    return [
        InstanceSpec(
            name=f"vm-{i:05d}",
            zone=chosen[i % len(chosen)],
            machine_type=models[i % 3][0],
            gpus=models[i % 3][1],
            spot=i % 2 == 0,
            external_ip=i % 7 != 0,
            status="RUNNING" if i % 5 else "TERMINATED",
        )
        for i in range(n)
    ]
