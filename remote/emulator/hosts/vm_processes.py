"""Find and end an emulated VM's processes, even those that detached with setsid or double-forked.

Every process started inside a VM inherits ``GCPTUI_EMULATED_VM=<uid>``; psutil reads process
environments on Linux and macOS alike, so the scan needs no ``/proc`` and no process tree.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import psutil

MARKER = "GCPTUI_EMULATED_VM"


def vm_processes(uid: str) -> list[psutil.Process]:
    """Live (non-zombie) processes carrying the VM's marker."""
    found = []
    me = os.getpid()
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get(MARKER) == uid:
                found.append(proc)
        except (psutil.Error, OSError):
            continue  # gone meanwhile, or another user's process
    return found


def signal_vm(uid: str, sig: int) -> int:
    """Send ``sig`` to every process of the VM; returns how many got it."""
    sent = 0
    for proc in vm_processes(uid):
        try:
            proc.send_signal(sig)
            sent += 1
        except psutil.Error:
            pass
    return sent


async def end_vm_processes(uid: str, grace: float, poll: float = 0.05) -> None:
    """SIGTERM everything, wait up to ``grace`` for it to exit, SIGKILL what remains (ACPI off, then power off)."""
    if not await asyncio.to_thread(signal_vm, uid, signal.SIGTERM):
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        await asyncio.sleep(poll)
        if not await asyncio.to_thread(vm_processes, uid):
            return
    # Processes may fork while dying: repeat until a scan finds none.
    for _ in range(20):
        if not await asyncio.to_thread(signal_vm, uid, signal.SIGKILL):
            return
        await asyncio.sleep(poll)
