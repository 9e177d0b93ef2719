"""The ``instances.insert`` body of a new VM "like" a base VM (the console's "create similar").

Pure functions over GCE's REST JSON (camelCase, as ``Instance.to_json`` writes it): no network, no
client library. What is copied from the base is an explicit list, so a field GCE adds later never
slips into an insert unchecked:

- machine type, GPUs (``guestAccelerators``), scheduling (provisioning model, ``preemptible``,
  termination action, automatic restart, host maintenance), service accounts and their scopes,
  network and subnetwork (with the access configs, never the addresses), network tags, labels,
  metadata, and a few machine features (``canIpForward``, ``minCpuPlatform``,
  ``shieldedInstanceConfig``, ``advancedMachineFeatures``, ``displayDevice``, ``description``);
- a NEW boot disk made from what the base's boot disk was made from (its image, else its snapshot),
  of the same disk type and size. Other disks of the base are not copied.

Left out, on purpose: per-instance metadata keys ``created-by`` and ``instance-template`` (they say a
managed instance group owns the VM: the new one is not in that group), labels GCE reserves
(``goog-*``) and gcptui's own per-VM ``gcptui-ssh-port``; ``hostname``, resource policies
(snapshot schedules are per disk and region), reservation affinity (a specific reservation is per
zone) and deletion protection. ``ssh-keys`` are kept: they are who may log in, as on the base.
``enable-guest-attributes`` is always TRUE so that gcptui can pin the new VM's host key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gcptui.remote.cloud.instances import DiskOrigin, short_name
from gcptui.remote.errors import ConfigError, GcptuiError
from gcptui.remote.models import SSH_PORT_LABEL, SWEEP_LABEL, sweep_label_value

# Metadata keys that belong to one instance (a managed group's), never copied to another VM.
PER_INSTANCE_METADATA = frozenset({"created-by", "instance-template"})
# Labels gcptui writes on a created VM: which base it came from, and the group it was asked into.
BASE_LABEL = "gcptui-base"
GROUP_LABEL = "gcptui-group"
# Fields copied as they are (no zone or address in them).
COPIED_FIELDS = (
    "canIpForward", "description", "minCpuPlatform", "shieldedInstanceConfig", "advancedMachineFeatures",
    "displayDevice",
)  # fmt: skip
SCHEDULING_FIELDS = (
    "provisioningModel", "preemptible", "instanceTerminationAction", "automaticRestart", "onHostMaintenance",
)  # fmt: skip
_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
_GPUS = re.compile(r"([a-z0-9-]+):([0-9]{1,2})")


class CreateError(GcptuiError):
    """A VM cannot be made like its base (the base lacks something an insert needs)."""


@dataclass(frozen=True, slots=True)
class CreateOptions:
    """What ``vm create`` changes from the base; None keeps the base's."""

    zone: str | None = None
    spot: bool | None = None  # True: Spot; False: on-demand
    machine_type: str | None = None
    gpus: tuple[str, int] | None = None  # (accelerator type, count); count 0 removes the GPUs
    group: str | None = None
    sweep: str | None = None  # the sweep that makes it: labelled so other keep-alives leave it alone


def parse_gpus(text: str) -> tuple[str, int]:
    """``nvidia-l4:2`` -> (``nvidia-l4``, 2); a usage error (exit 2) for anything else."""
    found = _GPUS.fullmatch(text.strip())
    if found is None:
        raise ConfigError(f"--gpus {text!r}: write TYPE:COUNT, e.g. --gpus nvidia-l4:1 (COUNT 0: no GPUs)")
    return found.group(1), int(found.group(2))


_NAME = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")


def check_vm_name(name: str) -> str:
    """GCE's rule for instance names (RFC 1035); a usage error naming it otherwise."""
    if not _NAME.fullmatch(name):
        raise ConfigError(
            f"{name!r} is not a valid VM name: 1-63 lowercase letters, digits and '-', a letter first"
        )
    return name


def expand_names(text: str, count: int = 1, *, first: int = 0, numbered: bool = False) -> list[str]:
    """The names a form's fields ask for: several names as written, or one name and a count N > 1
    (or any N with ``numbered``) as ``NAME-first .. NAME-(first+N-1)``, the numbering of
    ``vm create --count``; each checked against GCE's rule (``ConfigError`` with the fix)."""
    words = text.replace(",", " ").split()
    if not words:
        raise ConfigError("give at least one VM name")
    if count < 1:
        raise ConfigError("the count must be 1 or more")
    if len(words) == 1 and (count > 1 or numbered):
        words = [f"{words[0]}-{i}" for i in range(first, first + count)]
    elif count > 1 and count != len(words):
        raise ConfigError(
            f"{len(words)} names but a count of {count}: give one name, or leave the count at 1"
        )
    if len(set(words)) != len(words):
        raise ConfigError("a name is given twice")
    return [check_vm_name(word) for word in words]


def check_group(group: str) -> str:
    """A group name must be a valid label value (it is recorded as one)."""
    if not group or not _LABEL_VALUE.fullmatch(group):
        raise ConfigError(f"group {group!r}: use lowercase letters, digits, '-' and '_' (at most 63)")
    return group


def region_of(zone: str) -> str:
    """``us-central1-a`` -> ``us-central1``."""
    return zone.rsplit("-", 1)[0]


def boot_disk(base: dict[str, Any]) -> dict[str, Any]:
    """The base's attached boot disk (``instances.get`` shape); ``CreateError`` when it has none."""
    for disk in base.get("disks") or []:
        if disk.get("boot"):
            return dict(disk)
    raise CreateError(f"{base.get('name')} has no boot disk to copy: pick another base VM")


def boot_source(origin: DiskOrigin, base_name: str) -> dict[str, str]:
    """``initializeParams`` source of the new boot disk: the base disk's image, else its snapshot."""
    if origin.source_image:
        return {"sourceImage": origin.source_image}
    if origin.source_snapshot:
        return {"sourceSnapshot": origin.source_snapshot}
    raise CreateError(
        f"the boot disk {origin.name} of {base_name} was made from neither an image nor a snapshot: "
        "make an image of it first (takes minutes)"
    )


def _scheduling(base: dict[str, Any], spot: bool | None, has_gpus: bool) -> dict[str, Any]:
    old = base.get("scheduling") or {}
    out = {key: old[key] for key in SCHEDULING_FIELDS if key in old}
    is_spot = (
        spot if spot is not None else (old.get("provisioningModel") == "SPOT" or bool(old.get("preemptible")))
    )
    if spot is True:
        # As `gcloud compute instances create --provisioning-model=SPOT` sends it.
        out.update(provisioningModel="SPOT", preemptible=True, automaticRestart=False)
        out.setdefault("instanceTerminationAction", "STOP")
    elif spot is False:
        out.update(provisioningModel="STANDARD", preemptible=False, automaticRestart=True)
        out.pop("instanceTerminationAction", None)
    # GPUs and Spot VMs cannot live-migrate: GCE refuses MIGRATE for them.
    if has_gpus or is_spot:
        out["onHostMaintenance"] = "TERMINATE"
    elif spot is False or "onHostMaintenance" not in out:
        out["onHostMaintenance"] = "MIGRATE"
    return out


def _network_interfaces(base: dict[str, Any], region: str) -> list[dict[str, Any]]:
    nics = []
    for old in base.get("networkInterfaces") or []:
        nic: dict[str, Any] = {}
        if old.get("network"):
            nic["network"] = old["network"]
        if old.get("subnetwork"):
            # A subnetwork is regional: the same-named one in the new zone's region.
            nic["subnetwork"] = re.sub(r"/regions/[^/]+/", f"/regions/{region}/", old["subnetwork"])
        for key in ("stackType", "nicType"):
            if old.get(key):
                nic[key] = old[key]
        configs = [
            {k: access[k] for k in ("type", "name", "networkTier") if access.get(k)}
            for access in old.get("accessConfigs") or []
        ]
        if configs:
            nic["accessConfigs"] = configs  # a new ephemeral address, never the base's natIP
        nics.append(nic)
    return nics or [{"network": "global/networks/default"}]


def _labels(base: dict[str, Any], options: CreateOptions) -> dict[str, str]:
    labels = {
        k: v
        for k, v in (base.get("labels") or {}).items()
        if not k.startswith("goog-") and k not in (SSH_PORT_LABEL, BASE_LABEL, GROUP_LABEL, SWEEP_LABEL)
    }  # a VM made like a sweep's VM is not that sweep's
    labels[BASE_LABEL] = str(base.get("name", ""))
    if options.group:
        labels[GROUP_LABEL] = options.group
    if options.sweep:
        labels[SWEEP_LABEL] = sweep_label_value(options.sweep)
    return labels


def _metadata(base: dict[str, Any]) -> dict[str, Any]:
    items = [
        {"key": item["key"], "value": item.get("value", "")}
        for item in (base.get("metadata") or {}).get("items") or []
        if item.get("key")
        and item["key"] not in PER_INSTANCE_METADATA
        and item["key"] != "enable-guest-attributes"
    ]
    items.append({"key": "enable-guest-attributes", "value": "TRUE"})
    return {"items": items}


def create_body(
    base: dict[str, Any], origin: DiskOrigin, name: str, options: CreateOptions
) -> dict[str, Any]:
    """The insert body of VM ``name`` like ``base`` (its ``instances.get`` JSON), with a boot disk from
    ``origin`` (``disks.get`` of the base's boot disk) and ``options`` applied. Zonal URLs are partial
    (``zones/Z/...``), the form GCE's insert takes."""
    zone = options.zone or short_name(str(base.get("zone", "")))
    machine = options.machine_type or short_name(str(base.get("machineType", "")))
    if options.gpus is not None:
        kind, count = options.gpus
        gpus = [(kind, count)] if count else []
    else:
        gpus = [
            (short_name(acc.get("acceleratorType", "")), int(acc.get("acceleratorCount", 0)))
            for acc in base.get("guestAccelerators") or []
            if int(acc.get("acceleratorCount", 0))
        ]
    old_boot = boot_disk(base)
    params: dict[str, Any] = {
        "diskName": name,
        **boot_source(origin, str(base.get("name"))),
        "diskType": f"zones/{zone}/diskTypes/{origin.type}",  # an insert needs a zonal URL
        "diskSizeGb": str(origin.size_gb),
    }
    if origin.labels:
        params["labels"] = dict(origin.labels)
    disk: dict[str, Any] = {"boot": True, "autoDelete": True, "deviceName": name, "initializeParams": params}
    if old_boot.get("interface"):
        disk["interface"] = old_boot["interface"]
    body: dict[str, Any] = {key: base[key] for key in COPIED_FIELDS if key in base}
    body.update(
        name=name,
        machineType=f"zones/{zone}/machineTypes/{machine}",
        disks=[disk],
        networkInterfaces=_network_interfaces(base, region_of(zone)),
        scheduling=_scheduling(base, options.spot, bool(gpus)),
        labels=_labels(base, options),
        metadata=_metadata(base),
    )
    if gpus:
        body["guestAccelerators"] = [
            {"acceleratorType": f"zones/{zone}/acceleratorTypes/{kind}", "acceleratorCount": count}
            for kind, count in gpus
        ]
    accounts = [
        {"email": account.get("email", ""), "scopes": list(account.get("scopes") or [])}
        for account in base.get("serviceAccounts") or []
    ]
    if accounts:
        body["serviceAccounts"] = accounts
    tags = list((base.get("tags") or {}).get("items") or [])
    if tags:
        body["tags"] = {"items": tags}
    return body


def similar_settings(instance: dict[str, Any]) -> dict[str, Any]:
    """The settings ``create_body`` carries over, normalised (short names, no per-instance parts), from
    an instance's or an insert body's JSON: equal for a base and a VM made like it."""
    nics = [
        {
            "network": short_name(nic.get("network", "")),
            "subnetwork": short_name(nic.get("subnetwork", "")),
            "external": bool(nic.get("accessConfigs")),
        }
        for nic in instance.get("networkInterfaces") or []
    ]
    scheduling = instance.get("scheduling") or {}
    metadata = {
        item["key"]: item.get("value", "")
        for item in (instance.get("metadata") or {}).get("items") or []
        if item["key"] not in PER_INSTANCE_METADATA and item["key"] != "enable-guest-attributes"
    }  # guest attributes: always on in a created VM, whatever the base says
    return {
        "machine_type": short_name(instance.get("machineType", "")),
        "gpus": sorted(
            (short_name(a.get("acceleratorType", "")), int(a.get("acceleratorCount", 0)))
            for a in instance.get("guestAccelerators") or []
        ),
        "scheduling": {
            "provisioningModel": scheduling.get("provisioningModel", "STANDARD"),
            "preemptible": bool(scheduling.get("preemptible", False)),
            "instanceTerminationAction": scheduling.get("instanceTerminationAction"),
            "automaticRestart": scheduling.get("automaticRestart"),
            "onHostMaintenance": scheduling.get("onHostMaintenance"),
        },
        "service_accounts": [
            (a.get("email", ""), sorted(a.get("scopes") or [])) for a in instance.get("serviceAccounts") or []
        ],
        "network_interfaces": nics,
        "tags": sorted((instance.get("tags") or {}).get("items") or []),
        "labels": {
            k: v
            for k, v in (instance.get("labels") or {}).items()
            if not k.startswith("goog-") and k not in (SSH_PORT_LABEL, BASE_LABEL, GROUP_LABEL)
        },
        "metadata": metadata,
    }
