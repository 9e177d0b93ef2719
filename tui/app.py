"""The Textual app: a thin face over the services in remote/.

Workers do the blocking and network work and post messages; only message handlers touch widgets.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from textual import work
from textual.app import App, SystemCommand
from textual.screen import Screen

from remote.config import Config
from remote.errors import GcptuiError
from remote.fleet import FleetSource
from tui.fleet_screen import FleetScreen
from tui.keys import ACTIONS, Action, action_allowed, actions_for, bindings_for, validate_keymap
from tui.messages import FleetRefreshed, FleetRefreshFailed

REFRESH_SECONDS = 5.0


class GcptuiApp(App[None]):
    """``gcptui``: the fleet table first; everything else is one key away."""

    CSS_PATH = Path(__file__).with_name("app.tcss")  # absolute: subclasses live elsewhere
    TITLE = "gcptui"
    BINDINGS = bindings_for("app")

    def __init__(
        self,
        config: Config,
        *,
        readonly: bool = False,
        demo: bool = False,
        banner: str | None = None,
        refresh_seconds: float = REFRESH_SECONDS,
        poll_fleet: bool = True,
    ) -> None:
        super().__init__()
        self.config = config
        self.readonly = readonly
        self.demo = demo
        self.banner = banner
        self.refresh_seconds = refresh_seconds
        self.poll_fleet = poll_fleet
        self.fleet = FleetSource(config)
        self.keymap = validate_keymap(config.keys)
        self.sub_title = "read-only" if readonly else ""

    @property
    def fleet_screen(self) -> FleetScreen:
        screen = self.get_screen("fleet")
        assert isinstance(screen, FleetScreen)
        return screen

    def on_mount(self) -> None:
        self.install_screen(FleetScreen(readonly=self.readonly, demo=self.demo), name="fleet")
        self.push_screen("fleet")
        if self.keymap:
            self.set_keymap(self.keymap)
        if self.poll_fleet:
            self.refresh_fleet()
            self.set_interval(self.refresh_seconds, self.refresh_fleet)

    def refresh_fleet(self) -> None:
        self._load_fleet()

    # The Compute client import (~1.3 s) and the API call happen here, off the UI thread, so the
    # first frame never waits for them.
    @work(thread=True, exclusive=True, group="fleet", exit_on_error=False)
    def _load_fleet(self) -> None:
        try:
            snapshot = self.fleet.snapshot()
        except GcptuiError as err:
            self.post_message(FleetRefreshFailed(str(err)))
        except Exception as err:  # noqa: BLE001 - any surprise is shown, never a crash
            self.post_message(FleetRefreshFailed(f"{type(err).__name__}: {err}"))
        else:
            self.post_message(FleetRefreshed(snapshot))

    def on_fleet_refreshed(self, message: FleetRefreshed) -> None:
        self.fleet_screen.show_snapshot(message.snapshot)

    def on_fleet_refresh_failed(self, message: FleetRefreshFailed) -> None:
        self.fleet_screen.show_error(message.error)

    # -- keys, help, palette ----------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return action_allowed(action, readonly=self.readonly, demo=self.demo)

    def available_actions(self) -> list[Action]:
        screens = ("app", "fleet")
        return [a for s in screens for a in actions_for(s, readonly=self.readonly, demo=self.demo)]

    def action_help(self) -> None:
        from tui.help_screen import HelpScreen

        self.push_screen(HelpScreen(self.available_actions(), self.keymap))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for action in self.available_actions():
            target = self if action.screen == "app" else self.fleet_screen
            yield SystemCommand(
                action.description,
                f"{action.group} · key {action.key} · id {action.id}",
                _runner(target, action.action),
            )


def _runner(target: App[None] | Screen[None], action: str):  # type: ignore[no-untyped-def]
    async def run() -> None:
        await target.run_action(action)

    return run


__all__ = ["ACTIONS", "GcptuiApp"]
