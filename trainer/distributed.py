"""The few collectives a resumable run needs, working alone or under torchrun (gloo or NCCL).

Every helper falls back to the single-process answer when no process group is initialized, so the
same training loop runs under `python` and under `torchrun`.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any, NoReturn

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class ProcessPlace:
    """Where this process sits: its global rank, the world size and its rank on this machine."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def place() -> ProcessPlace:
    """This process's place in the current process group (0 of 1 without one)."""
    if not is_distributed():
        return ProcessPlace()
    return ProcessPlace(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))


def init_from_environment(device_type: str) -> ProcessPlace:
    """Join the process group torchrun describes in the environment (no-op when run alone).

    Uses NCCL for CUDA and gloo for CPU, and pins each CUDA process to its local GPU.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1 or is_distributed():
        return place()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device_type == "cuda":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")
    return place()


def shutdown(together: bool = False) -> None:
    """Leave the process group, if one was joined.

    ``together`` (every rank ends the same way: finished, or stopped on the step they agreed on):
    wait for all ranks first. A rank that tears gloo down while another still talks to it can abort
    that one at exit ("terminate called without an active exception"), turning a finished run's exit
    code 0 into a crash. After an error on one rank the others may never arrive: no wait then.
    """
    global _left_group
    if is_distributed():
        if together:
            dist.barrier()
        dist.destroy_process_group()
        _left_group = True


_left_group = False  # shutdown() left a process group: exit through exit_process


def exit_process(code: int) -> NoReturn:
    """End the process with `code`; after a process group was left, without interpreter finalization.

    DDP keeps gloo's process group, and its worker threads, alive past destroy_process_group (it
    is only freed at exit). A worker that is still releasing its last collective's tensors needs
    the GIL for that; once the interpreter is finalizing, CPython ends such a thread with
    pthread_exit, which unwinds through a noexcept destructor and aborts the whole process
    ("terminate called without an active exception", SIGABRT): a run that finished, or saved
    its preemption checkpoint, would read as a crash. So: the atexit handlers, then flush stdio
    and `os._exit`, which skips the finalization the race needs. Without a process group this
    is plain `sys.exit`.
    """
    if not _left_group:
        sys.exit(code)
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()  # as a normal exit would wait for it
    atexit._run_exitfuncs()  # logging's shutdown, the script's own handlers
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # closed or gone: nothing left to lose
    os._exit(code)


def _collective_device() -> torch.device:
    # NCCL only reduces CUDA tensors; gloo wants CPU ones.
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def agree_on_stop(stop_here: bool, loss: float | None) -> tuple[bool, float | None]:
    """One all-reduce per step: stop if any rank wants to; the loss becomes the mean over ranks.

    `loss` must be None on every rank or on none of them (it is, when all ranks log the same steps).
    """
    if not is_distributed():
        return stop_here, loss
    values = torch.tensor(
        [1.0 if stop_here else 0.0, loss or 0.0], dtype=torch.float64, device=_collective_device()
    )
    dist.all_reduce(values)
    stop_any, loss_sum = values.tolist()
    return stop_any > 0, (loss_sum / dist.get_world_size() if loss is not None else None)


def gather_to_all(value: Any) -> list[Any]:
    """Every rank's `value`, in rank order, on every rank."""
    if not is_distributed():
        return [value]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def broadcast_from_first(value: Any) -> Any:
    """Rank 0's `value` on every rank."""
    if not is_distributed():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier() -> None:
    if is_distributed():
        dist.barrier()
