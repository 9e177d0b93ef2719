"""A per-VM metadata server, the part of GCE's that a preemption-aware job reads.

Answers ``GET /computeMetadata/v1/instance/preempted`` (with ``Metadata-Flavor: Google``) and its
``?wait_for_change=true`` long-poll; the VM's shell finds it through ``GCE_METADATA_HOST``. Guest
attributes are written as the guest agent writes them, ``PUT .../instance/guest-attributes/NS/KEY``
with the value as the body, by anything on the VM: what the Compute and TPU APIs then serve is the
machine's own word (a hostile VM can write anything there, as on GCE).
"""

from __future__ import annotations

import asyncio
import hashlib

import aiohttp
from aiohttp import web

from gcptui.remote.aio import within

FLAVOR = {"Metadata-Flavor": "Google"}
GUEST_ATTRIBUTES = "instance/guest-attributes/"
MAX_GUEST_ATTRIBUTE = 256 * 1024  # GCE's limit on one guest attribute's value


class MetadataServer:
    """Serves one VM's metadata on its own address while the VM runs."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = dict(values)  # path under /computeMetadata/v1/ -> value
        self.guest_attributes: dict[tuple[str, str], str] = {}  # (namespace, key) -> value, as written
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.address = ""
        self._closing = False
        self.silent = False  # a fault knob: requests hang unanswered until it speaks again

    async def silence(self, silent: bool) -> None:
        """Stop answering (requests hang, as a metadata server gone quiet), or answer again."""
        self.silent = silent
        async with self._changed:
            self._changed.notify_all()

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
        app.router.add_put(
            "/computeMetadata/v1/instance/guest-attributes/{namespace}/{key}", self._put_attribute
        )
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

    async def _put_attribute(self, request: web.Request) -> web.Response:
        if request.headers.get("Metadata-Flavor") != "Google":
            return web.Response(status=403, text="Missing Metadata-Flavor:Google header.\n", headers=FLAVOR)
        body = await request.content.read(MAX_GUEST_ATTRIBUTE + 1)
        if len(body) > MAX_GUEST_ATTRIBUTE:
            return web.Response(status=400, text="Guest attribute value too large.\n", headers=FLAVOR)
        namespace, key = request.match_info["namespace"], request.match_info["key"]
        self.guest_attributes[(namespace, key)] = body.decode("utf-8", errors="replace")
        return web.Response(text="", headers=FLAVOR)

    async def _get(self, request: web.Request) -> web.Response:
        if request.headers.get("Metadata-Flavor") != "Google":
            return web.Response(status=403, text="Missing Metadata-Flavor:Google header.\n", headers=FLAVOR)
        if self.silent:
            async with self._changed:
                await self._changed.wait_for(lambda: self._closing or not self.silent)
        path = request.match_info["path"].rstrip("/")
        if path.startswith(GUEST_ATTRIBUTES):
            namespace, _, key = path.removeprefix(GUEST_ATTRIBUTES).partition("/")
            if (namespace, key) not in self.guest_attributes:
                return web.Response(status=404, text="Not Found\n", headers=FLAVOR)
            return web.Response(text=self.guest_attributes[(namespace, key)], headers=FLAVOR)
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


async def publish_guest_attribute(address: str, namespace: str, key: str, value: str) -> None:
    """What the guest agent does once the VM is up: ``PUT`` one guest attribute to the metadata server."""
    url = f"http://{address}/computeMetadata/v1/{GUEST_ATTRIBUTES}{namespace}/{key}"
    async with aiohttp.ClientSession() as session:
        async with session.put(
            url, data=value.encode(), headers=FLAVOR, timeout=aiohttp.ClientTimeout(10)
        ) as reply:
            reply.raise_for_status()


def _etag(value: str) -> str:
    return hashlib.sha1(value.encode()).hexdigest()[:16]
