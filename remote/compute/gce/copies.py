"""Copies of a GCE VM (``vm create --from BASE``, the TUI's create form, a sweep's ``vms = { from =
BASE }``): each inserted, waited to RUNNING and host-key pinned.

Blocking (the Compute client is synchronous): several names run in threads, so N VMs take about as
long as one. The insert body is ``cloud.create.create_body``; the host key comes from the new VM's
``hostkeys/`` guest attributes (enabled by the body), filed under ``compute.<id>`` as gcloud does.
The faces reach it through ``GceBackend.plan_copies`` and ``GceBackend.copier``.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gcptui.remote.cloud.create import CreateError, CreateOptions, boot_disk, boot_source, create_body
from gcptui.remote.cloud.images import image_from_disk, image_name
from gcptui.remote.cloud.instances import DiskOrigin, instance_from_resource, short_name
from gcptui.remote.compute.copies import CopyPlan, Created, Report
from gcptui.remote.compute.ready import wait_ready
from gcptui.remote.config import Config
from gcptui.remote.errors import GcptuiError
from gcptui.remote.models import Instance
from gcptui.remote.ssh.host_keys import matching_lines, pin_host_keys
from gcptui.remote.ssh.target import target_for_instance

if TYPE_CHECKING:
    from gcptui.remote.cloud.gce import GceClient


@dataclass(frozen=True, slots=True)
class CreatePlan:
    """What every new VM is made from: the base's settings and its boot disk's origin."""

    base: dict[str, Any]  # the base's instances.get JSON
    origin: DiskOrigin
    zone: str
    options: CreateOptions

    def body(self, name: str) -> dict[str, Any]:
        return create_body(self.base, self.origin, name, self.options)

    def describe(self) -> str:
        """One line saying what every new VM gets."""
        body = self.body("x")
        gpus = ", ".join(
            f"{a['acceleratorCount']}x {short_name(a['acceleratorType'])}"
            for a in body.get("guestAccelerators", [])
        )
        scheduling = body["scheduling"]
        # Legacy preemptible VMs (provisioning model STANDARD) are Spot-priced and preempted as Spot
        # ones: `gcptui ls` calls them spot too.
        spot = scheduling.get("provisioningModel") == "SPOT" or bool(scheduling.get("preemptible"))
        model = "Spot" if spot else "on-demand"
        origin = self.origin
        source = short_name(origin.source_image or origin.source_snapshot or "")
        kind = "image" if origin.source_image else "snapshot"
        return (
            f"{short_name(body['machineType'])}{f' + {gpus}' if gpus else ''}, {model}, in {self.zone}; "
            f"boot disk from {kind} {source} ({origin.type}, {origin.size_gb} GB)"
        )


def image_maker(gce: GceClient, base: Instance, say: Callable[[str], None]) -> Callable[[DiskOrigin], str]:
    """``plan_create``'s ``make_image`` for ``base``: an image of its boot disk (minutes), each step
    said through ``say`` (a line of rich markup)."""

    def make_image(origin: DiskOrigin) -> str:
        name = image_name(base.name)
        say(
            f"the boot disk {origin.name} of {base.name} was made from neither an image nor a snapshot: "
            f"making image {name} of it first (this takes minutes)"
        )
        began = time.monotonic()
        url = image_from_disk(gce, base.zone, origin.name, name)
        say(f"image {name} made in {time.monotonic() - began:.0f} s")
        return url

    return make_image


def plan_create(
    gce: GceClient,
    base: Instance,
    options: CreateOptions,
    make_image: Callable[[DiskOrigin], str] | None = None,
) -> CreatePlan:
    """Read the base (``instances.get``) and its boot disk (``disks.get``); ``CreateError`` when the
    base cannot be copied (no boot disk; a disk made from neither an image nor a snapshot, unless
    ``make_image`` makes an image of it and returns its URL)."""
    raw = gce.get_raw(base.name, base.zone)
    if raw is None:
        raise CreateError(f"the base VM {base.name} is gone: `gcptui ls` shows the fleet")
    settings = gce.get_json(base.name, base.zone) or {}
    device = boot_disk(settings).get("deviceName", "")
    origin = gce.disk_origins(raw).get(device)
    if origin is None:
        raise CreateError(f"cannot read the boot disk of {base.name} (disks.get): check your permissions")
    if make_image is not None and not (origin.source_image or origin.source_snapshot):
        origin = dataclasses.replace(origin, source_image=make_image(origin))
    boot_source(origin, base.name)  # fail before any insert when the disk has no image or snapshot
    return CreatePlan(settings, origin, options.zone or short_name(str(settings.get("zone", ""))), options)


class VmCreator:
    """Creates VMs from one plan; ``report(name, step)`` hears each step."""

    def __init__(self, gce: GceClient, config: Config, report: Report, *, boot_timeout: float = 600.0,
                 host_key_timeout: float = 180.0, poll_seconds: float = 1.0) -> None:  # fmt: skip
        self.gce = gce
        self.config = config
        self.report = report
        self.boot_timeout = boot_timeout
        self.host_key_timeout = host_key_timeout
        self.poll_seconds = poll_seconds
        self.interrupted = threading.Event()  # Ctrl-C: every thread stops waiting at its next read

    def create_many(self, plan: CopyPlan, names: list[str]) -> dict[str, Created | GcptuiError]:
        """Every name at once (one thread each, at most 16 at a time); each result or its one-line
        error. Interrupted (Ctrl-C): returns at once, no VM not yet inserted is inserted, and the
        threads left waiting on the cloud are daemons (they never hold the process); the VMs already
        inserted boot on (the caller says which exist)."""
        results: dict[str, Created | GcptuiError] = {}
        slots = threading.BoundedSemaphore(16)
        finished = threading.Semaphore(0)

        assert isinstance(plan, CreatePlan), "a plan of GceBackend.plan_copies"

        def run(name: str) -> None:
            with slots:
                if self.interrupted.is_set():
                    results[name] = GcptuiError(f"{name}: not created (interrupted)")
                else:
                    results[name] = self._guarded(plan, name)
            finished.release()

        for name in names:
            threading.Thread(target=run, args=(name,), name=f"create {name}", daemon=True).start()
        try:
            for _ in names:
                finished.acquire()
        except KeyboardInterrupt:
            self.interrupted.set()
            raise
        return {name: results[name] for name in names}

    def _guarded(self, plan: CreatePlan, name: str) -> Created | GcptuiError:
        try:
            return self.create(plan, name)
        except GcptuiError as err:
            if not self.interrupted.is_set():  # after Ctrl-C the caller says what exists, once
                self.report(name, f"failed: {err}")
            return err

    def create(self, plan: CreatePlan, name: str) -> Created:
        """Insert ``name``, wait until it runs with an address, pin its host key."""
        began = time.monotonic()
        source = plan.origin.source_image or plan.origin.source_snapshot or ""
        self.report(name, f"creating in {plan.zone} from {short_name(source)}")
        self.gce.insert(plan.zone, plan.body(name))
        instance = self._wait_running(name, plan.zone)
        self.report(name, "RUNNING; reading its host key from guest attributes")
        state = self._pin(instance)
        said = {
            "pinned": "host key pinned",
            "known": "host key already known",
            "none": f"no host key published yet: `gcptui ssh accept {name}` to trust it",
        }
        self.report(name, said[state])
        return Created(instance, state != "none", time.monotonic() - began)

    def _wait_running(self, name: str, zone: str) -> Instance:
        def read() -> Instance | None:
            if self.interrupted.is_set():
                raise GcptuiError(f"{name}: no longer waited for (interrupted)")
            raw = self.gce.get_raw(name, zone)
            return instance_from_resource(raw) if raw is not None else None

        return wait_ready(read, name, timeout=self.boot_timeout, pause=lambda _attempt: self.poll_seconds)

    def _pin(self, instance: Instance) -> str:
        """File the keys the VM's guest agent publishes (a few seconds after boot on GCE): "pinned",
        "known" (the file already had a key for the new VM's id) or "none" (none published in time)."""
        target = target_for_instance(instance, self.config.ssh, base_dir=self.config.base_dir)
        if not target.host_key_alias:
            return "none"
        deadline = time.monotonic() + self.host_key_timeout
        while True:
            keys = self.gce.guest_host_keys(instance.name, instance.zone)
            if keys:
                if pin_host_keys(target.known_hosts, target.host_key_alias, keys):
                    return "pinned"
                return "known" if matching_lines(target.known_hosts, target.host_key_alias) else "none"
            if time.monotonic() > deadline:
                return "none"
            time.sleep(self.poll_seconds)
