"""SSH keys in GCE's ``ssh-keys`` metadata, as its guest agent reads them (``USER:KEY COMMENT`` per
line): an instance's own (beside the project's) or the project's. Each change is made with the
metadata's current fingerprint: a concurrent change (412) is read again and retried, never
overwritten. Where OS Login is on, metadata keys do not count."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gcptui.remote.compute.backend import KeyEdit
from gcptui.remote.errors import GcptuiError

if TYPE_CHECKING:
    from gcptui.remote.cloud.gce import GceClient

ATTEMPTS = 5


def _options(api_endpoint: str) -> dict[str, str] | None:
    return {"api_endpoint": api_endpoint} if api_endpoint else None


def _edited(metadata: Any, edit: KeyEdit, compute_v1: Any) -> Any | None:
    """``metadata`` with ``edit`` applied to its ``ssh-keys``, at its fingerprint; None: unchanged."""
    items = {item.key: item.value for item in metadata.items}
    lines = [line for line in items.get("ssh-keys", "").splitlines() if line.strip()]
    changed = edit(lines)
    if changed is None:
        return None
    items["ssh-keys"] = "\n".join(changed)
    return compute_v1.Metadata(
        fingerprint=metadata.fingerprint, items=[compute_v1.Items(key=k, value=v) for k, v in items.items()]
    )


def edit_instance_keys(gce: GceClient, api_endpoint: str, name: str, zone: str, edit: KeyEdit) -> bool:
    """Apply ``edit`` to instance ``name``'s ``ssh-keys``; False: nothing changed."""
    from google.api_core import exceptions as api
    from google.cloud import compute_v1

    instances = compute_v1.InstancesClient(credentials=gce.credentials, client_options=_options(api_endpoint))
    for _ in range(ATTEMPTS):
        try:
            current = instances.get(project=gce.project, zone=zone, instance=name).metadata
            metadata = _edited(current, edit, compute_v1)
            if metadata is None:
                return False
            instances.set_metadata(
                project=gce.project, zone=zone, instance=name, metadata_resource=metadata
            ).result()
            return True
        except api.PreconditionFailed:
            continue  # someone else changed its metadata meanwhile: read it again
        except api.GoogleAPICallError as err:
            raise GcptuiError(
                f"cannot change {name}'s ssh-keys metadata ({err.code}): the account needs "
                "compute.instances.setMetadata (roles/compute.instanceAdmin.v1)"
            ) from None
    raise GcptuiError(f"{name}'s metadata kept changing: try again")


def edit_project_keys(gce: GceClient, api_endpoint: str, edit: KeyEdit) -> bool:
    """Apply ``edit`` to the project's ``ssh-keys``; False when it changed nothing."""
    from google.api_core import exceptions as api
    from google.cloud import compute_v1

    projects = compute_v1.ProjectsClient(credentials=gce.credentials, client_options=_options(api_endpoint))
    for _ in range(ATTEMPTS):
        try:
            current = projects.get(project=gce.project).common_instance_metadata
            metadata = _edited(current, edit, compute_v1)
            if metadata is None:
                return False
            # GCE's guest agents pick the key up within seconds; the keeper's first SSH retries meanwhile.
            projects.set_common_instance_metadata(project=gce.project, metadata_resource=metadata)
            return True
        except api.PreconditionFailed:
            continue  # someone else changed the metadata meanwhile: read it again
        except api.GoogleAPICallError as err:
            raise GcptuiError(
                f"cannot change the project's ssh-keys metadata ({err.code}): your account needs "
                "compute.projects.setCommonInstanceMetadata"
            ) from None
    raise GcptuiError("the project's metadata kept changing: run `gcptui keeper deploy` again")
