"""Run an ``Emulator`` on its own event loop in a background thread, for synchronous callers
(CLI tests, ``gcptui demo``). Every call is marshalled onto the emulator's loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from gcptui.remote.emulator.compute.fleet import Timing
from gcptui.remote.emulator.compute.state import Vm
from gcptui.remote.emulator.demo import InstanceSpec, add_fleet
from gcptui.remote.emulator.emulator import Emulator
from gcptui.remote.emulator.gke.cluster import Cluster
from gcptui.remote.emulator.tpu.state import TpuNode

T = TypeVar("T")


class EmulatorThread:
    """``with EmulatorThread(tmp_path) as emu: emu.add_instance(...); emu.write_config(...)``."""

    def __init__(self, root: Path, **options: Any) -> None:
        self.emulator = Emulator(root, **options)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- running ---------------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> EmulatorThread:
        """Start the loop thread and the emulator on it; returns once it serves."""
        ready = threading.Event()

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            ready.set()
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=main, name="gcptui-emulator", daemon=True)
        self._thread.start()
        ready.wait(timeout)
        self.run(self.emulator.start(), timeout)
        return self

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = 60.0) -> T:
        """Run a coroutine on the emulator's loop and wait for its result."""
        if self._loop is None:
            raise RuntimeError("EmulatorThread.start() first")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call a plain function on the emulator's loop (the fleet is not thread-safe)."""

        async def invoke() -> T:
            return function(*args, **kwargs)

        return self.run(invoke())

    def close(self, timeout: float = 60.0) -> None:
        """Stop the emulator (every VM process killed) and the loop thread."""
        if self._loop is None:
            return
        try:
            self.run(self.emulator.close(), timeout)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join(timeout)
            self._loop = None
            self._thread = None

    def __enter__(self) -> EmulatorThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the Emulator's API, synchronously -------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return self.emulator.endpoint

    @property
    def ssh_port(self) -> int:
        return self.emulator.ssh_port

    @property
    def project(self) -> str:
        return self.emulator.project

    @property
    def timing(self) -> Timing:
        return self.emulator.timing

    def add_instance(self, name: str, zone: str = "us-central1-a", **options: Any) -> Vm:
        """See ``Emulator.add_instance``."""
        return self.call(self.emulator.add_instance, name, zone, **options)

    def add_fleet(self, specs: list[InstanceSpec]) -> None:
        """Add ``demo_fleet(n)``-style specs."""
        self.call(add_fleet, self.emulator, specs)

    def instance(self, name: str) -> Vm:
        return self.call(self.emulator.instance, name)

    def ssh_port_of(self, name: str) -> int:
        return self.call(self.emulator.ssh_port_of, name)

    def address(self, name: str) -> str | None:
        return self.call(self.emulator.address, name)

    def wait_for_status(self, name: str, status: str | None, timeout: float = 30.0) -> None:
        self.run(self.emulator.wait_for_status(name, status, timeout), timeout + 5)

    def settle(self, timeout: float = 60.0) -> None:
        """Until no boot, stop or preemption is in flight."""
        self.run(self.emulator.settle(timeout), timeout + 5)

    def preempt(self, name: str) -> None:
        self.call(self.emulator.preempt, name)

    def add_tpu(self, name: str, zone: str = "us-central2-b", **options: Any) -> TpuNode:
        """See ``Emulator.add_tpu``."""
        return self.call(self.emulator.add_tpu, name, zone, **options)

    def tpu(self, name: str) -> TpuNode:
        return self.call(self.emulator.tpu, name)

    def wait_for_tpu(self, name: str, state: str | None, timeout: float = 30.0) -> None:
        self.run(self.emulator.wait_for_tpu(name, state, timeout), timeout + 5)

    def preempt_tpu(self, name: str) -> None:
        self.call(self.emulator.preempt_tpu, name)

    def add_gke_cluster(
        self, name: str = "training", location: str = "us-central1-a", **options: Any
    ) -> Cluster:
        """See ``Emulator.add_gke_cluster``."""
        return self.run(self.emulator.add_gke_cluster(name, location, **options))

    def preempt_gke_node(self, node: str) -> None:
        self.call(self.emulator.preempt_gke_node, node)

    @property
    def kubeconfig(self) -> Path:
        return self.emulator.kubeconfig

    def disable_service(self, method: str = "*", count: int = 1) -> None:
        self.call(self.emulator.disable_service, method, count)

    def deny_permission(self, method: str = "*", count: int = 1) -> None:
        self.call(self.emulator.deny_permission, method, count)

    def hide_project(self, method: str = "*", count: int = 1) -> None:
        self.call(self.emulator.hide_project, method, count)

    @property
    def token(self) -> str:
        return self.emulator.token

    @property
    def token_file(self) -> Path:
        return self.emulator.token_file

    def rate_limit(self, method: str = "*", count: int = 1, **options: Any) -> None:
        self.call(self.emulator.rate_limit, method, count, **options)

    def exhaust(self, *zones: str) -> None:
        self.call(self.emulator.exhaust, *zones)

    def make_unreachable(self, *zones: str) -> None:
        self.call(self.emulator.make_unreachable, *zones)

    def catalog_unreachable(self, down: bool = True) -> None:
        self.call(self.emulator.catalog_unreachable, down)

    def stock_out(self, starts: int = 1) -> None:
        self.call(self.emulator.stock_out, starts)

    def calls(self, method: str) -> int:
        return self.call(self.emulator.calls, method)

    def write_config(self, path: Path | None = None, **options: Any) -> Path:
        return self.emulator.write_config(path, **options)
