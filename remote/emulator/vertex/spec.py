"""Checking a ``CustomJob`` body as Vertex AI does, before anything runs.

Vertex answers a bad job with 400 INVALID_ARGUMENT naming the field; the emulator checks what the
workers' launch depends on: a display name, at least one worker pool, each with a machine type, a
replica count (the first pool's exactly 1: it is the chief), and a container or Python package spec.
"""

from __future__ import annotations

import re
from typing import Any

from gcptui.remote.emulator.core.errors import ApiError

STRATEGIES = {"STRATEGY_UNSPECIFIED", "ON_DEMAND", "LOW_COST", "STANDARD", "SPOT", "FLEX_START"}
_DURATION = re.compile(r"(\d+)(?:\.(\d{1,9}))?s")
MAX_REPLICAS = 64  # the emulator's own bound: each replica is a local process


def _invalid(field: str, message: str = "Required field is not set.") -> ApiError:
    return ApiError(400, f"List of found errors:\t1.Field: {field}; Message: {message}\t", "badRequest")


def duration_seconds(value: object, field: str) -> float | None:
    """``"3600s"`` -> 3600.0; None when absent; 400 when malformed."""
    if value is None or value == "":
        return None
    match = _DURATION.fullmatch(str(value))
    if match is None:
        raise _invalid(field, f"Invalid duration {value!r}.")
    return int(match.group(1)) + float(f"0.{match.group(2) or 0}")


def check_job(body: Any) -> None:
    """Raise the 400 Vertex answers for a ``CustomJob`` it would not accept."""
    if not isinstance(body, dict):
        raise ApiError(400, "Invalid JSON payload received.", "badRequest")
    if not isinstance(body.get("displayName"), str) or not body["displayName"].strip():
        raise _invalid("custom_job.display_name")
    spec = body.get("jobSpec")
    if not isinstance(spec, dict):
        raise _invalid("custom_job.job_spec")
    pools = spec.get("workerPoolSpecs")
    if not isinstance(pools, list) or not pools or not isinstance(pools[0], dict) or not pools[0]:
        raise _invalid("custom_job.job_spec.worker_pool_specs")
    for index, pool in enumerate(pools):
        where = f"custom_job.job_spec.worker_pool_specs[{index}]"
        if not isinstance(pool, dict) or not pool:
            continue  # an empty pool is a placeholder (Vertex allows {} after the first)
        machine = pool.get("machineSpec")
        if not isinstance(machine, dict) or not machine.get("machineType"):
            raise _invalid(f"{where}.machine_spec.machine_type")
        try:
            replicas = int(pool.get("replicaCount") or 0)
        except (TypeError, ValueError):
            raise _invalid(f"{where}.replica_count", "Invalid value.") from None
        if replicas < 1 or replicas > MAX_REPLICAS:
            raise _invalid(f"{where}.replica_count", "Replica count must be positive.")
        if index == 0 and replicas != 1:
            raise _invalid(f"{where}.replica_count", "The first worker pool must have exactly 1 replica.")
        container, package = pool.get("containerSpec"), pool.get("pythonPackageSpec")
        if isinstance(container, dict):
            if not container.get("imageUri"):
                raise _invalid(f"{where}.container_spec.image_uri")
        elif isinstance(package, dict):
            if not package.get("executorImageUri"):
                raise _invalid(f"{where}.python_package_spec.executor_image_uri")
            if not package.get("pythonModule"):
                raise _invalid(f"{where}.python_package_spec.python_module")
        else:
            raise _invalid(f"{where}.task", "One of container_spec or python_package_spec is required.")
    scheduling = spec.get("scheduling") or {}
    if not isinstance(scheduling, dict):
        raise _invalid("custom_job.job_spec.scheduling", "Invalid value.")
    if scheduling.get("strategy", "STRATEGY_UNSPECIFIED") not in STRATEGIES:
        raise _invalid("custom_job.job_spec.scheduling.strategy", "Invalid value.")
    duration_seconds(scheduling.get("timeout"), "custom_job.job_spec.scheduling.timeout")
