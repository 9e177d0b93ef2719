"""One emulator per module, reached through Google's own client libraries (REST transports) and the
official ``kubernetes`` client, as a user's script or another tool would reach Google."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from google.api_core.client_options import ClientOptions
from google.oauth2.credentials import Credentials

from gcptui.remote.emulator.thread import EmulatorThread
from tests.helpers.emulator import FAST


@pytest.fixture(scope="module")
def emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorThread]:
    """An API-only emulator shared by the module's tests (each test names its own resources)."""
    with EmulatorThread(tmp_path_factory.mktemp("emulator"), ssh=False, **FAST) as running:
        yield running


def client_kwargs(emu: EmulatorThread) -> dict[str, Any]:
    """What a user passes to point a GAPIC client at another endpoint: its REST transport, the
    endpoint, and a bearer token."""
    return {
        "transport": "rest",
        "credentials": Credentials(token=emu.token),
        "client_options": ClientOptions(api_endpoint=emu.endpoint),
    }
