from tests.keeper.wheel_cache import _run_wheel_cache, shared_keeper_wheels  # noqa: F401 - one wheel cache a run
