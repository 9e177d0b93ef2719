"""The fleet: GCE instances of the configured project beside the static ``[[hosts]]``.

``FleetSource.snapshot()`` is blocking (plain HTTP calls); the TUI calls it from a worker thread and
the CLI directly. It reads through ``ComputeReader`` (JSON over google-auth's session), never the
Compute client library: importing ``google.cloud.compute_v1`` alone takes over a second, longer than
listing 1,000 VMs. The library's client (``gce()``) is built on first use, for changes only.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from gcptui.remote.config import Config, GcpConfig
from gcptui.remote.errors import CloudError, ConfigError
from gcptui.remote.models import GKE_NODE_LABEL, FleetSnapshot, Instance, State

if TYPE_CHECKING:
    from gcptui.remote.cloud.compute_rest import ComputeReader
    from gcptui.remote.cloud.gce import GceClient
    from gcptui.remote.cloud.oslogin import OsLogin
    from gcptui.remote.cloud.pricing import PriceBook

PRICES_MAX_AGE = 6 * 3600.0  # a long-running TUI reads prices again (the cache spares the catalog)


def unreachable_notes(zones: list[str]) -> tuple[str, ...]:
    """The one line that says which zones GCE could not list (their VMs are missing), if any."""
    if not zones:
        return ()
    return (f"zone{'s' if len(zones) > 1 else ''} {', '.join(zones)} unreachable: GCE could not list "
            "them, so their VMs are not shown; try again in a minute",)  # fmt: skip


def host_instances(config: Config) -> list[Instance]:
    """Static ``[[hosts]]`` as fleet rows, status UNKNOWN and state ``unknown``: gcptui neither starts
    nor stops them, and whether one answers is known only once SSH reaches it."""
    return [
        Instance(
            name=h.name, zone="", status="UNKNOWN", external_ip=h.address, source="host", state=State.UNKNOWN
        )
        for h in config.hosts
    ]


class FleetSource:
    """Reads the whole fleet; one aggregated Compute call when no zones are configured."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._gce: GceClient | None = None
        self._gce_lock = threading.Lock()
        self._reader: ComputeReader | None = None
        self._project: str | None = None
        self.oslogin: OsLogin | None = None  # built with the reader
        self._prices: PriceBook | None = None
        self._prices_read = 0.0
        # The TUI sets this: a cold price cache is read from the catalog in a thread (it pages through
        # thousands of SKUs) while the table shows the old cache or the bundled table, marked.
        self.background_prices = False
        self._price_loader: threading.Thread | None = None
        # The rows of the other kinds of compute (TPU nodes, Vertex AI jobs, GKE workloads), added to each
        # snapshot: set by ``Services`` from the compute registry (this module sits below it).
        self.more_rows: Callable[[], tuple[list[Instance], list[str]]] | None = None
        # GKE nodes' instances (``GKE_NODE_LABEL``) in the snapshot: `ls --all`, and `vm` (which names them).
        self.gke_nodes = False

    @property
    def gcp(self) -> GcpConfig | None:
        return self.config.gcp

    def project(self) -> str:
        """The project to list: the config's, else gcloud's (as ``gcloud config get project``), else
        GOOGLE_CLOUD_PROJECT; one warning line on stderr when the last two disagree."""
        assert self.gcp is not None
        if self.gcp.project:
            return self.gcp.project
        if self._project is not None:
            return self._project
        from gcptui.remote.cloud.gcloud_config import project_sources

        # Read once: the status line asks on every refresh, and gcloud's files do not change under us.
        project, disagreement = project_sources()
        self._project = project
        if disagreement:
            import sys

            print(f"gcptui: warning: {disagreement}", file=sys.stderr)
        if not project:
            where = (
                f"[gcp] project in {self.config.path}" if self.config.path else "[gcp] project in gcptui.toml"
            )
            raise ConfigError(
                f"No Google Cloud project: set {where}, set GOOGLE_CLOUD_PROJECT, "
                "or run `gcloud config set project PROJECT_ID`"
            )
        return project

    def describe(self) -> str:
        """Where the data comes from, for the status line."""
        parts = []
        if self.gcp is not None:
            try:
                project = self.project()
            except ConfigError:
                project = "?"
            where = self.gcp.api_endpoint or "compute.googleapis.com"
            zones = ",".join(self.gcp.zones) if self.gcp.zones else "all zones"
            parts.append(f"project {project} ({zones}) via {where}")
        if self.config.hosts:
            parts.append(f"{len(self.config.hosts)} static host{'s' if len(self.config.hosts) != 1 else ''}")
        return "; ".join(parts) or "no [gcp] and no [[hosts]] configured"

    def reader(self) -> ComputeReader:
        """The light read-only client (no client library import), built on first use with the
        credentials every Google call of this source shares."""
        if self._reader is None:
            assert self.gcp is not None
            from gcptui.remote.cloud.auth import build_credentials, read_token
            from gcptui.remote.cloud.compute_rest import ComputeReader
            from gcptui.remote.cloud.oslogin import OsLogin

            token = (
                self.config.resolve_local(self.gcp.access_token_file) if self.gcp.access_token_file else None
            )
            credentials = build_credentials(self.gcp.api_endpoint, read_token(token) if token else None)
            self._reader = ComputeReader(
                self.project(), list(self.gcp.zones), self.gcp.api_endpoint, credentials
            )
            self._reader.token_file = str(token) if token else None
            key = self.config.resolve_local(self.config.ssh.key) if self.config.ssh.key else None
            self.oslogin = OsLogin(self._reader, key)
        return self._reader

    def gce(self) -> GceClient:
        """The Compute client library's client (for changes), built (and imported) on first use."""
        with self._gce_lock:  # keep-alive and the app may ask from two worker threads at once
            return self._build_gce()

    def _build_gce(self) -> GceClient:
        if self._gce is None:
            assert self.gcp is not None
            from gcptui.remote.cloud.gce import GceClient

            reader = self.reader()
            self._gce = GceClient(
                project=reader.project,
                zones=list(self.gcp.zones),
                api_endpoint=self.gcp.api_endpoint,
                credentials=reader.credentials,
                reader=reader,  # one session for both: zone operations and disks are read through it
            )
            self._gce.token_file = reader.token_file
        return self._gce

    def prices(self) -> PriceBook | None:
        """Hourly rates (catalog, cache or fallback; see ``price_catalog``); None without ``[gcp]``."""
        if self.gcp is None:
            return None
        if self._prices is None or time.monotonic() - self._prices_read > PRICES_MAX_AGE:
            if not self.background_prices:
                self._load_prices()
            elif self._price_loader is None or not self._price_loader.is_alive():
                from gcptui.remote.cloud.price_catalog import quick_price_book

                quick, fresh = quick_price_book(endpoint=self._catalog_endpoint())
                if fresh:
                    self._prices, self._prices_read = quick, time.monotonic()
                else:
                    if self._prices is None:
                        self._prices = quick  # until the catalog is read; _prices_read stays old
                    self._price_loader = threading.Thread(
                        target=self._load_prices, name="prices", daemon=True
                    )
                    self._price_loader.start()
        return self._prices

    def _catalog_endpoint(self) -> str:
        from gcptui.remote.cloud.auth import is_local_endpoint

        assert self.gcp is not None
        # The emulator serves the catalog on its own endpoint; a real override is Compute's alone.
        return self.gcp.api_endpoint if is_local_endpoint(self.gcp.api_endpoint) else ""

    def _load_prices(self) -> None:
        from gcptui.remote.cloud.price_catalog import load_price_book

        book = load_price_book(self._catalog_endpoint(), self.reader().session)
        self._prices, self._prices_read = book, time.monotonic()

    def wait_for_prices(self, timeout: float) -> bool:
        """Until a background catalog read has ended (tests, and a CLI that wants the real prices)."""
        loader = self._price_loader
        if loader is not None:
            loader.join(timeout)
        return loader is None or not loader.is_alive()

    def priced(self, instances: list[Instance]) -> list[Instance]:
        """``instances`` (VMs, as listed) with ``usd_per_hour`` and where the price came from."""
        book = self.prices()
        if book is None:
            return instances
        return [
            dataclasses.replace(
                i, usd_per_hour=book.hourly(i), price_source=book.source, price_as_of=book.as_of
            )
            for i in instances
        ]

    def snapshot(self) -> FleetSnapshot:
        """List GCE instances (when configured), priced, and add the static hosts."""
        instances: list[Instance] = []
        errors: tuple[str, ...] = ()
        if self.gcp is not None:
            reader = self.reader()
            listed = reader.list_instances()
            if not self.gke_nodes:
                listed = [i for i in listed if GKE_NODE_LABEL not in i.labels]
            instances.extend(self.priced(listed))
            errors = unreachable_notes(reader.unreachable) + self._login_notes(instances)
            book = self.prices()
            if book is not None and book.note:
                errors += (f"prices: {book.source} ({book.as_of}): {book.note}",)
        instances.extend(host_instances(self.config))
        if self.more_rows is not None:
            rows, notes = self.more_rows()
            instances.extend(rows)
            errors += tuple(notes)
        order = {"gce": 0, "tpu": 1, "vertex": 2, "gke": 3, "host": 4}
        instances.sort(key=lambda i: (order.get(i.source, 5), i.zone, i.name))
        return FleetSnapshot(tuple(instances), datetime.now(UTC), self.describe(), errors)

    def _login_notes(self, instances: list[Instance]) -> tuple[str, ...]:
        """Resolve the OS Login user when a VM needs it (cached after the first success)."""
        login = self.oslogin
        if login is None or login.user is not None:
            return ()
        try:
            if not any(login.applies(i) for i in instances if i.status == "RUNNING"):
                return ()
            login.resolve()
        except CloudError as err:
            return (f"OS Login: {err}",)
        return ()

    def login_user(self, instance: Instance) -> str | None:
        """The SSH user OS Login dictates for ``instance`` (None: [ssh].user applies).

        Raises ``CloudError`` when OS Login is on for it and its user could not be resolved."""
        login = self.oslogin
        if login is None or not login.applies_cached(instance):
            return None
        if login.user is None:
            raise CloudError(
                f"{instance.name} uses OS Login: {login.problem or 'its user is not resolved yet'}"
            )
        return login.user

    def resolve(self, names: list[str], snapshot: FleetSnapshot | None = None) -> list[Instance]:
        """Instances by name, in the order given; an unknown name is one clear error."""
        snapshot = snapshot or self.snapshot()
        found: list[Instance] = []
        for name in names:
            instance = snapshot.find(name)
            if instance is None:
                known = ", ".join(sorted(i.name for i in snapshot.instances)) or "none"
                from gcptui.remote.errors import NotFoundError

                raise NotFoundError(f"no instance or host named {name!r} (known: {known}): check `gcptui ls`")
            found.append(instance)
        return found
