"""Preemptions that Google's APIs offer no call for (a Spot TPU node, a Vertex AI job's Spot worker),
asked of an emulator's control path: ``POST {[gcp] control_endpoint}/{resource name}:preempt``.

Only where the config names one (``gcptui emulator`` writes it) do the TPU and Vertex AI backends
grant ``SIMULATE_MAINTENANCE`` on a Spot row; on GCP ``vm preempt`` reaches what Google can act out
(Spot VMs and GKE nodes, through Compute Engine's ``simulateMaintenanceEvent``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gcptui.remote.errors import CloudError
from gcptui.remote.safe_text import one_line

if TYPE_CHECKING:
    from gcptui.remote.cloud.fleet import FleetSource
    from gcptui.remote.config import Config

TIMEOUT = 30.0


def control_endpoint(config: Config) -> str:
    """``[gcp] control_endpoint`` ("" without one, or without ``[gcp]``)."""
    return config.gcp.control_endpoint if config.gcp is not None else ""


def ask_to_preempt(fleet: FleetSource, resource: str, body: dict[str, Any] | None = None) -> None:
    """Ask the control path to preempt ``resource`` now (one-line ``CloudError`` when it refuses),
    with the credentials of the process's Google calls (the emulator's bearer token)."""
    endpoint = control_endpoint(fleet.config)
    if not endpoint:
        raise CloudError(
            f"cannot preempt {resource}: no [gcp] control_endpoint (only an emulator offers one)"
        )
    from google.auth.transport.requests import AuthorizedSession

    session = AuthorizedSession(fleet.reader().credentials)
    try:
        response = session.post(f"{endpoint}/{resource}:preempt", json=body or {}, timeout=TIMEOUT)
    except OSError as err:  # requests' connection errors are OSErrors
        raise CloudError(f"the control endpoint {endpoint} did not answer ({err.__class__.__name__}): is the emulator running?") from None  # fmt: skip
    if response.status_code >= 400:
        try:
            message = str(response.json().get("error", {}).get("message", ""))
        except (ValueError, AttributeError):
            message = ""
        raise CloudError(f"the emulator refused to preempt it: {one_line(message)[:300] or f'HTTP {response.status_code}'}")  # fmt: skip
