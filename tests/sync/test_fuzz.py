"""Fuzz: 10,000 seeded random local operations while follow mode runs and sshd restarts at random.

The VM ends holding exactly the local tree plus the files only the VM wrote (untouched: the ledger's
rule). ``GCPTUI_FUZZ_SEED`` and ``GCPTUI_FUZZ_OPS`` choose another seed or a longer soak; the seed
is printed with any failure.
"""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

from gcptui.remote.sync import SyncSession, SyncWarning
from tests.helpers.sshd import Sshd
from tests.sync.conftest import Follower, openssh_getter, ssh_channel
from tests.sync.test_random_ops import listing, random_op
from tests.sync.trees import snapshot, wait_equal, write

SEED = int(os.environ.get("GCPTUI_FUZZ_SEED", "13"))
OPS = int(os.environ.get("GCPTUI_FUZZ_OPS", "10000"))
# Only the VM writes these (names the random operations never make): sync must leave them be.
VM_ONLY = {
    "vm_written.log": "training output",
    "vmruns/ckpt-1.pt": "weights",
    "vmruns/sub/metrics.jsonl": "{}",
}


def one_op(rng: random.Random, root: Path, files: list[Path], dirs: list[Path]) -> None:
    """A random operation: the shared mix, plus an rmdir of a (possibly non-empty) directory."""
    if rng.random() < 0.04 and len(dirs) > 1:
        try:
            os.rmdir(rng.choice(dirs[1:]))
        except OSError:
            pass  # not empty, or gone: a failed rmdir is an operation too
        return
    random_op(rng, root, files, dirs)


async def test_fuzz_random_operations_with_sshd_restarts_end_in_equal_trees(
    sshd: Sshd, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    local, remote = tmp_path / "local", tmp_path / "vm" / "project"
    local.mkdir()
    for rel, text in VM_ONLY.items():
        write(remote, rel, text)
    vm_only = snapshot(remote)
    for _ in range(50):
        random_op(rng, local, *listing(local))
    follower = await Follower(
        SyncSession(local, str(remote), ssh_channel(openssh_getter(sshd)), name="vm")
    ).start()
    restarts = sorted(rng.sample(range(500, OPS), k=max(1, OPS // 2500)))
    try:
        files, dirs = listing(local)
        for i in range(OPS):
            if i % 10 == 0:
                files, dirs = listing(local)
            one_op(rng, local, files, dirs)
            if restarts and i == restarts[0]:
                restarts.pop(0)
                await asyncio.to_thread(sshd.stop)
                for _ in range(rng.randrange(20, 200)):  # changes made while the VM is away
                    one_op(rng, local, *listing(local))
                await asyncio.to_thread(sshd.start)
            if i % 25 == 0:
                await asyncio.sleep(0.005)  # batches of various sizes go out while the tree changes
        await wait_equal(remote, lambda: {**snapshot(local), **vm_only}, timeout=60)
        assert follower.task is not None and not follower.task.done()
    except AssertionError as err:
        warnings = [e.message for e in follower.events if isinstance(e, SyncWarning)][-5:]
        raise AssertionError(
            f"sync fuzz failed with GCPTUI_FUZZ_SEED={SEED} (ops {OPS}): {err}\n"
            f"session {follower.session.state}: {follower.session._reason}; last warnings: {warnings}"
        ) from None
    finally:
        await follower.stop()
