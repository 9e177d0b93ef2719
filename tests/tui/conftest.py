from tests.helpers.emulator import emulator

__all__ = ["emulator"]
