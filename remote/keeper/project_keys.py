"""The keeper's SSH key in the project's ``ssh-keys`` metadata, as GCE's guest agent reads it
(``USER:KEY COMMENT`` per line), changed only with the metadata's current fingerprint: a concurrent
change (412) is read again and retried, never overwritten. Where OS Login is on, metadata keys do not
count: the keeper's service account then needs ``roles/compute.osAdminLogin`` (see the README)."""

from __future__ import annotations

from gcptui.remote.compute.backend import KeyEdit
from gcptui.remote.services import Services

KEY_COMMENT = "gcptui-keeper"


def _change(services: Services, edit: KeyEdit) -> bool:
    """Apply ``edit(lines) -> lines | None`` to ``ssh-keys``; False when it changed nothing."""
    return services.compute.backend("gce", "the keeper's SSH key").edit_project_ssh_keys(edit)


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
