"""An image of a disk (``images.insert`` with ``sourceDisk``), for ``vm create`` from a base whose boot
disk was made from neither an image nor a snapshot. GCE takes minutes to make one."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from gcptui.remote.errors import CloudError

if TYPE_CHECKING:
    from gcptui.remote.cloud.gce import GceClient

IMAGE_TIMEOUT = 1800.0


def image_name(base: str, when: datetime | None = None) -> str:
    """``BASE-gcptui-YYYYMMDD-HHMMSS``, cut to GCE's 63 characters (a letter first, no hyphen last)."""
    stamp = (when or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    suffix = f"-gcptui-{stamp}"
    return (base[: 63 - len(suffix)].rstrip("-") + suffix).lower()


def image_from_disk(
    gce: GceClient, zone: str, disk: str, name: str, *, timeout: float = IMAGE_TIMEOUT
) -> str:
    """Make image ``name`` of ``zones/ZONE/disks/DISK`` (``forceCreate``: the disk may be in use by a
    running VM) and wait until it is made; returns its URL for ``initializeParams.sourceImage``."""
    from google.cloud import compute_v1

    options = {"api_endpoint": gce.endpoint} if gce.endpoint != "https://compute.googleapis.com" else None
    images = compute_v1.ImagesClient(credentials=gce.credentials, client_options=options)
    operations = compute_v1.GlobalOperationsClient(credentials=gce.credentials, client_options=options)
    body = compute_v1.Image(name=name, source_disk=f"zones/{zone}/disks/{disk}")
    action = f"make image {name} of disk {disk}"
    with gce.errors(action, access="write", zone=zone):
        request = compute_v1.InsertImageRequest(project=gce.project, image_resource=body, force_create=True)
        operation = images.insert_unary(request=request, timeout=gce.timeout)
        deadline = time.monotonic() + timeout
        done = compute_v1.Operation.Status.DONE
        while operation.status != done:
            if time.monotonic() > deadline:
                raise CloudError(
                    f"{action} did not finish in {timeout:.0f} s: check `gcloud compute images list`"
                )
            began = time.monotonic()
            operation = operations.wait(project=gce.project, operation=operation.name, timeout=130.0)
            pause = gce.min_wait_pause - (time.monotonic() - began)
            if operation.status != done and pause > 0:
                time.sleep(pause)
        if list(operation.error.errors):
            raise CloudError(f"{action} failed: {operation.error.errors[0].message}")
    return f"projects/{gce.project}/global/images/{name}"
