"""Live sync against OpenSSH sshd on loopback, with ``rsync -a --delete`` over the same sshd as baseline.

Run: ``python benchmarks/sync.py [--files 7000] [--mb 180] [--edits 200]``. Progress goes to stderr;
the last line of stdout is one JSON object with every figure. See docs/BENCHMARKS.md.

``--wan --vms N`` syncs to N VMs behind one shared uplink (benchmarks/sync_fleet.py).
``--noop-ignored FILES`` times a cold no-op resync of a tree whose data/ (95%) is excluded.

``--wan`` puts a WAN link in front of the sshd (tests/helpers/wan.py, in its own process: 25 ms
each way and 50 Mbit/s per direction unless ``--delay-ms``/``--mbit`` say otherwise); gcptui and the
baseline, then ``rsync -az --delete`` (compression on, as users run it over a WAN), both go through it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncssh  # noqa: E402
from bench_run import owned_run, quick, quick_flag  # noqa: E402

from gcptui.remote.compute.ssh_exec import SshExecChannel  # noqa: E402
from gcptui.remote.ssh.pool import ENCRYPTION_ALGS  # noqa: E402
from gcptui.remote.sync import SyncSession  # noqa: E402
from tests.helpers.sshd import Sshd, make_client_key  # noqa: E402
from tests.helpers.wan import add_known_host, spawn_wan_proxy  # noqa: E402


@dataclass(frozen=True)
class Link:
    """How both clients reach the sshd: directly, or through the WAN proxy."""

    sshd: Sshd
    host: str
    port: int
    rsync_flags: str  # "-a" on loopback, "-az" over the WAN

    def ssh_command(self) -> str:
        args = self.sshd.ssh_args()[:-1]
        args[args.index("-p") + 1] = str(self.port)
        return " ".join(args)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def generate_tree(
    root: Path, files: int, total_mb: int, seed: int = 1, text: bool = False
) -> tuple[int, int]:
    """A deterministic ML-repo-like tree: many small sources, a few large binaries (incompressible).

    The small files hold random bytes unless ``text``: then Python-like lines (compressible ~4x,
    as source code is), generated from a seeded vocabulary so that no two files are alike.
    """
    rng = random.Random(seed)
    large = max(1, files // 70)  # ~1.4% of the files carry ~75% of the bytes
    small = files - large
    small_bytes = total_mb * 1_000_000 // 4
    large_bytes = total_mb * 1_000_000 - small_bytes
    total = 0
    for i in range(small):
        rel = Path(f"src/pkg{i % 40}/mod{(i // 40) % 12}/file{i}.py")
        size = max(1, int(rng.expovariate(1 / (small_bytes / small))))
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_source_text(rng, size) if text else rng.randbytes(size))
        total += size
    for i in range(large):
        path = root / f"assets/blob{i}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        size = large_bytes // large
        path.write_bytes(rng.randbytes(size))
        total += size
    (root / ".gitignore").write_text("__pycache__/\n*.pyc\n")
    return files + 1, total


WORDS = "def return self import torch tensor batch loss model optimizer step config path data for in if else None".split()


def _source_text(rng: random.Random, size: int) -> bytes:
    """``size`` bytes of Python-looking lines: identifiers, numbers and indentation."""
    lines, n = [], 0
    while n < size:
        line = "    " * rng.randrange(3) + " ".join(
            rng.choice(WORDS) if rng.random() < 0.7 else f"v{rng.randrange(10_000)}"
            for _ in range(rng.randrange(2, 9))
        )
        lines.append(line)
        n += len(line) + 1
    return ("\n".join(lines) + "\n").encode()[:size]


def rsync(link: Link, source: Path, dest: Path) -> float:
    """One ``rsync -a[z] --delete`` run over OpenSSH to the same sshd (and link); seconds."""
    started = time.perf_counter()
    subprocess.run(
        ["rsync", link.rsync_flags, "--delete", "-e", link.ssh_command(), f"{source}/",
         f"{link.sshd.user}@{link.host}:{dest}/"],
        check=True,
    )  # fmt: skip
    return time.perf_counter() - started


def burst(root: Path, count: int, round_: int) -> list[Path]:
    """Rewrite ``count`` existing small files with new content (same selection each round)."""
    changed = []
    for i in range(count):
        path = root / f"src/pkg{i % 40}/mod{(i // 40) % 12}/file{i}.py"
        # A size of its own each round: rsync's quick check (size and whole-second mtime) skipped a
        # same-size rewrite within the second of its last copy, and its tree then differed.
        path.write_bytes(f"burst {round_} {i}\n".encode() * (20 + round_ % 7))
        changed.append(path)
    return changed


async def connect(link: Link) -> asyncssh.SSHClientConnection:
    """A connection as the product's SSH pool makes it: its cipher order (AES-GCM first) included.
    (asyncssh's default, ChaCha20, costs ~21 % more client CPU and ~11 % more on the VM side.)"""
    sshd = link.sshd
    return await asyncssh.connect(
        link.host, port=link.port, username=sshd.user,
        client_keys=[str(sshd.client_key)], known_hosts=str(sshd.known_hosts),
        encryption_algs=ENCRYPTION_ALGS,
    )  # fmt: skip


async def initial_rounds(link: Link, source: Path, vm: Path, rounds: int, ledgers: list[str]) -> dict:
    """The initial sync, ``rounds`` times into fresh dests, alternating who goes first with rsync.

    Medians: on this shared machine one run's figure swings by 2x with what other processes did to
    the disk just before (ext4 without a journal skips inodes deleted in the last minute on every
    create). Round 0 lands in ``vm/rsync`` and ``vm/gcptui``, which the later phases reuse. Nothing
    is deleted until the end: mass deletions would slow the next round's creates.
    """
    ours, theirs = [], []
    for i in range(rounds):
        for who in ("rsync", "gcptui") if i % 2 == 0 else ("gcptui", "rsync"):
            dest = vm / (who if i == 0 else f"{who}-{i}")
            # Flush earlier runs' dirty pages now, not on the next run's clock.
            subprocess.run(["sync"], check=False)
            if who == "rsync":
                theirs.append(rsync(link, source, dest))
                log(f"  rsync  {theirs[-1]:.3f} s")
                continue
            started = time.perf_counter()
            conn = await connect(link)
            session = SyncSession(
                source, str(dest), SshExecChannel(lambda c=conn: _ready(c), lambda: "bench"), name="bench"
            )
            await session.full_sync()
            ours.append(time.perf_counter() - started)
            log(f"  gcptui {ours[-1]:.3f} s")
            if session._agent is not None:
                ledgers.append(session._agent.ledger_path)
            await session.close()
            conn.close()
            if not _same_tree(source, dest):
                raise AssertionError(f"{dest} differs from the source")
    mine, base = statistics.median(ours), statistics.median(theirs)
    return {
        "initial_s": round(mine, 3),
        "rsync_initial_s": round(base, 3),
        "initial_ratio": round(mine / base, 3),
        "initial_runs_s": [round(x, 3) for x in ours],
        "rsync_initial_runs_s": [round(x, 3) for x in theirs],
    }


def generate_ignored_tree(root: Path, files: int, ignored_share: float = 0.95) -> int:
    """``files`` small files, ``ignored_share`` of them under ``data/`` (which ``data/**`` ignores):
    a project beside its dataset. Returns how many are synced."""
    ignored = int(files * ignored_share)
    for i in range(files):
        # The dataset flat in data/, as downloaded shards often are: a nested one was skipped
        # already (data/** excludes each subfolder whole), a flat one was listed file by file.
        rel = f"data/part{i}.bin" if i < ignored else f"src/pkg{i % 50}/file{i}.py"
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"%d\n" % i)
    return files - ignored


async def noop_ignored(link: Link, work: Path, files: int, ledgers: list[str], rounds: int = 5) -> dict:
    """A cold no-op resync (a new session, as the next ``gcptui sync``) of a tree whose dataset
    ``data/**`` excludes, against ``rsync -a[z]`` with the same exclude; medians, alternating."""
    source, vm = work / "ignored-source", work / "ignored-vm"
    log(f"generating {files} files, 95% under data/ ...")
    synced = generate_ignored_tree(source, files)
    vm.mkdir()
    exclude = ["data/**"]
    flags = ["-az", "--delete", "--exclude", "data/**"]  # the baseline: rsync -az, same exclude

    def rsync_once() -> float:
        started = time.perf_counter()
        subprocess.run(
            ["rsync", *flags, "-e", link.ssh_command(), f"{source}/", f"{link.sshd.user}@{link.host}:{vm / 'rsync'}/"],
            check=True,
        )  # fmt: skip
        return time.perf_counter() - started

    async def ours_once() -> float:
        started = time.perf_counter()
        conn = await connect(link)
        session = SyncSession(
            source, str(vm / "gcptui"), SshExecChannel(lambda: _ready(conn), lambda: "bench"), exclude=exclude
        )
        result = await session.full_sync()
        elapsed = time.perf_counter() - started
        if session._agent is not None:
            ledgers.append(session._agent.ledger_path)
        await session.close()
        conn.close()
        if result.bytes and rounds_done:
            raise AssertionError("a no-op resync sent file data")
        return elapsed

    rounds_done = 0
    rsync_once()
    await ours_once()  # the first syncs: both trees land
    rounds_done = 1
    ours, theirs = [], []
    for i in range(rounds):
        for who in ("rsync", "gcptui") if i % 2 == 0 else ("gcptui", "rsync"):
            if who == "rsync":
                theirs.append(rsync_once())
            else:
                ours.append(await ours_once())
        log(f"  gcptui {ours[-1]:.3f} s  rsync {theirs[-1]:.3f} s")
    mine, base = statistics.median(ours), statistics.median(theirs)
    return {
        "benchmark": "sync-noop-ignored",
        "tree_files": files,
        "synced_files": synced,
        "exclude": exclude,
        "baseline": f"rsync {' '.join(flags)}",
        "noop_s": round(mine, 3),
        "rsync_noop_s": round(base, 3),
        "noop_ratio": round(mine / base, 3),
        "noop_runs_s": [round(x, 3) for x in ours],
        "rsync_noop_runs_s": [round(x, 3) for x in theirs],
        "load": _load(),
    }


async def main(args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="gcptui-sync-bench-"))
    ledgers: list[str] = []  # the VM-side ledgers sync wrote (loopback: this machine's home)
    vm: Path | None = None
    sshd = Sshd(directory=work / "sshd", host="127.0.0.77", client_key=make_client_key(work))
    sshd.setup()
    sshd.start()
    proxy = None
    if args.wan and not args.vms:  # --vms puts its own shared-uplink proxy in front (sync_fleet.py)
        proxy = spawn_wan_proxy(
            sshd.host, sshd.port, host="127.0.0.78", delay_ms=args.delay_ms, mbit=args.mbit
        )
        add_known_host(str(sshd.known_hosts), proxy.host, proxy.port, sshd.host, sshd.port)
        link = Link(sshd, proxy.host, proxy.port, "-az")
    else:
        link = Link(sshd, sshd.host, sshd.port, "-a")
    try:
        if args.noop_ignored:
            return await noop_ignored(link, work, args.noop_ignored, ledgers)
        if args.vms:
            from benchmarks.sync_fleet import fleet

            source = work / "source"
            log(f"generating {args.files} files / {args.mb} MB ...")
            n_files, n_bytes = generate_tree(source, args.files, args.mb, text=args.text)
            vm = Path(tempfile.mkdtemp(prefix="vm-", dir=args.vm_dir)) if args.vm_dir else work / "vm"
            vm.mkdir(exist_ok=True)
            figures = await fleet(args, sshd, source, vm, ledgers)
            return {"benchmark": "sync-wan-fleet", "tree_files": n_files, "tree_mb": round(n_bytes / 1e6, 1),
                    "text": args.text, **figures, "load": _load()}  # fmt: skip
        source = work / "source"
        log(f"generating {args.files} files / {args.mb} MB ...")
        n_files, n_bytes = generate_tree(source, args.files, args.mb, text=args.text)
        # --vm-dir puts the VM side elsewhere, e.g. on tmpfs to take the shared disk out of the figures.
        vm = Path(tempfile.mkdtemp(prefix="vm-", dir=args.vm_dir)) if args.vm_dir else work / "vm"
        vm.mkdir(exist_ok=True)
        rsync_dest, sync_dest = vm / "rsync", vm / "gcptui"
        subprocess.run(["sync"], check=False)
        log(f"initial sync (connection included): {args.initial_rounds} rounds alternating with rsync")
        initial = await initial_rounds(link, source, vm, args.initial_rounds, ledgers)
        if args.initial_only:
            return {"benchmark": "sync-initial-wan" if args.wan else "sync-initial", "text": args.text, "tree_files": n_files, "tree_mb": round(n_bytes / 1e6, 1),
                    "initial_rounds": args.initial_rounds, **initial, "load": _load()}  # fmt: skip

        log("rsync: no-op ...")
        rsync_noop = statistics.median(rsync(link, source, rsync_dest) for _ in range(3))

        log("gcptui: no-op ...")
        conn = await connect(link)
        session = SyncSession(
            source, str(sync_dest), SshExecChannel(lambda: _ready(conn), lambda: "bench"), name="bench"
        )
        await session.full_sync()  # starts the agent: the warm figures below reuse it
        noop_warm = statistics.median([await _timed(session.full_sync()) for _ in range(3)])
        noop_cold = []
        for _ in range(3):
            t = time.perf_counter()
            c = await connect(link)
            s2 = SyncSession(source, str(sync_dest), SshExecChannel(lambda c=c: _ready(c), lambda: "bench"))
            result = await s2.full_sync()
            noop_cold.append(time.perf_counter() - t)
            assert result.bytes == 0, "a no-op resync sent file data"
            await s2.close()
            c.close()
        await session.close()

        log("following: single-file edits ...")
        follow = SyncSession(
            source, str(sync_dest), SshExecChannel(lambda: _ready(conn), lambda: "bench"), name="bench"
        )
        task = asyncio.create_task(follow.follow())
        while follow.state != "in_sync":
            await asyncio.sleep(0.01)
        latencies = []
        edited, remote_edited = source / "src/pkg0/mod0/file0.py", sync_dest / "src/pkg0/mod0/file0.py"
        for i in range(args.edits):
            payload = f"edit {i}\n".encode() * (1 + i % 50)
            t = time.perf_counter()
            edited.write_bytes(payload)
            while _read(remote_edited) != payload:
                await asyncio.sleep(0.0005)
            latencies.append((time.perf_counter() - t) * 1000)
            await asyncio.sleep(0.01 + (i % 7) / 1000)
        latencies.sort()

        # The machine may be shared: alternate our bursts with rsync's and keep medians.
        log(f"following: {args.burst}-file bursts, alternating with rsync ...")
        ours, theirs, from_first = [], [], []
        identical = True
        for round_ in range(1, 2 * args.rounds + 1, 2):
            t0 = time.perf_counter()
            # Written from another thread, as an editor or `git checkout` writes from another process.
            changed = await asyncio.to_thread(burst, source, args.burst, round_)
            t_written = time.perf_counter()
            expected = {p.relative_to(source): p.read_bytes() for p in changed}
            while not all(_read(sync_dest / rel) == data for rel, data in expected.items()):
                await asyncio.sleep(0.005)
            t_done = time.perf_counter()
            ours.append(t_done - t_written)
            from_first.append(t_done - t0)
            await follow.barrier()
            identical = identical and _same_tree(source, sync_dest)
            follow.pause()  # rsync's turn: its writes must not race ours
            burst(source, args.burst, round_ + 1)
            theirs.append(rsync(link, source, rsync_dest))
            follow.resume()
            await follow.barrier()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        conn.close()
        identical = identical and _same_tree(source, rsync_dest)
        burst_s, burst_first_s, rsync_burst = (statistics.median(x) for x in (ours, from_first, theirs))
    finally:
        if proxy is not None:
            proxy.stop()
        sshd.stop()
        shutil.rmtree(work, ignore_errors=True)
        if args.vm_dir and vm is not None:
            shutil.rmtree(vm, ignore_errors=True)
        for ledger in ledgers:
            for suffix in ("", ".journal"):
                Path(ledger + suffix).unlink(missing_ok=True)

    def p(q: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 1)

    wan = {"rtt_ms": 2 * args.delay_ms, "mbit": args.mbit, "baseline": "rsync -az"} if args.wan else {}
    return {
        "benchmark": "sync-wan" if args.wan else "sync",
        **wan,
        "text": args.text,
        "tree_files": n_files,
        "tree_mb": round(n_bytes / 1e6, 1),
        "edit_visible_ms_p50": p(0.50),
        "edit_visible_ms_p99": p(0.99),
        "edits": len(latencies),
        "initial_rounds": args.initial_rounds,
        **initial,
        "noop_s": round(statistics.median(noop_cold), 3),
        "noop_warm_s": round(noop_warm, 3),
        "rsync_noop_s": round(rsync_noop, 3),
        "noop_ratio": round(statistics.median(noop_cold) / rsync_noop, 3),
        "noop_warm_ratio": round(noop_warm / rsync_noop, 3),
        "burst_files": args.burst,
        "burst_s": round(burst_s, 3),
        "burst_from_first_write_s": round(burst_first_s, 3),
        "rsync_burst_s": round(rsync_burst, 3),
        "burst_ratio": round(burst_s / rsync_burst, 3),
        "burst_rounds": args.rounds,
        "trees_identical": identical,
        "load": _load(),
    }


def _load() -> list[float]:
    """1/5/15-minute load averages at the end: the machine may be shared, read figures beside it."""
    return [round(x, 2) for x in os.getloadavg()]


async def _ready(conn: asyncssh.SSHClientConnection) -> asyncssh.SSHClientConnection:
    return conn


async def _timed(coro) -> float:  # noqa: ANN001
    t = time.perf_counter()
    await coro
    return time.perf_counter() - t


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _same_tree(a: Path, b: Path) -> bool:
    out = subprocess.run(["diff", "-rq", "--no-dereference", str(a), str(b)], capture_output=True, text=True)
    if out.returncode != 0:  # say where: a bare False hid which file differed
        log(f"trees differ ({a} vs {b}): {out.stdout[:600]}{out.stderr[:200]}")
    return out.returncode == 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=7000)
    parser.add_argument("--mb", type=int, default=180)
    parser.add_argument("--edits", type=int, default=200)
    parser.add_argument("--burst", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3, help="alternating burst rounds (medians reported)")
    parser.add_argument("--initial-rounds", type=int, default=3, help="initial syncs alternating with rsync")
    parser.add_argument("--initial-only", action="store_true", help="stop after the initial-sync rounds")
    parser.add_argument("--vm-dir", default="", help="where VM-side trees go (e.g. /dev/shm)")
    parser.add_argument(
        "--text", action="store_true", help="small files hold source-like text, not random bytes"
    )
    parser.add_argument(
        "--noop-ignored", type=int, default=0, metavar="FILES",
        help="only: a cold no-op resync of FILES files, 95%% under data/ (excluded), vs rsync with the same exclude",
    )  # fmt: skip
    parser.add_argument(
        "--vms",
        type=int,
        default=0,
        help="with --wan: N VMs behind one shared uplink, fanned out (sync_fleet.py)",
    )
    parser.add_argument("--wan", action="store_true", help="through the WAN proxy; baseline rsync -az")
    parser.add_argument("--delay-ms", type=float, default=25.0, help="--wan: one-way delay per direction")
    parser.add_argument("--mbit", type=float, default=50.0, help="--wan: bandwidth cap per direction")
    quick_flag(parser)
    arguments = quick(parser.parse_args(), files=300, mb=8, edits=20, burst=200, rounds=3, initial_rounds=3)
    with owned_run("sync"):
        result = asyncio.run(main(arguments))
    print(json.dumps(result))
