"""``vm create --from BASE``: what the faces check before asking a backend for copies of a row.

This is the faces' one door to creating VMs (``vm create``, the TUI's create form, a sweep's VMs):
they import the options, the name and flag checks and the outcome from here, never ``remote/cloud/``
(import-linter holds it); the plan and the copier come from the row's backend
(``Backend.plan_copies``, ``Backend.copier``; GCE's in ``compute/gce/copies.py``).
"""

from __future__ import annotations

from gcptui.remote.cloud.create import (
    CreateError,
    CreateOptions,
    check_group,
    check_vm_name,
    expand_names,
    parse_gpus,
)
from gcptui.remote.compute.copies import Created, Report
from gcptui.remote.config import Config

__all__ = [
    "CreateError", "CreateOptions", "Created", "Report", "check_group", "check_vm_name", "expand_names",
    "parse_gpus", "zone_unlisted",
]  # fmt: skip


def zone_unlisted(zone: str | None, config: Config) -> str | None:
    """Why VMs may not be made in ``zone`` (``--zone``, the create form's): gcptui lists only a
    non-empty ``[gcp] zones``, so VMs made outside it would run (and cost) unseen by ls, job and
    keep-alive. None when it is fine (no zone asked for, or no zone list)."""
    zones = list(config.gcp.zones) if config.gcp is not None else []
    if not zone or not zones or zone in zones:
        return None
    return (
        f"zone {zone} is not in [gcp] zones ({', '.join(zones)}): add it there first, "
        "or gcptui will not see the new VMs"
    )
