"""A sweep's VMs given as ``vms = { count = N, from = BASE }``: made like BASE before the trials run.

Uses ``vm create --from``'s code (the base's backend: ``Backend.plan_copies``, ``copier``): the base's settings, a boot disk from its
image, every VM inserted at once, host keys pinned. VMs that already exist (a resumed sweep, or made
by hand under those names) are kept as they are, so ``sweep run`` may be run again at any time.
"""

from __future__ import annotations

from collections.abc import Callable

from gcptui.remote.cloud.fleet import FleetSource
from gcptui.remote.compute.backend import Capability
from gcptui.remote.compute.registry import Compute
from gcptui.remote.config import Config
from gcptui.remote.errors import ConfigError, GcptuiError
from gcptui.remote.provision import Created, CreateOptions, parse_gpus
from gcptui.remote.sweep.spec import SweepSpec, VmsFrom


def create_options(vms: VmsFrom, sweep: str | None = None) -> CreateOptions:
    """What the sweep's VMs change from their base; labelled with ``sweep`` (``SWEEP_LABEL``), so
    the keep-alives over every Spot VM (the TUI's, the keeper) leave them to the sweep's own."""
    return CreateOptions(
        zone=vms.zone,
        spot=vms.spot,
        machine_type=vms.machine_type,
        gpus=parse_gpus(vms.gpus) if vms.gpus else None,
        sweep=sweep,
    )


def ensure_vms(
    config: Config, spec: SweepSpec, say: Callable[[str], None], *, skip: list[str] | None = None
) -> list[str]:
    """Create the sweep's VMs that do not exist yet (none when ``vms`` is a list of names); returns
    the names created. ``skip``: VMs the sweep is done with (stopped or deleted at its end) stay so.

    Raises ``ConfigError`` (no ``[gcp]``, no such base) or ``GcptuiError`` (a VM could not be made).
    """
    if not isinstance(spec.vms, VmsFrom):
        return []
    source = FleetSource(config)
    if source.gcp is None:
        raise ConfigError(f"sweep {spec.name}: vms = {{ from = ... }} needs a [gcp] section to create VMs")
    snapshot = source.snapshot()
    missing = [n for n in spec.vm_names if snapshot.find(n) is None and n not in (skip or [])]
    if not missing:
        return []
    base = snapshot.find(spec.vms.base)
    compute = Compute.over(source)
    if base is None or not compute.can(base, Capability.CREATE_LIKE):
        raise ConfigError(
            f"sweep {spec.name}: vms.from = {spec.vms.base!r}: no GCE VM of that name (see `gcptui ls`)"
        )
    backend = compute.of(base)
    plan = backend.plan_copies(base, create_options(spec.vms, spec.name))
    say(f"sweep {spec.name}: creating {', '.join(missing)} like {base.name}")
    creator = backend.copier(lambda name, step: say(f"  {name}: {step}"))
    results = creator.create_many(plan, missing)
    failed = [f"{name}: {result}" for name, result in results.items() if not isinstance(result, Created)]
    if failed:
        raise GcptuiError(f"sweep {spec.name}: could not create {'; '.join(failed)}")
    return missing
