"""Compute Engine VMs: the backend over ``gcptui.remote.cloud`` (the Compute API's clients)."""
