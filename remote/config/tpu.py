"""``[tpu]``: which zones' Cloud TPU nodes join the fleet."""

from __future__ import annotations

from pydantic import Field

from gcptui.remote.config.base import _Section


class TpuConfig(_Section):
    """Cloud TPU VMs (the Cloud TPU API's nodes) in the fleet, beside the GCE instances.

    The project, credentials and endpoint are ``[gcp]``'s (the emulator serves the TPU API on the
    same endpoint, as ``tpu.googleapis.com`` is to ``compute.googleapis.com``)."""

    zones: list[str] = Field(
        default=[],
        description=(
            "Zones whose TPU nodes are listed, e.g. `us-central2-b`. Empty: none (the TPU API lists "
            "one zone at a time, so every zone would cost a call on each refresh)."
        ),
    )
