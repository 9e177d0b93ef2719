"""A per-VM metadata server, the part of GCE's that a preemption-aware job reads.

Answers ``GET /computeMetadata/v1/instance/preempted`` (with ``Metadata-Flavor: Google``) and its
``?wait_for_change=true`` long-poll; the VM's shell finds it through ``GCE_METADATA_HOST``.
"""

from __future__ import annotations

import asyncio
import hashlib

from aiohttp import web

from gcptui.remote.aio import within

FLAVOR = {"Metadata-Flavor": "Google"}


class MetadataServer:
    """Serves one VM's metadata on its own address while the VM runs."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = dict(values)  # path under /computeMetadata/v1/ -> value
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.address = ""
        self._closing = False

    async def set(self, path: str, value: str) -> None:
        """Change a value and wake the long-polls waiting on it."""
        self.values[path] = value
        async with self._changed:
            self._changed.notify_all()

    async def start(self, host: str) -> str:
        """Listen on ``host`` (a free port); returns ``host:port`` for ``GCE_METADATA_HOST``."""
        app = web.Application()
        app.router.add_get("/", self._root)
        app.router.add_get("/computeMetadata/v1/{path:.*}", self._get)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.address = f"{host}:{port}"
        return self.address

    async def close(self) -> None:
        if self._runner is not None:
            self._closing = True
            async with self._changed:
                self._changed.notify_all()
            await self._runner.cleanup()
            self._runner = None

    async def _root(self, request: web.Request) -> web.Response:
        return web.Response(text="computeMetadata/\n", headers=FLAVOR)

    async def _get(self, request: web.Request) -> web.Response:
        if request.headers.get("Metadata-Flavor") != "Google":
            return web.Response(status=403, text="Missing Metadata-Flavor:Google header.\n", headers=FLAVOR)
        path = request.match_info["path"].rstrip("/")
        if path not in self.values:
            return web.Response(status=404, text="Not Found\n", headers=FLAVOR)
        if request.query.get("wait_for_change", "").lower() == "true":
            await self._wait_for_change(
                path, request.query.get("last_etag"), request.query.get("timeout_sec")
            )
        value = self.values.get(path, "")
        return web.Response(
            text=value, headers={**FLAVOR, "ETag": _etag(value)}, content_type="application/text"
        )

    async def _wait_for_change(self, path: str, last_etag: str | None, timeout_sec: str | None) -> None:
        # Without last_etag GCE waits for the next change from the value as it is now.
        start = last_etag or _etag(self.values[path])
        timeout = float(timeout_sec) if timeout_sec else None
        try:
            async with self._changed:
                await within(
                    timeout,
                    self._changed.wait_for(lambda: self._closing or _etag(self.values[path]) != start),
                )
        except TimeoutError:
            pass


def _etag(value: str) -> str:
    return hashlib.sha1(value.encode()).hexdigest()[:16]
