"""A cheap fleet for ``fleet_live.py``: N machines the TUI watches, at almost no cost to the machine.

What is real: the emulator's Compute API (``Emulator(ssh=False)``: N RUNNING Spot VMs with one L4
each, listed and polled by the TUI and keep-alive as usual), SSH (asyncssh, one listener per VM on
its own ``127.0.0.x``, public-key auth against the VM's pinned ``compute.<id>`` host key, keepalives
as the pool asks), and the bytes every stream carries: the same commands the TUI sends are parsed
here and answered in their own wire format at the rates a real VM sends them.

What is synthetic: nothing runs on the "VMs". Each exec is answered by a coroutine in this one
process instead of ``sh``, the job supervisor, ``nvidia-smi`` and a training job:

- ``gcptui-job.sh watch INTERVAL POLLS``: the script on stdin is read and dropped; one record of a
  running job (``key=value`` lines, the command as ``|`` lines, ``--``), then a ``.`` heartbeat every
  INTERVAL x POLLS seconds, as the supervisor does while nothing changes; ``status`` answers the same
  record once.
- the log follower (``gcptui-tail``) on the metrics file: ``O`` then, every poll interval, one
  ``D OFFSET BASE64`` frame with the progress-protocol lines a job writing 2 lines/s has written
  since the last poll (``H`` heartbeats when none), offsets exact;
- the GPU monitor (``gcptui-gpu``): one ``--query-gpu`` CSV line per second per GPU (utilization,
  memory, temperature and power drifting) and every process interval a ``P,`` list closed by ``PEND``.

Anything else is refused (exit 127), so a command the TUI starts sending shows up as an error rather
than as a silent success. The process pins itself to the last CPU (``os.sched_setaffinity``) so the
harness can keep the TUI on the others.

    python benchmarks/synthetic_fleet.py N ROOT     # prints "ready" once ROOT/gcptui.toml is written
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import getpass
import json
import math
import os
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncssh  # noqa: E402

from gcptui.remote.emulator import Emulator  # noqa: E402
from gcptui.remote.emulator.emulator import free_port  # noqa: E402

PROGRESS_PER_S = 2.0  # the job's progress lines per second
TOTAL_STEPS = 10**6
GPU_NAME = "NVIDIA L4"
GPU_MEM_TOTAL = 23034


def job_record(name: str, started: float) -> str:
    """What ``gcptui-job.sh watch`` prints for a running job (one record, ``--`` closed)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
    lines = [
        "state=running", "detail=", f"pid={4000 + len(name)}", f"pgid={4000 + len(name)}", "exit_code=",
        f"started_at={stamp}", "ended_at=", "phase=", "preempted_at=", "|python train.py",
    ]  # fmt: skip
    return "\n".join(lines) + "\n--\n"


def progress_line(step: int, now: float) -> bytes:
    """One progress-protocol record, as the trainer writes it."""
    record = {"step": step, "total_steps": TOTAL_STEPS, "loss": 1 / step, "samples_per_s": 100.0, "time": now}
    return (json.dumps(record) + "\n").encode()


def gpu_line(index: int, t: float, phase: float) -> str:
    """One ``nvidia-smi --query-gpu`` CSV line (noheader, nounits), values drifting with time."""
    util = 80 + 15 * math.sin(t / 7 + phase)
    mem = 18000 + 500 * math.sin(t / 13 + phase)
    temp = 65 + 5 * math.sin(t / 11 + phase)
    power = 60 + 10 * math.sin(t / 5 + phase)
    return f"{index}, {GPU_NAME}, {util:.0f}, {mem:.0f}, {GPU_MEM_TOTAL}, {temp:.0f}, {power:.2f}\n"


class Machine:
    """One synthetic VM: what its job has written (a step count that grows with time)."""

    def __init__(self, name: str, index: int) -> None:
        self.name = name
        self.index = index
        self.started = time.time() - 60
        self.phase = index * 0.7

    def step_at(self, now: float) -> int:
        return 1 + int((now - self.started) * PROGRESS_PER_S)


async def _drain_stdin(process: asyncssh.SSHServerProcess[str]) -> None:
    with contextlib.suppress(asyncssh.Error, OSError, asyncio.IncompleteReadError):
        while await process.stdin.read(65536):
            pass


async def _job(process: asyncssh.SSHServerProcess[str], machine: Machine, args: list[str]) -> int:
    op = args[0] if args else ""
    if op not in ("watch", "status"):
        process.stderr.write(f"synthetic fleet: gcptui-job.sh {op} is not served\n")
        return 127
    await _drain_stdin(process)
    if op == "status":
        record = job_record(machine.name, machine.started)[: -len("--\n")]
        head, command = record.split("|", 1)
        process.stdout.write(head + "command:\n" + command)
        return 0
    interval = float(args[1]) if len(args) > 1 else 0.2
    polls = int(args[2]) if len(args) > 2 else 5
    process.stdout.write(job_record(machine.name, machine.started))
    while True:
        await asyncio.sleep(interval * polls)
        process.stdout.write(".\n")


async def _tail(process: asyncssh.SSHServerProcess[bytes], machine: Machine, args: list[str]) -> int:
    """The log follower's frames over the job's metrics file: 2 records a second, exact offsets."""
    _path, inode, offset_text, _hist, follow, interval_text, _cap, hb_text = args[:8]
    interval, heartbeat = float(interval_text), int(hb_text)
    # The file as the follower would find it: records 1.. up to now. A fresh start reads from its
    # end (history is not replayed: the TUI's follower asks for 2000 lines once, at start-up only).
    step = machine.step_at(time.time())
    offset = int(offset_text) if inode != "-" else 0
    process.stdout.write(f"O 77{machine.index} {offset}\n".encode())
    if inode == "-":
        data = b"".join(
            progress_line(s, machine.started + s / PROGRESS_PER_S) for s in range(max(1, step - 20), step)
        )
        process.stdout.write(b"D 0 " + base64.b64encode(data) + b"\n")
        offset = len(data)
    idle = 0
    while follow == "1":
        await asyncio.sleep(interval)
        now = time.time()
        upto = machine.step_at(now)
        if upto > step:
            data = b"".join(progress_line(s, now) for s in range(step, upto))
            process.stdout.write(f"D {offset} ".encode() + base64.b64encode(data) + b"\n")
            offset += len(data)
            step, idle = upto, 0
        else:
            idle += 1
            if idle >= heartbeat:
                process.stdout.write(b"H\n")
                idle = 0
    return 0


async def _gpu(process: asyncssh.SSHServerProcess[str], machine: Machine, args: list[str]) -> int:
    interval = max(0.1, float(args[1]))
    process_interval = float(args[2])
    next_processes = 0.0
    while True:
        now = time.time()
        if now >= next_processes:
            process.stdout.write(f"P,{4000 + machine.index}, python, 17800\nPEND\n")
            next_processes = now + process_interval
        process.stdout.write(gpu_line(0, now, machine.phase))
        await asyncio.sleep(interval)


def _handler(machines: dict[str, Machine]):  # type: ignore[no-untyped-def]
    async def handle(process: asyncssh.SSHServerProcess[bytes]) -> None:
        machine = machines[process.get_extra_info("sockname")[0]]
        try:
            argv = shlex.split(process.command or "")
        except ValueError:
            argv = []
        # Every stream the TUI starts is `sh -c SCRIPT NAME ARGS...`: NAME says which one.
        name, args = (argv[3], argv[4:]) if len(argv) >= 4 and argv[:2] == ["sh", "-c"] else ("", [])
        text_out = _TextWriter(process)
        status = 127
        try:
            if name == "gcptui-job":
                status = await _job(text_out, machine, args)  # type: ignore[arg-type]
            elif name == "gcptui-tail":
                status = await _tail(process, machine, args)
            elif name == "gcptui-gpu":
                status = await _gpu(text_out, machine, args)  # type: ignore[arg-type]
            else:
                process.stderr.write(b"synthetic fleet: command not served\n")
        except (asyncssh.Error, OSError, BrokenPipeError):
            return
        with contextlib.suppress(asyncssh.Error, OSError):
            process.exit(status)

    return handle


class _TextWriter:
    """A bytes server process written to as text (one encoding per listener keeps tail's frames raw)."""

    def __init__(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        self._process = process
        self.stdin = process.stdin
        self.stdout = self
        self.stderr = _Encoded(process.stderr)

    def write(self, text: str) -> None:
        self._process.stdout.write(text.encode())


class _Encoded:
    def __init__(self, stream: asyncssh.SSHWriter[bytes]) -> None:
        self._stream = stream

    def write(self, text: str) -> None:
        self._stream.write(text.encode())


async def serve(n: int, root: Path) -> None:
    emulator = Emulator(root, ssh=False, boot_seconds=0.05, stop_seconds=0.05)
    await emulator.start()
    names = [f"vm-{i:02d}" for i in range(n)]
    for name in names:
        emulator.add_instance(
            name, "us-central1-a", machine_type="g2-standard-8", gpus=[("nvidia-l4", 1)], spot=True
        )
    await asyncio.gather(*(emulator.wait_for_status(name, "RUNNING", 120) for name in names))
    ssh_dir = root / "ssh"
    ssh_dir.mkdir(parents=True, exist_ok=True)
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key.write_private_key(ssh_dir / "client")
    (ssh_dir / "client").chmod(0o600)
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    algorithm, blob = host_key.export_public_key("openssh").decode().split()[:2]
    known = [f"{emulator.instance(name).host_alias(blob)} {algorithm} {blob}\n" for name in names]
    (ssh_dir / "known_hosts").write_text("".join(known))
    authorized = asyncssh.import_authorized_keys(client_key.export_public_key("openssh").decode())
    port = free_port()
    machines: dict[str, Machine] = {}
    servers = []
    for index, name in enumerate(names):
        address = emulator.address(name)
        assert address is not None
        machines[address] = Machine(name, index)
        servers.append(
            await asyncssh.listen(
                address, port, server_host_keys=[host_key], authorized_client_keys=authorized,
                process_factory=_handler(machines), encoding=None, allow_scp=False,
            )
        )  # fmt: skip
    config = emulator.write_config(root / "gcptui.toml")
    q = json.dumps
    config.write_text(
        config.read_text() + "\n[ssh]\n"
        f"user = {q(getpass.getuser())}\nkey = {q(str(ssh_dir / 'client'))}\n"
        f"known_hosts = {q(str(ssh_dir / 'known_hosts'))}\nport = {port}\n"
    )
    print("ready", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        for server in servers:
            server.close()
        await emulator.close()


def main() -> None:
    with contextlib.suppress(AttributeError, OSError):  # not on macOS: the OS places it
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) > 1:
            os.sched_setaffinity(0, {cpus[-1]})
    asyncio.run(serve(int(sys.argv[1]), Path(sys.argv[2])))


if __name__ == "__main__":
    main()
