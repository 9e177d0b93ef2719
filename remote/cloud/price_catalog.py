"""Where prices come from: the Cloud Billing Catalog API, its copy under ``~/.gcptui``, or the table
bundled with gcptui.

Order: a cached catalog read younger than ``CACHE_HOURS``; else the catalog itself (Compute Engine's
SKUs over REST with the fleet's google-auth session, written to the cache); else an older cache; else the
bundled ``prices_fallback.json`` (dated inside; see docs/COST.md). The faces say which one
(``price_source``) and as of when, so a fallback or a stale price never passes for a fresh one.

Against the emulator (a plain-http loopback ``[gcp] api_endpoint``) the catalog is asked at that same
endpoint, which serves the catalog's REST shapes for its machine types.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

from gcptui.remote.cloud.pricing import PriceBook, rates_from_skus

log = logging.getLogger(__name__)

COMPUTE_SERVICE = "services/6F81-5844-456A"  # Compute Engine in the Cloud Billing Catalog
BILLING_ENDPOINT = "https://cloudbilling.googleapis.com"
CACHE_HOURS = 24.0
CATALOG_TIMEOUT = 20.0
FALLBACK_FILE = "prices_fallback.json"


def cache_path(endpoint: str = "") -> Path:
    """The cache of one catalog: ``prices.json`` for Google's, ``prices-<hash>.json`` for another
    endpoint (the emulator's), so an emulator's prices are never shown as the real catalog's."""
    folder = Path(os.path.expanduser("~/.gcptui"))
    key = _endpoint_key(endpoint)
    if not key:
        return folder / "prices.json"
    return folder / f"prices-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def _endpoint_key(endpoint: str) -> str:
    return endpoint.strip().rstrip("/")


def fallback_book(note: str = "") -> PriceBook:
    """The bundled table: approximate list prices, dated."""
    text = resources.files("gcptui.remote.cloud").joinpath(FALLBACK_FILE).read_text(encoding="utf-8")
    data = json.loads(text)
    return PriceBook(dict(data["rates"]), "fallback", str(data["recorded"]), note)


def read_cache(path: Path, max_age: timedelta | None, endpoint: str = "") -> PriceBook | None:
    """The cached catalog read, if there is one of ``endpoint``'s catalog (and, with ``max_age``,
    young enough). A cache without its endpoint (written before it was recorded) is not used."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        fetched = datetime.fromisoformat(data["fetched_at"])
        rates = {str(k): float(v) for k, v in data["rates"].items()}
        same = data["endpoint"] == _endpoint_key(endpoint)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not same or not rates or (max_age is not None and datetime.now(UTC) - fetched > max_age):
        return None
    return PriceBook(rates, "cache", fetched.date().isoformat())


def write_cache(path: Path, rates: dict[str, float], fetched: datetime, endpoint: str = "") -> None:
    """Atomically: a reader never sees half a file (a new temporary, ``O_EXCL|O_NOFOLLOW``: a
    planted link is never written through)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    data = json.dumps(
        {"fetched_at": fetched.isoformat(), "endpoint": _endpoint_key(endpoint), "rates": rates}
    )
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def fetch_skus(endpoint: str, session: Any) -> list[dict[str, Any]]:
    """Every Compute Engine SKU (all pages) as the catalog's REST JSON (camelCase).

    ``session`` is a google-auth ``AuthorizedSession`` (the fleet's credentials): a plain GET per page,
    no ``google-cloud-billing`` import (a second of start-up that ``gcptui ls`` would pay)."""
    base = (endpoint or BILLING_ENDPOINT).rstrip("/")
    base = base if "://" in base else f"https://{base}"
    params = {"pageSize": "5000", "currencyCode": "USD"}
    skus: list[dict[str, Any]] = []
    while True:
        # One quick try: with the catalog unreachable the fallback is used, not minutes of retries.
        response = session.get(f"{base}/v1/{COMPUTE_SERVICE}/skus", params=params, timeout=CATALOG_TIMEOUT)
        if response.status_code >= 400:
            raise ValueError(f"the catalog answered {response.status_code} {response.reason}")
        page = response.json()
        skus.extend(page.get("skus") or ())
        if not page.get("nextPageToken"):
            return skus
        params["pageToken"] = page["nextPageToken"]


def quick_price_book(cache: Path | None = None, endpoint: str = "") -> tuple[PriceBook, bool]:
    """What can be had without the network: (book, fresh). A young cache is fresh; else the old
    cache or the bundled table, noted as "catalog loading", while the caller reads the catalog."""
    cache = cache or cache_path(endpoint)
    young = read_cache(cache, timedelta(hours=CACHE_HOURS), endpoint)
    if young is not None:
        return young, True
    old = read_cache(cache, None, endpoint)
    if old is not None:
        return PriceBook(old.rates, "cache", old.as_of, "catalog loading"), False
    return fallback_book("catalog loading"), False


def load_price_book(endpoint: str, session: Any, *, cache: Path | None = None) -> PriceBook:
    """The freshest prices available: young cache, catalog, old cache, fallback (never raises)."""
    cache = cache or cache_path(endpoint)
    young = read_cache(cache, timedelta(hours=CACHE_HOURS), endpoint)
    if young is not None:
        return young
    try:
        rates = rates_from_skus(fetch_skus(endpoint, session))
        if not rates:
            raise ValueError("the catalog listed no machine or GPU prices")
    except Exception as err:  # any failure (network, auth, shape): prices fall back, the fleet still lists
        reason = " ".join(str(err).split())[:160] or type(err).__name__
        log.info("price catalog unreachable: %s", reason)
        old = read_cache(cache, None, endpoint)
        if old is not None:
            return PriceBook(old.rates, "cache", old.as_of, f"catalog unreachable ({reason})")
        return fallback_book(f"catalog unreachable ({reason})")
    now = datetime.now(UTC)
    try:
        write_cache(cache, rates, now, endpoint)
    except OSError as err:
        log.info("cannot cache prices in %s: %s", cache, err)
    return PriceBook(rates, "catalog", now.date().isoformat())
