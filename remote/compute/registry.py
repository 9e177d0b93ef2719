"""The registry: every kind of compute gcptui knows, and the one object workflows and faces use.

Backends are named here by module path and imported only when the config asks for them, as
Harlequin lists its adapters without importing them: ``gcptui ls`` on a hosts-only config never
imports a Google library. Adding a kind of compute adds one line to ``BACKENDS``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator

from gcptui.remote.cloud.fleet import FleetSource
from gcptui.remote.compute.backend import SHARED_FLEET, Backend, BackendContext, Capability, Rows
from gcptui.remote.config import Config
from gcptui.remote.errors import GcptuiError
from gcptui.remote.models import Instance, Source

# kind -> "module:Class". The order is the fleet table's: GCE first, static hosts last.
BACKENDS: dict[str, str] = {
    "gce": "gcptui.remote.compute.gce.backend:GceBackend",
    "tpu": "gcptui.remote.compute.tpu.backend:TpuBackend",
    "vertex": "gcptui.remote.compute.vertex.backend:VertexBackend",
    "gke": "gcptui.remote.compute.gke.backend:GkeBackend",
    "host": "gcptui.remote.compute.hosts.backend:HostsBackend",
}


def backend_class(kind: str) -> type[Backend]:
    """The class registered for ``kind`` (imported now)."""
    module, _, name = BACKENDS[kind].partition(":")
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, Backend) and cls.kind == kind, f"{BACKENDS[kind]} is not the {kind} backend"
    return cls


def configured(kind: str, context: BackendContext) -> Backend | None:
    """The backend for ``kind`` when the config asks for it (None otherwise)."""
    return backend_class(kind).configured(context)


def fleet_source(config: Config) -> FleetSource:
    """The fleet listing of ``config`` (its GCE instances, priced, and static hosts; ``more_rows`` adds
    the other kinds): how a headless command gets one without importing ``remote/cloud/``, which the
    faces never do (import-linter). ``Services.fleet`` is the long-lived processes' one."""
    return FleetSource(config)


class Compute:
    """The configured backends of one process, and what the faces ask of a row."""

    def __init__(self, backends: dict[Source, Backend]) -> None:
        self.backends = backends

    @classmethod
    def from_context(cls, context: BackendContext) -> Compute:
        found: dict[Source, Backend] = {}
        for kind in BACKENDS:
            backend = configured(kind, context)
            if backend is not None:
                found[backend.kind] = backend
        return cls(found)

    @classmethod
    def over(cls, fleet: FleetSource) -> Compute:
        """The backends of ``fleet``'s config, sharing its Google clients (no SSH: a headless command
        that only lists and changes machines)."""
        return cls.from_context(BackendContext(fleet.config, shared={SHARED_FLEET: fleet}))

    def __iter__(self) -> Iterator[Backend]:
        return iter(self.backends.values())

    def of(self, row: Instance) -> Backend:
        """The backend that listed ``row``; a one-line error when its kind is not configured."""
        backend = self.backends.get(row.source)
        if backend is None:
            raise GcptuiError(f"{row.name}: no {row.source} backend is configured for this row")
        return backend

    def backend(self, kind: Source, needed_for: str) -> Backend:
        """The configured backend of ``kind``, for what concerns its provider's project rather than one
        row (the keeper's project-wide SSH keys, OS Login, IAM); a one-line error naming
        ``needed_for`` when the config does not ask for it."""
        backend = self.backends.get(kind)
        if backend is None:
            raise GcptuiError(f"{needed_for} needs the {kind} backend: the config does not set it up")
        return backend

    def can(self, row: Instance, capability: Capability) -> bool:
        """Whether ``row`` can do ``capability`` (False for a kind not configured)."""
        backend = self.backends.get(row.source)
        return backend is not None and backend.can(row, capability)

    def in_fleet_listing(self, row: Instance) -> bool:
        """Whether ``row`` is one the fleet listing itself carries (a VM, a static host): the VMs'
        ``FleetSource`` prices it; other kinds' rows come from ``rows_beyond_fleet``."""
        backend = self.backends.get(row.source)
        return backend is not None and backend.listed_by_fleet

    def list_rows(self) -> Rows:
        """Every configured backend's rows, in registry order, with all their error lines."""
        rows: list[Instance] = []
        errors: list[str] = []
        for backend in self:
            listed = backend.list_rows()
            rows.extend(listed.rows)
            errors.extend(listed.errors)
        return Rows(tuple(rows), tuple(errors))

    def recovers(self) -> bool:
        """Whether any configured kind can bring a row back (keep-alive has something to watch)."""
        return any(backend.recovers_rows for backend in self)

    def watch_rows(self) -> Rows:
        """The ``watch_rows`` of every configured kind that can bring rows back (keep-alive's poll:
        as cheap as each lists)."""
        rows: list[Instance] = []
        errors: list[str] = []
        for backend in self:
            if not backend.recovers_rows:
                continue
            listed = backend.watch_rows()
            rows.extend(listed.rows)
            errors.extend(listed.errors)
        return Rows(tuple(rows), tuple(errors))

    def rows_beyond_fleet(self) -> tuple[list[Instance], list[str]]:
        """The rows of every configured kind that ``FleetSource.snapshot`` does not read itself (it
        lists GCE instances and static hosts): ``FleetSource.more_rows`` in every process."""
        rows: list[Instance] = []
        notes: list[str] = []
        for backend in self:
            if backend.listed_by_fleet:
                continue
            listed = backend.list_rows()
            rows.extend(listed.rows)
            notes.extend(listed.errors)
        return rows, notes
