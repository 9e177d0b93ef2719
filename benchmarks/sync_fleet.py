"""``benchmarks/sync.py --wan --vms N``: one tree to N machines behind one shared home uplink.

The N "VMs" are N dest folders behind one OpenSSH sshd; each has its own port on one WAN proxy
process whose uplink (``--mbit`` per direction, ``--delay-ms`` each way) all of the laptop's
connections share (tests/helpers/wan.py ``spawn_shared_uplink``). Machine-to-machine traffic (the
fan-out relay) reaches the sshd's address directly, off that link, as VMs in one VPC do.

Figures (the last stdout line, one JSON object): ``initial_one_vm_s`` (the tree to one VM alone),
``initial_s`` (to all N, fanned out), ``rsync_initial_s`` (N parallel ``rsync -az`` through the same
link), ``edit_visible_ms_p50``/``_p99`` (an edit until all N hold it), ``trees_identical``.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import asyncssh

from gcptui.remote.compute.ssh_exec import SshExecChannel
from gcptui.remote.ssh.pool import ENCRYPTION_ALGS
from gcptui.remote.sync import SyncSession
from gcptui.remote.sync.fanout import RELAY_FAN, FanOut, relay_parents
from tests.helpers.sshd import Sshd
from tests.helpers.wan import add_known_host, spawn_shared_uplink

if TYPE_CHECKING:
    import argparse

# More VMs than this: no rsync baseline (each copy crosses the one uplink: 64 take an hour).
RSYNC_MAX_VMS = 16


def _log(message: str) -> None:
    import sys

    print(message, file=sys.stderr, flush=True)


def _getter(sshd: Sshd, host: str, port: int):  # noqa: ANN202 - a ConnectionGetter
    conns: list[asyncssh.SSHClientConnection] = []

    async def get() -> asyncssh.SSHClientConnection:
        if not conns or conns[-1].is_closed():
            conns.append(
                await asyncssh.connect(
                    host,
                    port=port,
                    username=sshd.user,
                    client_keys=[str(sshd.client_key)],
                    known_hosts=str(sshd.known_hosts),
                    encryption_algs=ENCRYPTION_ALGS,  # as the product's pool connects
                )  # fmt: skip
            )
        return conns[-1]

    get.conns = conns  # type: ignore[attr-defined]
    return get


def _same(a: Path, b: Path) -> bool:
    return (
        subprocess.run(["diff", "-r", "--no-dereference", str(a), str(b)], capture_output=True).returncode
        == 0
    )


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _rsync_all(args: argparse.Namespace, sshd: Sshd, link, source: Path, vm: Path, n: int):  # noqa: ANN001, ANN202
    """``n`` parallel ``rsync -az`` through the same link: (seconds, every copy identical)."""
    _log(f"{n} parallel rsync -az through the same link ...")
    subprocess.run(["sync"], check=False)
    ssh = [f"ssh -p {port} -i {sshd.client_key} -o UserKnownHostsFile={sshd.known_hosts} "
           "-o StrictHostKeyChecking=yes -o BatchMode=yes" for port in link.ports[:n]]  # fmt: skip
    started = time.perf_counter()
    procs = [
        subprocess.Popen(["rsync", "-az", "--delete", "-e", e, f"{source}/", f"{sshd.user}@{link.host}:{vm / f'rsync{i}'}/"])
        for i, e in enumerate(ssh)
    ]  # fmt: skip
    if any(p.wait() != 0 for p in procs):
        raise RuntimeError("an rsync failed")
    rsync_s = time.perf_counter() - started
    _log(f"  {rsync_s:.2f} s")
    return rsync_s, all(_same(source, vm / f"rsync{i}") for i in range(n))


async def fleet(args: argparse.Namespace, sshd: Sshd, source: Path, vm: Path, ledgers: list[str]) -> dict:
    """Every figure of the fleet run (the tree at ``source`` is generated; ``vm`` holds the dests)."""
    n = args.vms
    # One proxy port per VM plus one for the single-VM run, all on the one shared uplink.
    link = spawn_shared_uplink(
        [(sshd.host, sshd.port)] * (n + 1), host="127.0.0.78", delay_ms=args.delay_ms, mbit=args.mbit
    )
    for port in link.ports:
        add_known_host(str(sshd.known_hosts), link.host, port, sshd.host, sshd.port)
    getters = [_getter(sshd, link.host, port) for port in link.ports]
    sessions: list[SyncSession] = []
    relay: FanOut | None = None
    try:
        _log("initial sync to one VM alone ...")
        subprocess.run(["sync"], check=False)
        started = time.perf_counter()
        one = SyncSession(source, str(vm / "one"), SshExecChannel(getters[n], lambda: "one"), name="one")
        await one.full_sync(complete=True)
        one_s = time.perf_counter() - started
        if one._agent is not None:
            ledgers.append(one._agent.ledger_path)
        await one.close()
        _log(f"  {one_s:.2f} s")

        _log(f"initial sync to {n} VMs, fanned out ...")
        subprocess.run(["sync"], check=False)
        dests = [vm / f"vm{i}" for i in range(n)]
        started = time.perf_counter()
        # The product's tree (Services.sync_sessions): past 1 + RELAY_FAN VMs, VMs the seed serves
        # relay to VMs of their own over the machine-to-machine network.
        relay = FanOut(SshExecChannel(getters[0], lambda: "vm0"), str(dests[0]), sshd.host, name="vm0")
        relays = {0: relay}
        for i in range(1, n):
            if RELAY_FAN * i + 1 < n:
                channel = SshExecChannel(getters[i], lambda: "vm")
                relays[i] = relay.branch(FanOut(channel, str(dests[i]), sshd.host, name=f"vm{i}"))
        parents = relay_parents(n)
        sessions = [
            SyncSession(
                source, str(d), SshExecChannel(g, lambda: "vm"), name=f"vm{i}",
                relay=None if parents[i] is None else relays[parents[i]],  # type: ignore[index]
            )
            for i, (d, g) in enumerate(zip(dests, getters, strict=False))
        ]  # fmt: skip
        results = await asyncio.gather(*(s.full_sync(complete=True) for s in sessions))
        all_s = time.perf_counter() - started
        relayed = sum(r.relayed for r in results)
        for s in sessions:
            if s._agent is not None:
                ledgers.append(s._agent.ledger_path)
        _log(f"  {all_s:.2f} s ({relayed} files machine-to-machine)")

        _log(f"following on all {n}: single-file edits ...")
        tasks = [asyncio.create_task(s.follow()) for s in sessions]
        while any(s.state != "in_sync" for s in sessions):
            await asyncio.sleep(0.01)
        edited = source / "src/pkg0/mod0/file0.py"
        remotes = [d / "src/pkg0/mod0/file0.py" for d in dests]
        latencies = []
        for i in range(args.edits):
            payload = f"fleet edit {i}\n".encode() * (1 + i % 50)
            t = time.perf_counter()
            edited.write_bytes(payload)
            while not all(_read(r) == payload for r in remotes):
                await asyncio.sleep(0.0005)
            latencies.append((time.perf_counter() - t) * 1000)
            await asyncio.sleep(0.01 + (i % 7) / 1000)
        await asyncio.gather(*(s.barrier() for s in sessions))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        identical = all(_same(source, d) for d in dests)

        rsync_s = None  # past RSYNC_MAX_VMS: n copies through the one link take n times one VM's time
        if n <= RSYNC_MAX_VMS:
            rsync_s, same = _rsync_all(args, sshd, link, source, vm, n)
            identical = identical and same
    finally:
        for s in sessions:
            await s.close()
        if relay is not None:
            relay.close()
        for g in getters:
            for conn in g.conns:  # type: ignore[attr-defined]
                conn.close()
        link.stop()

    latencies.sort()

    def p(q: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 1)

    return {
        "vms": n,
        "rtt_ms": 2 * args.delay_ms,
        "mbit": args.mbit,
        "shared_uplink": True,
        "initial_s": round(all_s, 3),
        "initial_one_vm_s": round(one_s, 3),
        "initial_vs_one_vm": round(all_s / one_s, 3),
        "rsync_initial_s": round(rsync_s, 3) if rsync_s is not None else None,
        "initial_ratio": round(all_s / rsync_s, 3) if rsync_s is not None else None,
        "relayed_files": relayed,
        "edit_visible_ms_p50": p(0.50),
        "edit_visible_ms_p99": p(0.99),
        "edit_visible_ms_mean": round(statistics.fmean(latencies), 1),
        "edits": len(latencies),
        "trees_identical": identical,
    }
