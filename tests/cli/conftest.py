from tests.helpers.emulator import api_emulator, emulator, emulator_thread

__all__ = ["api_emulator", "emulator", "emulator_thread"]
