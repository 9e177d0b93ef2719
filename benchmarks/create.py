"""``vm create --from BASE``: wall time of creating N VMs at once vs one, on the strict emulator.

Each creation is an insert (validated as GCE validates it), waiting for the operation, polling until
RUNNING with an address, and pinning the host key from guest attributes: the same ``VmCreator`` the
CLI uses. ``--boot-seconds`` sets how long an emulated VM takes to boot (GCE: tens of seconds).
Prints one JSON object as its last line.

    python benchmarks/create.py [--counts 1,2,4,8] [--boot-seconds 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_run import owned_run, quick, quick_flag  # noqa: E402

ZONE = "us-central1-a"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--counts", default="1,2,4,8")
    parser.add_argument("--boot-seconds", type=float, default=3.0)
    quick_flag(parser)
    args = quick(parser.parse_args(), counts="1,4", boot_seconds=1.0)
    counts = [int(c) for c in args.counts.split(",")]

    from gcptui.remote.cloud.create import CreateOptions
    from gcptui.remote.cloud.images import image_from_disk
    from gcptui.remote.compute.gce.copies import VmCreator, plan_create  # the GCE backend's copier
    from gcptui.remote.config import load_config
    from gcptui.remote.emulator.thread import EmulatorThread
    from tests.cli.test_vm_create import IMAGE, _base_body

    results: dict[str, float] = {}
    with (
        owned_run("create"),
        tempfile.TemporaryDirectory() as tmp,
        EmulatorThread(Path(tmp) / "emu", boot_seconds=args.boot_seconds, stop_seconds=0.1) as emu,
    ):
        config = load_config(str(emu.write_config(Path(tmp) / "gcptui.toml")))
        from gcptui.remote.cloud.fleet import FleetSource

        source = FleetSource(config)
        gce = source.gce()
        # The base's boot image first, as a user would have made it (the emulator starts with none).
        emu.add_instance("seed", ZONE, status="TERMINATED")
        image_from_disk(gce, ZONE, "seed", IMAGE.rsplit("/", 1)[-1])
        gce.insert(ZONE, _base_body())
        plan = plan_create(gce, source.snapshot().find("base-gpu"), CreateOptions())  # type: ignore[arg-type]
        creator = VmCreator(gce, config, lambda name, step: None, poll_seconds=0.5)
        for count in counts:
            names = [f"n{count}-{i}" for i in range(count)]
            start = time.perf_counter()
            made = creator.create_many(plan, names)
            results[str(count)] = round(time.perf_counter() - start, 2)
            failed = [n for n, r in made.items() if isinstance(r, Exception)]
            if failed:
                raise SystemExit(f"creation failed: {failed}")
            print(f"{count} VM(s): {results[str(count)]:.2f} s", file=sys.stderr)
    one = results[str(counts[0])]
    print(json.dumps({
        "benchmark": "vm_create_parallel", "boot_seconds": args.boot_seconds, "wall_seconds": results,
        "ratio_to_one": {k: round(v / one, 2) for k, v in results.items()},
    }))  # fmt: skip


if __name__ == "__main__":
    main()
