from tests.helpers.gcs import fake_gcs  # noqa: F401 - the fixture
from tests.keepalive.conftest import emulator, fleet_factory  # noqa: F401 - the emulated Spot fleet
from tests.keeper.wheel_cache import _run_wheel_cache, shared_keeper_wheels  # noqa: F401 - one wheel cache a run
