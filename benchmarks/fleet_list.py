"""Fleet listing at scale: ``gcptui ls --json`` and the TUI's first frame with 1,000 instances.

Starts the Compute API emulator (API only) with 1,000 instances over 10 zones, then measures:
- ``gcptui ls --json`` wall time (process start to exit, median of N runs) and, when gcloud is
  installed, ``gcloud compute instances list --format=json`` against the same emulator, the two
  interleaved run by run (same load for both), with the ratio of the medians;
- time from launching the TUI to its first painted frame, and whether the Compute client library
  had been imported by then (it must not: the import alone takes over a second);
- time from launch until the fleet table holds all 1,000 rows.
Prints one JSON object as its last line.

    python benchmarks/fleet_list.py [--instances 1000] [--zones 10] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_run import owned_run, quick, quick_flag  # noqa: E402


def tui_child(config: str, t0: float, expected: int) -> None:
    """Runs in a fresh interpreter: report first frame and full table times, then exit."""
    from gcptui.remote.config import load_config
    from gcptui.tui.app import GcptuiApp
    from gcptui.tui.messages import FleetRefreshed

    result: dict[str, object] = {}

    class Probe(GcptuiApp):
        def on_mount(self) -> None:
            # Textual runs GcptuiApp.on_mount too (handlers run per class in the MRO).
            self.call_after_refresh(self.first_frame)

        def first_frame(self) -> None:
            result["first_frame_s"] = time.time() - t0
            result["compute_imported_at_first_frame"] = "google.cloud.compute_v1" in sys.modules

        def on_fleet_refreshed(self, message: FleetRefreshed) -> None:
            # GcptuiApp's own handler (run for each class in the MRO) fills the table.
            self.call_after_refresh(self.table_full)

        def table_full(self) -> None:
            if self.fleet_screen.table.row_count >= expected:
                result.setdefault("table_full_s", time.time() - t0)
                self.exit()

    Probe(load_config(config), refresh_seconds=3600).run(headless=True, size=(200, 50))
    print(json.dumps(result))


def gcloud_env(root: Path, endpoint: str, token_file: Path, project: str) -> dict[str, str]:
    """A throwaway gcloud configuration pointed at the emulator (as tests/emulator's conformance test)."""
    env = {
        **os.environ,
        "CLOUDSDK_CONFIG": str(root / "gcloud"),
        "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
        "CLOUDSDK_CORE_DISABLE_USAGE_REPORTING": "1",
        "CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK": "1",
    }
    env.pop("CLOUDSDK_CORE_PROJECT", None)
    for key, value in (
        ("api_endpoint_overrides/compute", f"{endpoint}/compute/v1/"),
        ("auth/access_token_file", str(token_file)),
        ("core/project", project),
    ):
        subprocess.run(["gcloud", "config", "set", key, value], env=env, capture_output=True, check=True)
    return env


def timed(command: list[str], env: dict[str, str], expected: int) -> float:
    """Wall seconds of one run whose stdout must be a JSON list of ``expected`` items."""
    start = time.perf_counter()
    out = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    elapsed = time.perf_counter() - start
    assert len(json.loads(out.stdout)) == expected, out.stderr
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--zones", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tui-child", nargs=3, metavar=("CONFIG", "T0", "EXPECTED"))
    quick_flag(parser)
    args = quick(parser.parse_args(), instances=200, zones=4, runs=1)
    if args.tui_child:
        tui_child(args.tui_child[0], float(args.tui_child[1]), int(args.tui_child[2]))
        return

    from gcptui.remote.emulator.demo import large_fleet
    from gcptui.remote.emulator.thread import EmulatorThread

    with (
        owned_run("fleet_list"),
        tempfile.TemporaryDirectory() as tmp,
        EmulatorThread(Path(tmp) / "emu", ssh=False) as emulator,
    ):
        emulator.add_fleet(large_fleet(args.instances, args.zones))
        config = str(emulator.write_config(Path(tmp) / "gcptui.toml"))
        # Own HOME: the price cache (~/.gcptui/prices.json) is this run's; one untimed run fills it.
        env = {**os.environ, "HOME": str(Path(tmp) / "home")}
        ls_command = [sys.executable, "-m", "gcptui.tui", "ls", "--json", "--config", config]
        timed(ls_command, env, args.instances)
        gcloud = shutil.which("gcloud")
        genv = {}
        if gcloud:
            genv = gcloud_env(Path(tmp), emulator.endpoint, emulator.token_file, emulator.project)
            gcloud_command = [gcloud, "compute", "instances", "list", "--format=json"]
            timed(gcloud_command, genv, args.instances)
        ls_times, gcloud_times = [], []
        for _ in range(args.runs):
            ls_times.append(timed(ls_command, env, args.instances))
            if gcloud:
                gcloud_times.append(timed(gcloud_command, genv, args.instances))
        tui_runs = []
        for _ in range(args.runs):
            t0 = time.time()
            out = subprocess.run(
                [sys.executable, __file__, "--tui-child", config, str(t0), str(args.instances)],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            tui_runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        import_start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import google.cloud.compute_v1"], check=True)
        import_s = time.perf_counter() - import_start
        load = os.getloadavg()[0]
    gcloud_median = statistics.median(gcloud_times) if gcloud_times else None

    print(
        json.dumps(
            {
                "benchmark": "fleet_list",
                "instances": args.instances,
                "zones": args.zones,
                "runs": args.runs,
                "ls_json_s_median": round(statistics.median(ls_times), 3),
                "ls_json_s_min": round(min(ls_times), 3),
                "gcloud_list_json_s_median": round(gcloud_median, 3) if gcloud_median else None,
                "ls_over_gcloud": (
                    round(statistics.median(ls_times) / gcloud_median, 3) if gcloud_median else None
                ),
                "load_average_1m": round(load, 2),
                "tui_first_frame_s_median": round(statistics.median(r["first_frame_s"] for r in tui_runs), 3),
                "tui_table_full_s_median": round(statistics.median(r["table_full_s"] for r in tui_runs), 3),
                "compute_imported_before_first_frame": any(
                    r["compute_imported_at_first_frame"] for r in tui_runs
                ),
                "python_import_compute_v1_s": round(import_s, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
