"""SSH pool and job control timings against real OpenSSH sshd servers, beside OpenSSH's own client.

    python benchmarks/ssh_jobs.py [--hosts 32] [--repeat 5]

Starts one sshd per host on its own 127.0.0.x address (own host key, own known-hosts file), so the
32-host figures pay 32 real handshakes, as a fleet does. Measures, as medians over ``--repeat`` runs:

- ``connect``: a fresh ``SshPool`` connecting to 1 host, and to all hosts at once (wall time);
- ``status``: ``job status`` round trip over the pool's warm connections, for 1 and for all hosts;
- ``cold_status``: a fresh pool, connect and ``job status`` (what a ``gcptui job status`` CLI pays);
- ``exec_true``: ``true`` over a warm connection (the per-command cost of sshd + the login shell);
- ``script_status_local``: the VM-side status script run locally, without SSH;
- ``openssh_true``: ``ssh HOST true`` with OpenSSH's client, for 1 and all hosts at once.

Every job runs ``sleep 600`` in a temporary remote home, so ``status`` reads a running job; all are
killed at the end. Prints progress to stderr and ONE JSON object as the last line of stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_run import owned_run, quick, quick_flag  # noqa: E402

from gcptui.remote.compute.ssh_exec import pool_reach  # noqa: E402
from gcptui.remote.config import JobConfig, SshConfig  # noqa: E402
from gcptui.remote.jobs.runner import JobRunner  # noqa: E402
from gcptui.remote.ssh.pool import SshPool  # noqa: E402
from gcptui.remote.ssh.target import SshTarget  # noqa: E402
from tests.helpers.sshd import Sshd, make_client_key, sshd_available  # noqa: E402

SSH = SshConfig(connect_timeout=30.0, keepalive_seconds=15.0)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def timed(action: Callable[[], Awaitable[object]], repeat: int) -> dict[str, float]:
    """Median and min wall time of ``action`` in milliseconds."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        await action()
        samples.append((time.perf_counter() - start) * 1000)
    return {"median_ms": round(statistics.median(samples), 1), "min_ms": round(min(samples), 1)}


async def openssh_true(servers: list[Sshd]) -> None:
    procs = [
        await asyncio.create_subprocess_exec(
            *server.ssh_args(), "true", stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
        )
        for server in servers
    ]
    for proc in procs:
        _, err = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"ssh failed: {err.decode().strip()}")


def script_status_local(home: Path, repeat: int) -> dict[str, float]:
    """The VM-side ``status`` alone, run here without SSH: what our script adds to a round trip."""
    script = ROOT / "remote" / "vm" / "gcptui-job.sh"
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(["sh", str(script), "status"], env={**os.environ, "HOME": str(home)}, check=True,
                       capture_output=True)  # fmt: skip
        samples.append((time.perf_counter() - start) * 1000)
    return {"median_ms": round(statistics.median(samples), 1), "min_ms": round(min(samples), 1)}


async def bench(hosts: int, repeat: int, workdir: Path) -> dict[str, object]:
    (workdir / "client").mkdir()
    key = make_client_key(workdir / "client")
    servers = [
        Sshd(directory=workdir / f"sshd{i}", host=f"127.0.0.{100 + i}", client_key=key) for i in range(hosts)
    ]
    for server in servers:
        server.setup()
        server.start()
    log(f"{hosts} sshd servers up")
    targets = [
        SshTarget(f"vm{i}", s.host, s.port, s.user, s.client_key, s.known_hosts)
        for i, s in enumerate(servers)
    ]
    home = workdir / "home"
    (home / "project").mkdir(parents=True)
    job = JobConfig(command="sleep 600", stop_grace_seconds=2)
    one, fleet = targets[:1], targets
    out: dict[str, object] = {}
    try:

        async def connect(which: list[SshTarget]) -> None:
            async with SshPool(SSH) as pool:
                await asyncio.gather(*(pool.connection(t) for t in which))

        async def cold_status(which: list[SshTarget]) -> None:
            async with SshPool(SSH) as pool:
                results = await JobRunner(job, "~/project", remote_home=str(home)).run_all(
                    "status", [pool_reach(pool, t) for t in which]
                )
                assert all(r.ok for r in results), [str(r.error) for r in results if not r.ok]

        async with SshPool(SSH) as pool:
            # One home for all: every host is this machine, so one job is "the" job everywhere.
            runner = JobRunner(job, "~/project", remote_home=str(home))
            started = await runner.run_all("start", [pool_reach(pool, t) for t in one])
            assert started[0].ok, started[0].error
            await runner.run_all(
                "status", [pool_reach(pool, t) for t in fleet]
            )  # warm: connect and install the supervisor

            async def status(which: list[SshTarget]) -> None:
                results = await runner.run_all("status", [pool_reach(pool, t) for t in which])
                assert all(r.ok and r.value and r.value.state == "running" for r in results)

            async def exec_true(which: list[SshTarget]) -> None:
                conns = [await pool.connection(t) for t in which]
                await asyncio.gather(*(c.run("true", check=True) for c in conns))

            out["script_status_local"] = script_status_local(home, repeat * 4)
            for label, which in (("1", one), (str(hosts), fleet)):
                log(f"measuring {label} host(s)")
                out[f"connect_{label}"] = await timed(lambda w=which: connect(w), repeat)
                out[f"status_{label}"] = await timed(lambda w=which: status(w), repeat)
                out[f"cold_status_{label}"] = await timed(lambda w=which: cold_status(w), repeat)
                out[f"exec_true_{label}"] = await timed(lambda w=which: exec_true(w), repeat)
                srv = servers[: len(which)]
                out[f"openssh_true_{label}"] = await timed(lambda s=srv: openssh_true(s), repeat)
            await runner.run_all("kill", [pool_reach(pool, t) for t in one])
    finally:
        for server in servers:
            server.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=5)
    quick_flag(parser)
    args = quick(parser.parse_args(), hosts=4, repeat=3)
    if not sshd_available():
        sys.exit("OpenSSH sshd is not installed (apt-get install openssh-server)")
    with owned_run("ssh_jobs"), tempfile.TemporaryDirectory(prefix="gcptui-bench-ssh-") as tmp:
        figures = asyncio.run(bench(args.hosts, args.repeat, Path(tmp)))
    result = {
        "benchmark": "ssh_jobs",
        "hosts": args.hosts,
        "repeat": args.repeat,
        "setup": f"{args.hosts} OpenSSH sshd on 127.0.0.100+ (loopback), asyncssh client vs OpenSSH ssh",
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        **figures,
        # What a command over the pool costs beside a fresh OpenSSH ssh, in the same run.
        **{
            f"exec_over_openssh_{n}": round(
                figures[f"exec_true_{n}"]["median_ms"] / figures[f"openssh_true_{n}"]["median_ms"], 3
            )  # type: ignore[index]
            for n in ("1", str(args.hosts))
        },
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
