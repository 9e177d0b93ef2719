"""``ls --json`` carries ``usd_per_hour`` and ``price_source``: from the (emulated) Cloud Billing Catalog
through its REST API (google-auth's session), then from its cache, and from the bundled table,
marked as such, when the catalog is unreachable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gcptui.remote.cloud.price_catalog import cache_path, fallback_book, quick_price_book
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.tui.cli.main import main

L4_SPOT = 0.5  # the emulated catalog's Spot L4 price: not the bundled table's


def _ls(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, dict], str]:  # type: ignore[type-arg]
    assert main(["ls", "--json", "--config", str(config)]) == 0
    out = capsys.readouterr()
    return {row["name"]: row for row in json.loads(out.out)}, out.err


def test_ls_json_prices_from_the_catalog_then_its_cache(
    api_emulator: EmulatorThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api_emulator.add_instance(
        "spot-l4", "us-central1-a", machine_type="g2-standard-8", gpus=[("nvidia-l4", 1)], spot=True
    )
    api_emulator.add_instance("odd", "us-central1-a", machine_type="n1-custom-4-8192")
    catalog = api_emulator.emulator.catalog
    api_emulator.call(catalog.rates.__setitem__, "gpu/nvidia-l4/*/Preemptible", L4_SPOT)
    config = api_emulator.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + '\n[[hosts]]\nname = "box"\naddress = "127.0.0.9"\n')

    rows, err = _ls(config, capsys)
    table = fallback_book().rates
    expected = 8 * table["core/g2/*/Preemptible"] + 32 * table["ram/g2/*/Preemptible"] + L4_SPOT
    assert rows["spot-l4"]["usd_per_hour"] == pytest.approx(expected, abs=1e-3)
    assert rows["spot-l4"]["price_source"] == "catalog" and err == ""
    assert rows["odd"]["usd_per_hour"] is None and rows["box"]["usd_per_hour"] is None
    assert catalog.calls == 1 and cache_path(api_emulator.endpoint).is_file()

    again, _ = _ls(config, capsys)  # a second command reads the cache, not the catalog
    assert again["spot-l4"]["price_source"] == "cache"
    assert again["spot-l4"]["usd_per_hour"] == rows["spot-l4"]["usd_per_hour"] and catalog.calls == 1
    # The emulator's prices are its own: never the cache of Google's catalog (they were shown as
    # the real catalog's for a day).
    assert not cache_path().exists() and quick_price_book()[0].source == "fallback"


def test_catalog_unreachable_uses_the_bundled_table_and_says_so(
    api_emulator: EmulatorThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api_emulator.add_instance(
        "od-a100", "us-central1-a", machine_type="a2-highgpu-1g", gpus=[("nvidia-tesla-a100", 1)]
    )
    api_emulator.catalog_unreachable()
    config = api_emulator.write_config(tmp_path / "gcptui.toml")
    rows, err = _ls(config, capsys)
    table = fallback_book().rates
    expected = (
        12 * table["core/a2/*/OnDemand"]
        + 85 * table["ram/a2/*/OnDemand"]
        + table["gpu/nvidia-tesla-a100/*/OnDemand"]
    )
    assert rows["od-a100"]["usd_per_hour"] == pytest.approx(expected, abs=1e-3)
    assert rows["od-a100"]["price_source"] == "fallback" and rows["od-a100"]["price_as_of"] == "2025-01-15"
    assert "prices: fallback (2025-01-15): catalog unreachable" in err and len(err.splitlines()) == 1
    assert not cache_path(api_emulator.endpoint).exists()  # a fallback is never cached as the catalog's


def test_the_tui_reads_a_cold_catalog_in_the_background(api_emulator: EmulatorThread, tmp_path: Path) -> None:
    # A cold cache must not hold up the first table: it shows the bundled table, marked, while the
    # catalog is read in a thread; the next reading has the catalog's prices.
    from gcptui.remote.cloud.fleet import FleetSource
    from gcptui.remote.config import load_config

    api_emulator.add_instance(
        "spot-l4", "us-central1-a", machine_type="g2-standard-8", gpus=[("nvidia-l4", 1)], spot=True
    )
    catalog = api_emulator.emulator.catalog
    api_emulator.call(catalog.rates.__setitem__, "gpu/nvidia-l4/*/Preemptible", L4_SPOT)
    assert not cache_path(api_emulator.endpoint).exists()
    source = FleetSource(load_config(api_emulator.write_config(tmp_path / "gcptui.toml")))
    source.background_prices = True
    first = {i.name: i for i in source.snapshot().instances}["spot-l4"]
    assert first.price_source == "fallback"  # at once, without waiting for the catalog
    assert source.wait_for_prices(timeout=60)
    then = {i.name: i for i in source.snapshot().instances}["spot-l4"]
    assert then.price_source == "catalog" and then.usd_per_hour != first.usd_per_hour
    assert cache_path(api_emulator.endpoint).exists()  # and the next start is warm
