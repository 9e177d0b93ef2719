"""The create form on a base VM (``C``): names and a count, zone, Spot, a group; Enter creates the VMs
like the base on the strict emulator, one notification for it all; a bad name is refused in the form; a group
is recorded in gcptui.toml and shown as its row at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Checkbox, Input

from gcptui.remote.cloud.create import expand_names
from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.errors import ConfigError
from gcptui.tui.app import GcptuiApp
from gcptui.tui.dialogs.create_form import CreateFormScreen
from tests.tui.test_fleet_jobs import until
from tests.tui.test_readonly import notices


def test_expand_names() -> None:
    assert expand_names("exp", 3) == ["exp-0", "exp-1", "exp-2"]  # as `vm create --count 3`
    assert expand_names("exp", 2, first=3) == ["exp-3", "exp-4"]
    assert expand_names("exp") == ["exp"] and expand_names("exp", numbered=True) == ["exp-0"]
    assert expand_names("a, b c") == ["a", "b", "c"]
    for text, count in (("", 1), ("a b", 3), ("a a", 1), ("Bad", 1), ("a", 0)):
        try:
            expand_names(text, count)
        except ConfigError:
            continue
        raise AssertionError(f"{text!r} x{count} accepted")


async def test_create_form_makes_vms_like_the_selected_base(emulator: Emulator, tmp_path: Path) -> None:
    emulator.add_instance("base", "us-central1-a", gpus=[("nvidia-l4", 1)], spot=True,
                          metadata={"enable-guest-attributes": "TRUE"})  # fmt: skip
    await emulator.wait_for_status("base", "RUNNING")
    config = emulator.write_config(tmp_path / "gcptui.toml")
    app = GcptuiApp(load_config(config), refresh_seconds=0.5)
    async with app.run_test(size=(180, 40)) as pilot:
        await until(pilot, lambda: app.fleet_screen.selected_instance() is not None)
        await pilot.press("C")
        await until(pilot, lambda: isinstance(app.screen, CreateFormScreen))
        form = app.screen
        assert form.query_one("#create-spot", Checkbox).value is True  # the base's, by default
        labels = [str(label.render()) for label in form.query(".form-label")]
        assert labels == ["Names", "Count", "Zone", "Spot", "Group"]  # labels, not placeholders alone
        form.query_one("#create-names", Input).value = "Bad_Name"
        await pilot.press("enter")
        assert isinstance(app.screen, CreateFormScreen)  # refused in place, with the reason
        form.query_one("#create-names", Input).value = "exp"
        form.query_one("#create-count", Input).value = "2"
        form.query_one("#create-names", Input).focus()
        await pilot.press("enter")
        await until(pilot, lambda: not isinstance(app.screen, CreateFormScreen))
        await until(pilot, lambda: any("2/2 created like base" in n for n in notices(app)), timeout=40)
        # One notification for the whole create (its steps went to the log); both host keys known.
        assert len([n for n in app._notifications if n.title == "Create"]) == 1, notices(app)
        assert "ssh accept" not in " ".join(notices(app))

        # With a group: refused in the form when malformed; else recorded in gcptui.toml, its row shown.
        await pilot.press("C")
        await until(pilot, lambda: isinstance(app.screen, CreateFormScreen))
        form = app.screen
        form.query_one("#create-names", Input).value = "node"
        form.query_one("#create-count", Input).value = "2"
        form.query_one("#create-group", Input).value = "Pair!"
        form.query_one("#create-names", Input).focus()
        await pilot.press("enter")
        assert isinstance(app.screen, CreateFormScreen)
        form.query_one("#create-group", Input).value = "pair"
        form.query_one("#create-names", Input).focus()
        await pilot.press("enter")
        await until(pilot, lambda: "group:pair" in app.fleet_screen.table.rows, timeout=60)
        await until(pilot, lambda: any("group pair: node-0, node-1 recorded in" in n for n in notices(app)))
    assert load_config(config).group("pair").vms == ["node-0", "node-1"]  # type: ignore[union-attr]
    assert emulator.instance("node-1").labels.get("gcptui-group") == "pair"
    for name in ("exp-0", "exp-1"):
        vm = emulator.instance(name)
        assert vm.status == "RUNNING" and vm.spot and [g.type for g in vm.gpus] == ["nvidia-l4"]


async def test_counted_names_in_the_form_follow_vm_create_count() -> None:
    """NAME-0.. as `vm create --count`; no name: the group's (else the base's), numbered on from the
    group's current size."""
    from textual.app import App

    from gcptui.remote.models import Instance
    from gcptui.tui.dialogs.create_form import CreateRequest

    base = Instance("base", "us-central1-a", "RUNNING", "g2-standard-8")
    answers: list[CreateRequest | None] = []

    async def fill(names: str, count: str, group: str) -> list[str]:
        app = App[None]()
        async with app.run_test(size=(120, 30)) as pilot:
            form = CreateFormScreen(base, {"pair": 2})
            app.push_screen(form, answers.append)
            await pilot.pause()
            form.query_one("#create-names", Input).value = names
            form.query_one("#create-count", Input).value = count
            form.query_one("#create-group", Input).value = group
            form.query_one("#create-names", Input).focus()
            await pilot.press("enter")
            await pilot.pause()
        request = answers.pop()
        assert request is not None
        return request.names

    assert await fill("gn", "2", "") == ["gn-0", "gn-1"]
    assert await fill("", "2", "pair") == ["pair-2", "pair-3"]  # on from the group's 2 VMs
    assert await fill("", "1", "") == ["base-0"]
    assert await fill("a b", "1", "pair") == ["a", "b"]  # names as written


async def test_the_form_refuses_a_zone_outside_gcp_zones_before_any_insert(
    emulator: Emulator, tmp_path: Path
) -> None:
    """As `vm create --zone` refuses it: VMs made there would run, and cost, unseen by gcptui."""
    emulator.add_instance("base", "us-central1-a")
    await emulator.wait_for_status("base", "RUNNING")
    config = emulator.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text().replace("[gcp]", '[gcp]\nzones = ["us-central1-a"]', 1))
    app = GcptuiApp(load_config(config), refresh_seconds=0.5)
    async with app.run_test(size=(180, 40)) as pilot:
        await until(pilot, lambda: app.fleet_screen.selected_instance() is not None)
        await pilot.press("C")
        await until(pilot, lambda: isinstance(app.screen, CreateFormScreen))
        form = app.screen
        form.query_one("#create-names", Input).value = "far"
        form.query_one("#create-zone", Input).value = "us-east4-a"
        form.query_one("#create-names", Input).focus()
        await pilot.press("enter")
        await until(pilot, lambda: any("zone us-east4-a is not in [gcp] zones" in n for n in notices(app)))
    with pytest.raises(KeyError):  # never inserted
        emulator.instance("far")
