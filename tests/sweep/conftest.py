"""Fixtures for sweeps: the emulator (thread flavour, for the CLI run as a subprocess)."""

from tests.helpers.emulator import emulator_thread

__all__ = ["emulator_thread"]
