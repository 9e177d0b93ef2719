"""A TPU node's JSON as a fleet row, its workers as SSH-reachable rows, and the body that makes it anew.

The node's JSON comes from the TPU API, which a node's own workers cannot write; it is still read
totally: a field of the wrong type is left out, never trusted into a crash.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gcptui.remote.compute.tpu.states import PREEMPTED, tpu_state
from gcptui.remote.models import Instance, State, Worker

# What a new node copies from the one it is made like (the rest is output, or the provider's to set).
_COPIED = ("acceleratorType", "acceleratorConfig", "runtimeVersion", "schedulingConfig", "labels", "metadata",
           "networkConfig", "serviceAccount", "tags", "dataDisks", "description", "shieldedInstanceConfig",
           "bootDiskConfig", "cidrBlock")  # fmt: skip


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _strings(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def accelerator(raw: dict[str, Any]) -> str:
    """``v4-16``, or ``V5LITE_POD 4x4`` for a node made by chips and topology."""
    name = _str(raw.get("acceleratorType"))
    if name:
        return name
    config = raw.get("acceleratorConfig")
    if isinstance(config, dict):
        return f"{_str(config.get('type')).lower()} {_str(config.get('topology'))}".strip()
    return ""


def node_row(raw: dict[str, Any], zone: str) -> Instance | None:
    full = _str(raw.get("name"))
    name = full.rsplit("/", 1)[-1]
    if not name:
        return None
    word = _str(raw.get("state")) or "UNKNOWN"
    state = tpu_state(word)
    scheduling = raw.get("schedulingConfig") if isinstance(raw.get("schedulingConfig"), dict) else {}
    assert isinstance(scheduling, dict)
    endpoints = [e for e in raw.get("networkEndpoints", []) or [] if isinstance(e, dict)][:4096]
    workers = []
    for index, endpoint in enumerate(endpoints):
        access = endpoint.get("accessConfig") if isinstance(endpoint.get("accessConfig"), dict) else {}
        assert isinstance(access, dict)
        address = _str(access.get("externalIp")) or _str(endpoint.get("ipAddress")) or None
        workers.append(
            Worker(name=f"w{index}", address=address if state.up else None, state=state,
                   internal_ip=_str(endpoint.get("ipAddress")) or None)
        )  # fmt: skip
    first = endpoints[0] if endpoints else {}
    first_access = first.get("accessConfig") if isinstance(first.get("accessConfig"), dict) else {}
    assert isinstance(first_access, dict)
    return Instance(
        name=name,
        zone=zone,
        status=word,
        machine_type=accelerator(raw),
        spot=bool(scheduling.get("spot") or scheduling.get("preemptible")),
        external_ip=_str(first_access.get("externalIp")) or None if state.up else None,
        internal_ip=_str(first.get("ipAddress")) or None,
        labels=_strings(raw.get("labels")),
        instance_id=_str(raw.get("id")) or None,
        preempted=word == PREEMPTED,
        source="tpu",
        state=state,
        workers=tuple(workers),
    )


def worker_alias(node_id: str, index: int, key: str) -> str:
    """gcloud's known-hosts alias of worker ``index``: ``tpu.<node id>-<index>-<key[-6:]>``."""
    return f"tpu.{node_id}-{index}-{key[-6:]}"


def worker_row(node: Instance, index: int) -> Instance:
    """Worker ``index`` of ``node`` as a row SSH can reach (named ``NODE/wN`` in the pool)."""
    worker = node.workers[index]
    return replace(
        node,
        name=f"{node.name}/{worker.name}",
        external_ip=worker.address,
        internal_ip=worker.internal_ip,
        parent=node.name,
        workers=(),
        host_key_alias=worker.host_key_alias,
        state=worker.state if worker.address else State.PROVISIONING,
    )


def recreate_body(raw: dict[str, Any]) -> dict[str, Any]:
    """The create body of a node like ``raw``: its type, runtime, scheduling, network, labels, metadata."""
    return {key: raw[key] for key in _COPIED if key in raw}
