"""The emulator's fault controls: what the next calls (or a zone, or the price catalog) answer instead
of success, as GCE does when a service is off, a permission missing, a quota hit or a zone out of stock.
"""

from __future__ import annotations

from gcptui.remote.emulator.compute import faults as fault_kinds
from gcptui.remote.emulator.compute.faults import Fault
from gcptui.remote.emulator.emulator_assembly import EmulatorAssembly


class EmulatorFaults(EmulatorAssembly):
    """Faults queued or switched on for a started (or about to start) emulator."""

    def fail_next(self, fault: Fault) -> None:
        """Queue a fault built with ``remote.emulator.faults`` helpers or by hand."""
        self.faults.add(fault)

    def disable_service(self, method: str = "*", count: int = 1) -> None:
        """The next ``count`` matching calls answer 403 SERVICE_DISABLED."""
        self.faults.add(fault_kinds.service_disabled(self.project, method, count))

    def deny_permission(self, method: str = "*", count: int = 1) -> None:
        """The next ``count`` matching calls answer 403 permission denied."""
        self.faults.add(fault_kinds.permission_denied(self.project, method, count))

    def hide_project(self, method: str = "*", count: int = 1) -> None:
        """The next ``count`` matching calls answer 404 for the project."""
        self.faults.add(fault_kinds.project_not_found(self.project, method, count))

    def rate_limit(
        self, method: str = "*", count: int = 1, *, status: int = 403, per_user: bool = False
    ) -> None:
        """The next ``count`` matching calls answer a rate limit: 403 ``rateLimitExceeded`` (or 429)."""
        if status == 429:
            self.faults.add(fault_kinds.too_many_requests(method, count))
        else:
            self.faults.add(fault_kinds.rate_limited(self.project, method, count, per_user=per_user))

    def make_unreachable(self, *zones: str) -> None:
        """Aggregated lists report these zones ``UNREACHABLE`` (their VMs missing) until ``faults.clear()``."""
        self.faults.unreachable.update(zones)

    def stock_out(self, starts: int = 1) -> None:
        """The next ``starts`` starts end with ZONE_RESOURCE_POOL_EXHAUSTED (an operation error)."""
        self.faults.stockouts += starts

    def exhaust(self, *zones: str) -> None:
        """Every start and insert in these zones stocks out until ``faults.clear()`` (hours without
        Spot capacity, as GCE's zones sometimes are)."""
        self.faults.exhausted.update(zones)

    def catalog_unreachable(self, down: bool = True) -> None:
        """The price catalog answers 503 (prices fall back to the bundled table) until called with False."""
        self.catalog.down = down

    def calls(self, method: str) -> int:
        """How many times a REST method (e.g. ``globalOperations.aggregatedList``) was called."""
        return self.api.calls.get(method, 0) if self.api else 0
