"""A local stand-in for Google Compute Engine: the REST API the real client speaks, and VMs reachable
over SSH on loopback addresses. Backs ``gcptui demo``, ``gcptui emulator`` and the tests."""

from gcptui.remote.emulator.emulator import Emulator

__all__ = ["Emulator"]
