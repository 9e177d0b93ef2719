"""The per-VM metadata server answers like GCE's: flavor header required, long-poll on change."""

from __future__ import annotations

import asyncio

import aiohttp

from gcptui.remote.aio import within
from gcptui.remote.emulator.hosts.metadata import MetadataServer

URL = "http://{}/computeMetadata/v1/instance/preempted"


async def test_preempted_long_poll_returns_true_when_it_flips() -> None:
    server = MetadataServer({"instance/preempted": "FALSE"})
    address = await server.start("127.0.0.1")
    try:
        async with aiohttp.ClientSession(headers={"Metadata-Flavor": "Google"}) as http:
            async with http.get(URL.format(address)) as first:
                assert await first.text() == "FALSE" and first.headers["Metadata-Flavor"] == "Google"
                etag = first.headers["ETag"]
            poll = asyncio.ensure_future(
                http.get(URL.format(address), params={"wait_for_change": "true", "last_etag": etag})
            )
            await asyncio.sleep(0)  # let the request start; correctness does not depend on it (last_etag)
            assert not poll.done()
            await server.set("instance/preempted", "TRUE")
            async with await within(5, poll) as answer:
                assert await answer.text() == "TRUE"
            # A stale etag answers at once.
            async with http.get(
                URL.format(address), params={"wait_for_change": "true", "last_etag": etag}
            ) as again:
                assert await again.text() == "TRUE"
            async with http.get(
                URL.format(address), params={"wait_for_change": "true", "timeout_sec": "0.1"}
            ) as timed:
                assert await timed.text() == "TRUE"
    finally:
        await server.close()


async def test_requests_without_the_flavor_header_are_refused() -> None:
    server = MetadataServer({"instance/preempted": "FALSE"})
    address = await server.start("127.0.0.1")
    try:
        async with aiohttp.ClientSession() as http, http.get(URL.format(address)) as answer:
            assert answer.status == 403
    finally:
        await server.close()
