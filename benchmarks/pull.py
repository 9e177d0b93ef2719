"""`gcptui pull` against `scp -r` over the same OpenSSH sshd, on a 200 MB run directory.

    python benchmarks/pull.py [--mib 200] [--rounds 3]

Builds a run directory (a few large checkpoints beside hundreds of small files), starts OpenSSH sshd
on 127.0.0.x, and times, alternating: `gcptui pull` (the pull service over a fresh pooled
connection, as the command runs it) and `scp -r`. Then an interrupted pull (cut at half the bytes)
and the resume: how many bytes the resume sent again. Trees are compared at the end.

Prints progress to stderr and one JSON object as its last stdout line.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench_run import owned_run, quick, quick_flag  # noqa: E402

from gcptui.remote.compute.ssh_exec import SshExecChannel  # noqa: E402
from gcptui.remote.config import SshConfig  # noqa: E402
from gcptui.remote.ssh.pool import SshPool  # noqa: E402
from gcptui.remote.ssh.target import SshTarget  # noqa: E402
from gcptui.remote.transfer.pull import pull  # noqa: E402
from tests.helpers.sshd import Sshd, make_client_key  # noqa: E402


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def build_run(root: Path, mib: int) -> None:
    big = max(1, int(mib * 0.9) // 9)  # nine checkpoints carry 90% of the bytes
    for step in range(9):
        path = root / "checkpoints" / f"step-{step:09d}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(big * 2**20))
        path.with_suffix(".json").write_text(json.dumps({"step": step}))
    small = (mib * 2**20 // 10) // 400
    for n in range(400):
        path = root / "samples" / f"{n // 50}" / f"sample-{n}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(small))


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


async def gcptui_pull(target: SshTarget, remote: Path, local: Path, cut_at: int | None = None) -> int:
    pool = SshPool(SshConfig())
    sent = 0

    def progress(n: int) -> None:
        nonlocal sent
        sent += n
        if cut_at is not None and sent >= cut_at:
            raise ConnectionError("cut")

    try:
        await pull(
            SshExecChannel(pool.getter(target), lambda: "bench"), str(remote), local, progress=progress
        )
    except ConnectionError:
        pass
    finally:
        await pool.close()
    return sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    quick_flag(parser)
    args = quick(parser.parse_args(), mib=8, rounds=1)
    with owned_run("pull"), tempfile.TemporaryDirectory(prefix="pull-bench-") as tmp:
        work = Path(tmp)
        remote = work / "vm" / "demo"
        build_run(remote, args.mib)
        size = sum(p.stat().st_size for p in remote.rglob("*") if p.is_file())
        files = sum(1 for p in remote.rglob("*") if p.is_file())
        sshd = Sshd(
            directory=work / "sshd", host="127.0.0.61", client_key=make_client_key(_mkdir(work / "key"))
        )
        sshd.setup()
        sshd.start()
        try:
            target = SshTarget("box", sshd.host, sshd.port, sshd.user, sshd.client_key, sshd.known_hosts)
            ours, theirs = [], []
            for round_ in range(args.rounds):
                local = work / f"ours-{round_}"
                started = time.perf_counter()
                asyncio.run(gcptui_pull(target, remote, local))
                ours.append(time.perf_counter() - started)
                assert digest(local / "demo") == digest(remote), "gcptui pull tree differs"
                scp_dir = work / f"scp-{round_}"
                scp_dir.mkdir()
                started = time.perf_counter()
                subprocess.run(
                    ["scp", "-q", "-r", "-i", str(sshd.client_key), "-P", str(sshd.port),
                     "-o", f"UserKnownHostsFile={sshd.known_hosts}", "-o", "StrictHostKeyChecking=yes",
                     f"{sshd.user}@{sshd.host}:{remote}", str(scp_dir)],
                    check=True,
                )  # fmt: skip
                theirs.append(time.perf_counter() - started)
                say(f"round {round_}: gcptui pull {ours[-1]:.2f} s, scp -r {theirs[-1]:.2f} s")
                shutil.rmtree(local)
                shutil.rmtree(scp_dir)
            local = work / "resume"
            first = asyncio.run(gcptui_pull(target, remote, local, cut_at=size // 2))
            started = time.perf_counter()
            second = asyncio.run(gcptui_pull(target, remote, local))
            resume_s = time.perf_counter() - started
            assert digest(local / "demo") == digest(remote), "resumed tree differs"
        finally:
            sshd.stop()
    result = {
        "files": files,
        "mib": round(size / 2**20, 1),
        "rounds": args.rounds,
        "gcptui_pull_s": round(statistics.median(ours), 3),
        "scp_r_s": round(statistics.median(theirs), 3),
        "ratio_pull_to_scp": round(statistics.median(ours) / statistics.median(theirs), 3),
        "interrupted_after_bytes": first,
        "resume_sent_bytes": second,
        "resume_resent_fraction": round((first + second - size) / size, 4),
        "resume_s": round(resume_s, 3),
        "load_average": os.getloadavg()[0],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
