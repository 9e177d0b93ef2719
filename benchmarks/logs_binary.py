"""The logs view following a flood of newline-free binary over a real sshd (issue 13's memory bound).

A writer appends ``--megabytes`` (default 400) of random bytes with no newline to a file that a
``LogStream`` follows over OpenSSH sshd on 127.0.0.x into a headless ``LogsScreen``. At 90 % of it
(``--esc-at``), Esc is pressed and the time until the screen has left is measured (the view must answer while the flood
is still pouring in). Reports the peak RSS of this process (the whole TUI side), the bytes received, the
throughput and the load average; one JSON object on the last line.

    python benchmarks/logs_binary.py [--megabytes 400]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncssh  # noqa: E402
import psutil  # noqa: E402
from bench_run import owned_run, quick, quick_flag  # noqa: E402
from textual import events  # noqa: E402
from textual.app import App  # noqa: E402

from gcptui.remote.aio import within  # noqa: E402
from gcptui.remote.compute.ssh_exec import SshExecChannel  # noqa: E402
from gcptui.remote.telemetry.log_stream import LogChunk, LogEvent, LogNotice, LogStream  # noqa: E402
from gcptui.tui.logs.screen import LogsScreen, PaneSource  # noqa: E402

WRITER = r"""
import os, sys
path, total = sys.argv[1], int(sys.argv[2])
block = os.urandom(1 << 20).replace(b"\n", b"\x00")
with open(path, "ab") as out:
    for n in range(total):
        out.write(block)
        out.flush()
"""


class FloodApp(App[None]):
    def __init__(self, source: PaneSource) -> None:
        super().__init__()
        self.source = source

    def on_mount(self) -> None:
        self.push_screen(LogsScreen([self.source]))


async def bench(megabytes: int, esc_at: float) -> dict[str, object]:
    from tests.helpers.sshd import Sshd, make_client_key

    me = psutil.Process(os.getpid())
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        sshd = Sshd(directory=tmp / "sshd", host="127.0.0.251", client_key=make_client_key(tmp))
        sshd.setup()
        sshd.start()
        log = tmp / "output.log"
        log.write_bytes(b"")
        try:
            conn = await asyncssh.connect(
                sshd.host, port=sshd.port, username=sshd.user, client_keys=[str(sshd.client_key)],
                known_hosts=str(sshd.known_hosts),
            )  # fmt: skip

            async def get() -> asyncssh.SSHClientConnection:
                return conn

            received = [0]
            following = asyncio.Event()

            def source() -> AsyncIterator[LogEvent]:
                async def events() -> AsyncIterator[LogEvent]:
                    channel = SshExecChannel(get, lambda: sshd.host)
                    async for event in LogStream(
                        channel, str(log), history_lines=0, poll_interval=0.05
                    ).events():
                        if isinstance(event, LogChunk):
                            received[0] = event.offset
                        elif isinstance(event, LogNotice) and event.kind == "following":
                            following.set()
                        yield event

                return events()

            app = FloodApp(PaneSource("flood", source))
            peak = me.memory_info().rss
            async with app.run_test(size=(160, 40)) as pilot:
                await within(30, following.wait())
                started = time.monotonic()
                writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log), str(megabytes)])
                mark = int((megabytes << 20) * esc_at)
                while received[0] < mark:
                    peak = max(peak, me.memory_info().rss)
                    await pilot.pause(0.05)
                until_esc_s = time.monotonic() - started
                pressed = time.monotonic()
                # As a terminal delivers it (the pilot's press also waits for the app to go idle,
                # which a flood never lets it do): the key into the driver, then watch the screen.
                app._driver.send_message(events.Key("escape", None))  # type: ignore[union-attr]
                while isinstance(app.screen, LogsScreen):
                    await asyncio.sleep(0.002)
                esc_ms = (time.monotonic() - pressed) * 1000
                peak = max(peak, me.memory_info().rss)
                writer.wait()
            conn.close()
        finally:
            sshd.stop()
    return {
        "benchmark": "logs_binary",
        "megabytes": megabytes,
        "received_before_esc_mb": round(received[0] / (1 << 20), 1),
        "throughput_mb_s": round(received[0] / (1 << 20) / until_esc_s, 1),
        "esc_ms": round(esc_ms, 1),
        "peak_rss_mb": round(peak / 1e6, 1),
        "goal": {"peak_rss_mb": 500, "esc_ms": 200},
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=400)
    parser.add_argument("--esc-at", type=float, default=0.9, help="press Esc once this share has arrived")
    quick_flag(parser)
    args = quick(parser.parse_args(), megabytes=20)
    with owned_run("logs_binary"):
        result = asyncio.run(bench(args.megabytes, args.esc_at))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
