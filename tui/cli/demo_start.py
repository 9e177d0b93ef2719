"""The demo's head start: its training job starts while the TUI itself is still starting.

The trainer needs ~3 s to its first step line here, most of it ``import torch`` and the Dynamo
import that building a ``torch.optim`` optimizer triggers. Started by the app once its first fleet
list showed the VM running, the job began ~2.6 s after launch; started from this thread as soon as
the emulated VM has booted (before Textual is even imported), it begins at ~1.3-1.5 s and the
trainer imports torch on the other core while the TUI draws its first frames. The same steps as
``gcptui job start NAME``: a sync of the project, then the detached start.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from gcptui.remote.config import Config
from gcptui.remote.errors import GcptuiError
from gcptui.remote.services import Services

log = logging.getLogger(__name__)


class HeadStart:
    """``HeadStart(config, name, wait_running).start()``; ``done`` is set once it ended, ``error``
    says why it failed (None: the job runs)."""

    def __init__(self, config: Config, name: str, wait_running: Callable[[str], None]) -> None:
        self.config = config
        self.name = name
        self._wait_running = wait_running
        self.done = threading.Event()
        self.error: str | None = None

    def start(self) -> HeadStart:
        threading.Thread(target=self._main, name=f"demo job start on {self.name}", daemon=True).start()
        return self

    def _main(self) -> None:
        try:
            self._wait_running(self.name)
            asyncio.run(self._start())
        except (GcptuiError, OSError, TimeoutError) as err:
            self.error = str(err)
        except Exception as err:  # a bug: the app falls back to starting the job itself
            log.exception("the demo's head start failed")
            self.error = f"unexpected {type(err).__name__}: {err}"
        finally:
            self.done.set()

    async def _start(self) -> None:
        services = Services(self.config)
        try:
            (instance,) = await services.resolve([self.name], running=True)
            session = services.sync_session(instance)
            try:
                await session.full_sync()
            finally:
                await session.close()
            await services.jobs.start(services.reach(instance))
        finally:
            await services.close()
