"""The keeper's SSH key in the project's ``ssh-keys`` metadata, as GCE's guest agent reads it
(``USER:KEY COMMENT`` per line), changed only with the metadata's current fingerprint: a concurrent
change (412) is read again and retried, never overwritten. Where OS Login is on, metadata keys do not
count: the keeper's service account then needs ``roles/compute.osAdminLogin`` (see the README)."""

from __future__ import annotations

from typing import Any

from gcptui.remote.errors import GcptuiError
from gcptui.remote.services import Services

KEY_COMMENT = "gcptui-keeper"
ATTEMPTS = 5


def _client(services: Services) -> tuple[Any, Any, str]:
    from google.cloud import compute_v1

    gce = services.fleet.gce()
    endpoint = services.config.gcp.api_endpoint if services.config.gcp is not None else ""
    options = {"api_endpoint": endpoint} if endpoint else None
    projects = compute_v1.ProjectsClient(credentials=gce.credentials, client_options=options)
    return compute_v1, projects, gce.project


def _change(services: Services, edit: Any) -> bool:
    """Apply ``edit(lines) -> lines | None`` to ``ssh-keys``; False when it changed nothing."""
    from google.api_core import exceptions as api

    compute_v1, projects, project = _client(services)
    for _ in range(ATTEMPTS):
        try:
            current = projects.get(project=project).common_instance_metadata
            items = {item.key: item.value for item in current.items}
            lines = [line for line in items.get("ssh-keys", "").splitlines() if line.strip()]
            changed = edit(lines)
            if changed is None:
                return False
            items["ssh-keys"] = "\n".join(changed)
            metadata = compute_v1.Metadata(
                fingerprint=current.fingerprint,
                items=[compute_v1.Items(key=k, value=v) for k, v in items.items()],
            )
            # GCE's guest agents pick the key up within seconds; the keeper's first SSH retries meanwhile.
            projects.set_common_instance_metadata(project=project, metadata_resource=metadata)
            return True
        except api.PreconditionFailed:
            continue  # someone else changed the metadata meanwhile: read it again
        except api.GoogleAPICallError as err:
            raise GcptuiError(
                f"cannot change the project's ssh-keys metadata ({err.code}): your account needs "
                "compute.projects.setCommonInstanceMetadata"
            ) from None
    raise GcptuiError("the project's metadata kept changing: run `gcptui keeper deploy` again")


def add_project_key(services: Services, user: str, public: str) -> bool:
    """Authorize ``public`` for ``user`` on every VM of the project; False when it already was."""
    entry = f"{user}:{' '.join(public.split()[:2])} {KEY_COMMENT}"

    def edit(lines: list[str]) -> list[str] | None:
        return None if entry in lines else [*lines, entry]

    return _change(services, edit)


def remove_project_keys(services: Services) -> bool:
    """Remove every key this keeper added (comment ``gcptui-keeper``)."""

    def edit(lines: list[str]) -> list[str] | None:
        kept = [line for line in lines if not line.endswith(" " + KEY_COMMENT)]
        return None if kept == lines else kept

    return _change(services, edit)
