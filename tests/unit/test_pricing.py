"""Hourly prices from catalog SKUs (real ``services.skus.list`` shapes) and the bundled table (pure)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gcptui.remote.cloud.price_catalog import fallback_book
from gcptui.remote.cloud.pricing import PriceBook, machine_shape, rates_from_skus
from gcptui.remote.models import Gpu, Instance, State, run_spend
from gcptui.tui.live.columns import fleet_cost_line, price_cell


def _sku(
    description: str, group: str, usage: str, region: str, units: str, nanos: int, unit: str = "h"
) -> dict[str, Any]:
    return {
        "description": description,
        "category": {"serviceDisplayName": "Compute Engine", "resourceFamily": "Compute", "resourceGroup": group,
                     "usageType": usage},
        "serviceRegions": [region],
        "pricingInfo": [{"pricingExpression": {"usageUnit": unit, "tieredRates": [
            {"startUsageAmount": 0, "unitPrice": {"currencyCode": "USD", "units": units, "nanos": nanos}}]}}],
    }  # fmt: skip


SKUS = [
    _sku("G2 Instance Core running in Americas", "CPU", "OnDemand", "us-central1", "0", 24988000),
    _sku("G2 Instance Ram running in Americas", "RAM", "OnDemand", "us-central1", "0", 2927000, "GiBy.h"),
    _sku(
        "Spot Preemptible G2 Instance Core running in Americas",
        "CPU",
        "Preemptible",
        "us-central1",
        "0",
        10000000,
    ),
    _sku(
        "Spot Preemptible G2 Instance Ram running in Americas",
        "RAM",
        "Preemptible",
        "us-central1",
        "0",
        1000000,
    ),
    _sku("Nvidia L4 GPU running in Americas", "GPU", "OnDemand", "us-central1", "0", 559700000),
    _sku(
        "Spot Preemptible Nvidia L4 GPU running in Americas",
        "GPU",
        "Preemptible",
        "us-central1",
        "0",
        220000000,
    ),
    _sku(
        "N1 Predefined Instance Core running in Americas",
        "N1Standard",
        "OnDemand",
        "us-central1",
        "0",
        31611000,
    ),
    _sku(
        "N1 Predefined Instance Ram running in Americas",
        "N1Standard",
        "OnDemand",
        "us-central1",
        "0",
        4237000,
    ),
    _sku("Nvidia H100 80GB GPU running in Americas", "GPU", "OnDemand", "us-east4", "11", 61240000),
    _sku(
        "Commitment v1: G2 Cpu in Americas for 1 Year", "CPU", "Commit1Yr", "us-central1", "0", 1
    ),  # not a rate
    _sku(
        "N1 Custom Instance Core running in Americas", "CPU", "OnDemand", "us-central1", "0", 1
    ),  # custom: skipped
]


def test_rates_from_catalog_skus() -> None:
    rates = rates_from_skus(SKUS)
    assert rates["core/g2/us-central1/OnDemand"] == pytest.approx(0.024988)
    assert rates["ram/g2/us-central1/Preemptible"] == pytest.approx(0.001)
    assert rates["gpu/nvidia-l4/us-central1/Preemptible"] == pytest.approx(0.22)
    assert rates["core/n1/us-central1/OnDemand"] == pytest.approx(0.031611)
    assert rates["gpu/nvidia-h100-80gb/us-east4/OnDemand"] == pytest.approx(11.06124)
    assert not any("commit" in key or "custom" in key for key in rates) and len(rates) == 9


def test_hourly_price_of_a_vm() -> None:
    book = PriceBook(rates_from_skus(SKUS), "catalog", "2026-11-22")
    l4 = Instance("a", "us-central1-a", "RUNNING", "g2-standard-8", (Gpu("nvidia-l4", 1),))
    assert book.hourly(l4) == pytest.approx(8 * 0.024988 + 32 * 0.002927 + 0.5597, abs=1e-4)
    spot = Instance("b", "us-central1-b", "RUNNING", "g2-standard-8", (Gpu("nvidia-l4", 1),), spot=True)
    assert book.hourly(spot) == pytest.approx(8 * 0.01 + 32 * 0.001 + 0.22, abs=1e-4)
    assert book.hourly(Instance("c", "europe-west4-a", "RUNNING", "g2-standard-8")) is None  # no rate there
    assert book.hourly(Instance("d", "us-central1-a", "RUNNING", "n1-custom-4-8192")) is None
    assert book.hourly(Instance("h", "", "UNKNOWN", source="host")) is None
    assert machine_shape("a3-highgpu-8g") is not None and machine_shape("n1-standard-8").memory_gib == 30.0  # type: ignore[union-attr]


def test_the_bundled_fallback_is_dated_and_prices_every_region() -> None:
    book = fallback_book("catalog unreachable")
    assert book.source == "fallback" and book.as_of == "2025-01-15"
    vm = Instance("a", "asia-east1-c", "RUNNING", "a2-highgpu-1g", (Gpu("nvidia-tesla-a100", 1),))
    price = book.hourly(vm)
    assert price is not None and 3.0 < price < 5.0


def test_price_cell_and_fleet_cost_line_mark_where_prices_came_from() -> None:
    def vm(name: str, status: str, price: float | None, source: str = "catalog") -> Instance:
        state = State.RUNNING if status == "RUNNING" else State.STOPPED
        return Instance(name, "us-central1-a", status, "g2-standard-8", usd_per_hour=price, price_source=source,
                        price_as_of="2026-11-22", state=state)  # fmt: skip

    assert price_cell(vm("a", "RUNNING", 1.234)) == "1.23"
    assert str(price_cell(vm("a", "RUNNING", 1.234, "fallback"))) == "~1.23"
    assert price_cell(vm("a", "RUNNING", None)) == "-"
    fleet = [vm("a", "RUNNING", 1.0), vm("b", "RUNNING", 2.5), vm("c", "TERMINATED", 9.0)]
    assert fleet_cost_line(fleet) == "$3.50/h running"
    assert fleet_cost_line([vm("a", "RUNNING", 1.0, "fallback"), vm("b", "RUNNING", None)]) == (
        "~$1.00/h running, 1 unpriced (fallback prices, 2026-11-22)"
    )
    assert fleet_cost_line([vm("c", "TERMINATED", 9.0)]) == ""


def test_run_spend_is_price_times_time_since_the_job_started() -> None:
    now = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    assert run_spend(2.0, "2026-11-22T10:30:00Z", None, now) == 3.0
    assert run_spend(2.0, "2026-11-22T10:30:00+00:00", "2026-11-22T11:00:00+00:00", now) == 1.0
    assert run_spend(None, "2026-11-22T10:30:00Z", None, now) is None
    assert run_spend(2.0, None, None, now) is None and run_spend(2.0, "garbage", None, now) is None


def test_shared_core_e2_is_priced_offline_at_its_billed_fraction_of_a_vcpu() -> None:
    """`keeper deploy`'s default e2-small gets a price from the bundled table, not "price unknown"."""
    book = fallback_book("catalog unreachable")
    prices = {}
    for machine in ("e2-micro", "e2-small", "e2-medium"):
        vm = Instance(
            name="k", zone="europe-west4-a", status="RUNNING", machine_type=machine, spot=False, source="gce"
        )
        prices[machine] = book.hourly(vm)
    assert prices == {"e2-micro": 0.0084, "e2-small": 0.0168, "e2-medium": 0.0335}
