"""The Cloud Billing Catalog's REST surface for the emulator's machine types and GPUs.

``GET /v1/services`` and ``GET /v1/services/{id}/skus`` answer the shapes ``google-cloud-billing``
parses (``Sku``: ``description``, ``category.resourceGroup``/``usageType`` ``OnDemand`` or
``Preemptible``, ``serviceRegions``, ``pricingInfo[].pricingExpression.tieredRates[].unitPrice``
``{currencyCode, units, nanos}``), one SKU per family, kind, usage and region, as the real catalog
lists them. The prices are the bundled fallback table's unless a test sets ``rates``.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from aiohttp import web

SERVICE_ID = "6F81-5844-456A"
_GPU_NAMES = {
    "nvidia-l4": "Nvidia L4 GPU", "nvidia-tesla-t4": "Nvidia Tesla T4 GPU", "nvidia-tesla-v100": "Nvidia Tesla V100 GPU",
    "nvidia-tesla-p100": "Nvidia Tesla P100 GPU", "nvidia-tesla-p4": "Nvidia Tesla P4 GPU",
    "nvidia-tesla-a100": "Nvidia Tesla A100 GPU", "nvidia-a100-80gb": "Nvidia Tesla A100 80GB GPU",
    "nvidia-h100-80gb": "Nvidia H100 80GB GPU",
}  # fmt: skip


def region_of(zone: str) -> str:
    """``us-central1-a`` -> ``us-central1`` (the catalog prices regions, the fleet lives in zones)."""
    return zone.rsplit("-", 1)[0]


def _geography(region: str) -> str:
    if region.startswith(("us-", "northamerica-", "southamerica-")):
        return "Americas"
    if region.startswith(("europe-", "me-", "africa-")):
        return "EMEA"
    return "APAC"


def _money(price: float) -> dict[str, Any]:
    units = int(price)
    return {"currencyCode": "USD", "units": str(units), "nanos": round((price - units) * 1e9)}


def _description(kind: str, name: str, usage: str, region: str) -> str:
    if kind == "gpu":
        what = _GPU_NAMES.get(name, name)
    else:
        predefined = " Predefined" if name == "n1" else ""
        what = f"{name.upper()}{predefined} Instance {'Core' if kind == 'core' else 'Ram'}"
    spot = "Spot Preemptible " if usage == "Preemptible" else ""
    return f"{spot}{what} running in {_geography(region)}"


def sku_json(kind: str, name: str, region: str, usage: str, price: float, index: int) -> dict[str, Any]:
    """One SKU as ``services.skus.list`` returns it."""
    sku_id = f"{index:04X}-{abs(hash((kind, name, region, usage))) % 0xFFFF:04X}-{SERVICE_ID[:4]}"
    group = {"core": "N1Standard" if name == "n1" else "CPU", "ram": "N1Standard" if name == "n1" else "RAM"}
    return {
        "name": f"services/{SERVICE_ID}/skus/{sku_id}",
        "skuId": sku_id,
        "description": _description(kind, name, usage, region),
        "category": {
            "serviceDisplayName": "Compute Engine",
            "resourceFamily": "Compute",
            "resourceGroup": "GPU" if kind == "gpu" else group[kind],
            "usageType": usage,
        },
        "serviceRegions": [region],
        "pricingInfo": [
            {
                "summary": "",
                "pricingExpression": {
                    "usageUnit": "GiBy.h" if kind == "ram" else "h",
                    "displayQuantity": 1,
                    "tieredRates": [{"startUsageAmount": 0, "unitPrice": _money(price)}],
                    "usageUnitDescription": "gibibyte hour" if kind == "ram" else "hour",
                    "baseUnit": "By.s" if kind == "ram" else "s",
                    "baseUnitDescription": "byte second" if kind == "ram" else "second",
                    "baseUnitConversionFactor": 3865470566400 if kind == "ram" else 3600,
                },
                "currencyConversionRate": 1,
                "effectiveTime": "2025-01-15T08:00:00.000Z",
            }
        ],
        "serviceProviderName": "Google",
        "geoTaxonomy": {"type": "REGIONAL", "regions": [region]},
    }


class CatalogApi:
    """The catalog for the regions of the emulated zones; ``down`` makes it answer 503."""

    def __init__(self, zones: list[str], rates: dict[str, float]) -> None:
        self.zones = zones
        self.rates = dict(rates)  # KIND/NAME/REGION-or-*/USAGE -> USD, as in the fallback table
        self.down = False
        self.calls = 0

    def skus(self) -> list[dict[str, Any]]:
        regions = sorted({region_of(zone) for zone in self.zones})
        out: list[dict[str, Any]] = []
        for key, price in sorted(self.rates.items()):
            kind, name, where, usage = key.split("/")
            for region in regions if where == "*" else [where]:
                out.append(sku_json(kind, name, region, usage, price, len(out)))
        return out

    def _unavailable(self) -> web.Response:
        body = {
            "error": {
                "code": 503,
                "message": "The service is currently unavailable.",
                "status": "UNAVAILABLE",
            }
        }
        return web.Response(status=503, text=json.dumps(body), content_type="application/json")

    async def list_services(self, request: web.Request) -> web.Response:
        if self.down:
            return self._unavailable()
        service = {"name": f"services/{SERVICE_ID}", "serviceId": SERVICE_ID, "displayName": "Compute Engine",
                   "businessEntityName": "businessEntities/GCP"}  # fmt: skip
        return web.json_response({"services": [service], "nextPageToken": ""})

    async def list_skus(self, request: web.Request) -> web.Response:
        self.calls += 1
        if self.down:
            return self._unavailable()
        if request.match_info["service"] != SERVICE_ID:
            body = {"error": {"code": 404, "message": "Service not found.", "status": "NOT_FOUND"}}
            return web.Response(status=404, text=json.dumps(body), content_type="application/json")
        skus = self.skus()
        try:
            size = max(1, min(int(request.query.get("pageSize") or 5000), 5000))
            token = request.query.get("pageToken") or ""
            start = int(base64.urlsafe_b64decode(token.encode()).decode()) if token else 0
        except ValueError:
            body = {"error": {"code": 400, "message": "Invalid page token.", "status": "INVALID_ARGUMENT"}}
            return web.Response(status=400, text=json.dumps(body), content_type="application/json")
        end = start + size
        following = base64.urlsafe_b64encode(str(end).encode()).decode() if end < len(skus) else ""
        return web.json_response({"skus": skus[start:end], "nextPageToken": following})

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/services", self.list_services)
        app.router.add_get("/v1/services/{service}/skus", self.list_skus)
