"""One cache of the keeper's dependency wheels for the whole test run (what a user's second deploy
finds in ~/.cache/gcptui/keeper-wheels): the first test that deploys gathers them (`pip download`,
some 15 s here), the others reuse them. Each test's own HOME links its cache folder to it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def _run_wheel_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.getbasetemp()
    # Under xdist every worker's base is a sibling in one folder of the run: they share the cache.
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "keeper-wheels"
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture(autouse=True)
def shared_keeper_wheels(_run_wheel_cache: Path, own_home: Path) -> None:
    link = Path(os.environ["XDG_CACHE_HOME"]) / "gcptui" / "keeper-wheels"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists():
        link.symlink_to(_run_wheel_cache, target_is_directory=True)
