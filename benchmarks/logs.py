"""Log streaming into the headless TUI under load.

N streams (default 8) of R lines/s (default 2,000) for D seconds (default 20) flow into a
``LogsScreen`` run headless with the pilot; meanwhile keys are pressed and the key-press-to-screen
latency is measured (press + the next processed frame). Prints one JSON object as the last line:
lines produced, lines shown, latency p50/p95, peak RSS, the buffer bound, and where the CPU went:
the TUI process (split into frames, the flush/ingest timer and, over sshd, stream decoding) versus
the producers (writer processes, and sshd with its per-stream shell pollers), plus the load average.

Modes: ``sshd`` (default when OpenSSH sshd is installed): writer processes append to files that
``LogStream``s follow over a real sshd on 127.0.0.x, the whole path the app uses; ``inprocess``:
sources generate ``LogChunk``s directly (the TUI alone).

    python benchmarks/logs.py [--streams 8] [--rate 2000] [--duration 20] [--mode sshd|inprocess]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncssh  # noqa: E402
from bench_run import owned_run, quick, quick_flag  # noqa: E402
from textual import events  # noqa: E402
from textual.app import App  # noqa: E402
from textual.screen import Screen  # noqa: E402

from gcptui.remote.aio import within  # noqa: E402
from gcptui.remote.compute.ssh_exec import SshExecChannel  # noqa: E402
from gcptui.remote.models import ConnectionGetter  # noqa: E402
from gcptui.remote.telemetry.log_stream import LogChunk, LogEvent, LogNotice, LogStream  # noqa: E402
from gcptui.tui.logs.screen import LogsScreen, PaneSource  # noqa: E402

WRITER = r"""
import sys, time
path, rate, duration, tag = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
tick = 0.01
n = 0
start = time.monotonic()
with open(path, "a", buffering=1 << 16) as fh:
    while (now := time.monotonic()) - start < duration:
        due = int((now - start) * rate)
        if due > n:
            fh.write("".join(f"{tag} step {i:08d} loss {1.0 / (1 + i):.6f} lr 3.0e-04 samples/s 1234.5 epoch 1\n" for i in range(n, due)))
            fh.flush()
            n = due
        time.sleep(tick)
print(n)
"""


class CpuMeter:
    """Main-thread CPU time spent inside chosen functions (patched for the run), per call."""

    def __init__(self) -> None:
        self.calls: dict[str, list[float]] = {}
        self._restore: list[tuple[type, str, object]] = []

    def wrap(self, owner: type, name: str, label: str) -> None:
        original = getattr(owner, name)
        calls = self.calls.setdefault(label, [])

        def timed(*args: object, **kwargs: object) -> object:
            t0 = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                calls.append(time.thread_time() - t0)

        setattr(owner, name, timed)
        self._restore.append((owner, name, original))

    def restore(self) -> None:
        for owner, name, original in reversed(self._restore):
            setattr(owner, name, original)

    def total(self, label: str) -> float:
        return sum(self.calls.get(label, []))


def _percentile(values: list[float], pct: int) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, -(-pct * len(ordered) // 100) - 1)]


def _tree_cpu_s(root: int) -> float:
    """CPU seconds of a process and its descendants, reaped ones included (Linux /proc)."""
    stats: dict[int, tuple[int, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the command name: state ppid ... utime(14) stime(15) cutime(16) cstime(17), 1-based.
        stats[int(entry)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / tick)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0.0))[1]
        todo.extend(child for child, (ppid, _) in stats.items() if ppid == pid)
    return total


def _cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def _rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def inprocess_source(
    tag: str, rate: int, duration: float, produced: list[int]
) -> Callable[[], AsyncIterator[LogEvent]]:
    async def events() -> AsyncIterator[LogEvent]:
        yield LogNotice("following", "")
        n, start = 0, time.monotonic()
        while (now := time.monotonic()) - start < duration:
            due = int((now - start) * rate)
            if due > n:
                yield LogChunk(
                    [
                        f"{tag} step {i:08d} loss {1.0 / (1 + i):.6f} lr 3.0e-04 samples/s 1234.5 epoch 1"
                        for i in range(n, due)
                    ],
                    None,
                    0,
                )
                produced[0] += due - n
                n = due
            await asyncio.sleep(0.01)
        await asyncio.Event().wait()

    return events


def stream_opener(get: ConnectionGetter, path: Path, poll: float) -> Callable[[], AsyncIterator[LogEvent]]:
    """A source that follows ``path`` from its end over SSH's exec channel (a fresh stream per open)."""
    channel = SshExecChannel(get, lambda: "sshd")

    def open_stream() -> AsyncIterator[LogEvent]:
        return LogStream(channel, str(path), history_lines=0, poll_interval=poll).events()

    return open_stream


async def bench(args: argparse.Namespace) -> dict[str, object]:
    produced_counts = [[0] for _ in range(args.streams)]
    sshd = None
    writers: list[subprocess.Popen[str]] = []
    conns: list[asyncssh.SSHClientConnection] = []
    tmp = Path(tempfile.mkdtemp(prefix="gcptui-bench-"))
    try:
        if args.mode == "sshd":
            from tests.helpers.sshd import Sshd, make_client_key

            sshd = Sshd(directory=tmp / "sshd", host="127.0.0.250", client_key=make_client_key(tmp))
            sshd.setup()
            sshd.start()
            sources = []
            for k in range(args.streams):
                conn = await asyncssh.connect(
                    sshd.host,
                    port=sshd.port,
                    username=sshd.user,
                    client_keys=[str(sshd.client_key)],
                    known_hosts=str(sshd.known_hosts),
                )
                conns.append(conn)

                async def get(conn: asyncssh.SSHClientConnection = conn) -> asyncssh.SSHClientConnection:
                    return conn

                path = tmp / f"vm{k}.log"
                path.write_text("")
                sources.append(PaneSource(f"vm-{k}", stream_opener(get, path, args.poll)))
        else:
            sources = [
                PaneSource(
                    f"vm-{k}", inprocess_source(f"vm-{k}", args.rate, args.duration, produced_counts[k])
                )
                for k in range(args.streams)
            ]

        screen = LogsScreen(sources, buffer_lines=args.buffer, flush_interval=args.flush)
        app: App[None] = App()
        latencies: list[float] = []
        meter = CpuMeter()
        meter.wrap(Screen, "_compositor_refresh", "frames")
        meter.wrap(LogsScreen, "flush", "flush")
        meter.wrap(LogStream, "_handle", "decode")
        load_before = os.getloadavg()
        async with app.run_test(size=(240, 50)) as pilot:
            await app.push_screen(screen)
            if args.mode == "sshd":
                deadline = time.monotonic() + 15
                while not all(p.status == "following" for p in screen.panes) and time.monotonic() < deadline:
                    await pilot.pause(0.05)
            for label in meter.calls:
                meter.calls[label].clear()  # count the load window only
            cpu_self0, cpu_children0, wall0 = (
                _cpu_s(resource.RUSAGE_SELF),
                _cpu_s(resource.RUSAGE_CHILDREN),
                time.monotonic(),
            )
            sshd_cpu0 = (
                _tree_cpu_s(sshd.process.pid) if sshd is not None and sshd.process is not None else 0.0
            )
            if args.mode == "sshd":
                for k in range(args.streams):
                    writers.append(
                        subprocess.Popen(
                            [
                                sys.executable,
                                "-c",
                                WRITER,
                                str(tmp / f"vm{k}.log"),
                                str(args.rate),
                                str(args.duration),
                                f"vm-{k}",
                            ],
                            stdout=subprocess.PIPE,
                            text=True,
                        )
                    )
            # Key-press-to-screen: a key event goes in through the driver, as a keyboard's would; the
            # latency ends at the first frame composed after the toggle indicator shows its effect.
            # (pilot.press itself waits for the process to go idle, which never happens under load.)
            shown_at: list[float] = []
            shown = asyncio.Event()
            expect: list[str] = [""]
            display = app._display

            def timed_display(screen_: object, renderable: object) -> None:
                display(screen_, renderable)  # type: ignore[arg-type]
                if expect[0] and expect[0] in screen._indicator_text and not shown_at:
                    shown_at.append(time.perf_counter())
                    shown.set()

            app._display = timed_display  # type: ignore[method-assign,assignment]
            start = time.monotonic()
            toggles = [("w", "Wrap:On"), ("w", "Wrap:Off"), ("m", "Merged:On"), ("m", "Merged:Off")]
            k = 0
            while time.monotonic() - start < args.duration:
                await asyncio.sleep(0.25)
                key, effect = toggles[k % len(toggles)]
                shown_at.clear()
                shown.clear()
                expect[0] = effect
                t0 = time.perf_counter()
                app._driver.send_message(events.Key(key, key))  # type: ignore[union-attr]
                try:
                    await within(10, shown.wait())  # an event, not polling: no load of its own
                except TimeoutError:
                    pass
                expect[0] = ""
                if shown_at:
                    latencies.append((shown_at[0] - t0) * 1000)
                k += 1
            if args.mode == "sshd":
                for k, writer in enumerate(writers):
                    out, _ = await asyncio.to_thread(writer.communicate)
                    produced_counts[k][0] = int(out.strip() or 0)
            produced = sum(c[0] for c in produced_counts)
            load_end = time.monotonic()
            shown_at_end = sum(p.view.total_lines for p in screen.panes)
            sshd_cpu = (
                _tree_cpu_s(sshd.process.pid) - sshd_cpu0
                if sshd is not None and sshd.process is not None
                else 0.0
            )
            # Drain: everything produced must reach the panes.
            deadline = time.monotonic() + 20
            while sum(p.view.total_lines for p in screen.panes) < produced and time.monotonic() < deadline:
                await pilot.pause(0.05)
            catch_up = time.monotonic() - load_end
            lines_shown = sum(p.view.total_lines for p in screen.panes)
            buffered = max(p.view.line_count for p in screen.panes)
            wall = time.monotonic() - wall0
            tui_cpu = _cpu_s(resource.RUSAGE_SELF) - cpu_self0
            writers_cpu = _cpu_s(resource.RUSAGE_CHILDREN) - cpu_children0  # reaped writers
        meter.restore()
        latencies.sort()
        return {
            "benchmark": "logs",
            "mode": args.mode,
            "streams": args.streams,
            "rate_per_stream": args.rate,
            "duration_s": args.duration,
            "lines_produced": produced,
            "lines_shown": lines_shown,
            "all_shown": lines_shown == produced,
            "lines_shown_when_load_ended": shown_at_end,
            "catch_up_s": round(catch_up, 2),
            "key_latency_ms_p50": round(statistics.median(latencies), 1) if latencies else None,
            "key_latency_ms_p95": round(_percentile(latencies, 95) or 0, 1) if latencies else None,
            "key_presses": len(latencies),
            "peak_rss_mib": round(_rss_mib(), 1),
            "buffer_lines": args.buffer,
            "max_lines_in_a_pane": buffered,
            "cpus": os.cpu_count(),
            "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
            # CPU seconds over the load window plus catch-up (wall_s): where the 2 cores went.
            "wall_s": round(wall, 1),
            "cpu_s_tui_process": round(tui_cpu, 2),
            "cpu_s_tui_frames": round(meter.total("frames"), 2),
            "cpu_s_tui_flush": round(meter.total("flush"), 2),
            "cpu_s_tui_stream_decode": round(meter.total("decode"), 2),
            "cpu_s_producer_writers": round(writers_cpu, 2),
            "cpu_s_producer_sshd": round(sshd_cpu, 2),
            "frames": len(meter.calls.get("frames", [])),
            "frame_cpu_ms_p50": _ms(
                statistics.median(meter.calls["frames"]) if meter.calls.get("frames") else None
            ),
            "frame_cpu_ms_p95": _ms(_percentile(meter.calls.get("frames", []), 95)),
        }
    finally:
        for writer in writers:
            if writer.poll() is None:
                writer.kill()
        for conn in conns:
            conn.close()
        if sshd is not None:
            sshd.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--rate", type=int, default=2000, help="lines per second per stream")
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--buffer", type=int, default=10_000)
    parser.add_argument("--flush", type=float, default=0.1, help="UI flush interval (s)")
    parser.add_argument("--poll", type=float, default=0.1, help="remote poll interval (s)")
    from tests.helpers.sshd import sshd_available

    parser.add_argument(
        "--mode", choices=["sshd", "inprocess"], default="sshd" if sshd_available() else "inprocess"
    )
    parser.add_argument("--profile", type=Path, help="write a pyinstrument HTML profile of the run here")
    quick_flag(parser)
    args = quick(parser.parse_args(), streams=2, rate=500, duration=4.0)
    if args.profile is None:
        with owned_run("logs"):
            result = asyncio.run(bench(args))
        print(json.dumps(result))
        return
    from pyinstrument import Profiler

    profiler = Profiler(async_mode="disabled")
    with profiler:
        result = asyncio.run(bench(args))
    args.profile.write_text(profiler.output_html())
    print(profiler.output_text(unicode=False, color=False, show_all=False), file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
