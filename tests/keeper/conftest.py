from tests.helpers.gcs import fake_gcs  # noqa: F401 - the fixture
from tests.keepalive.conftest import emulator, fleet_factory  # noqa: F401 - the emulated Spot fleet
