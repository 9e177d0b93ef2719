"""Key bindings as data: one registry of actions used by the footer, help, palette and keymap.

Every action has a stable id (``fleet.refresh``) that users rebind in ``[keys]`` of gcptui.toml.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from textual.binding import Binding

from gcptui.remote.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Action:
    """One thing a user can do from the keyboard or the command palette."""

    id: str
    key: str
    action: str  # the Textual action string run on the screen that owns it
    description: str
    group: str
    screen: str = "fleet"  # which screen binds it
    destructive: bool = False  # asks before it acts
    mutating: bool = False  # changes a VM or a job: disabled by --readonly
    show: bool = True  # shown in the footer
    demo_only: bool = False
    label: str = ""  # the footer's short word; help and the palette use the description

    @property
    def footer(self) -> str:
        return self.label or self.description


ACTIONS: tuple[Action, ...] = (
    Action("app.help", "question_mark", "help", "Help and keys", "App", screen="app", label="Help"),
    Action("app.quit", "q", "quit", "Quit", "App", screen="app"),
    Action("fleet.filter", "slash", "filter", "Filter", "Fleet"),
    Action("fleet.refresh", "r", "refresh", "Refresh", "Fleet"),
    Action("fleet.sort", "o", "sort", "Sort by the next column (live ones too)", "Fleet", show=False),
    Action("fleet.sort_reverse", "O", "sort_reverse", "Reverse the sort order", "Fleet", show=False),
    Action("fleet.detail", "enter", "detail", "Details", "Fleet", show=False),
    Action("fleet.clear_filter", "escape", "clear_filter", "Clear filter", "Fleet", show=False),
    Action(
        "fleet.mark",
        "space",
        "mark",
        "Mark (logs side by side; s, K, R act on all marked)",
        "Fleet",
        show=False,
    ),
    Action("fleet.clear_marks", "c", "clear_marks", "Clear marks", "Fleet", show=False),
    Action(
        "fleet.group",
        "z",
        "toggle_group",
        "Expand or fold a group's row into its nodes (Enter too)",
        "Fleet",
        show=False,
    ),
    Action("job.start", "s", "job_start", "Start job", "Job", mutating=True, label="Start"),
    Action("job.restart", "R", "job_restart", "Restart job (resume)", "Job", mutating=True, show=False),
    Action("job.kill", "K", "job_kill", "Kill job", "Job", destructive=True, mutating=True, label="Kill"),
    Action("logs.open", "l", "logs", "Logs of the marked (or selected) machines", "Logs", label="Logs"),
    Action("fleet.shell", "S", "shell", "Shell on the machine (ssh; exit returns here)", "Fleet", show=False),
    Action("sync.toggle", "y", "sync_toggle", "Live sync on/off", "Sync", mutating=True, label="Sync"),
    Action(
        "keepalive.toggle",
        "a",
        "keepalive_toggle",
        "Keep-alive on/off",
        "Keep-alive",
        mutating=True,
        label="Keep-alive",
    ),
    Action(
        "sweep.open",
        "w",
        "sweeps",
        "Sweep: the newest sweep's trials (Enter: a trial's logs)",
        "Sweep",
        show=False,
    ),
    Action(
        "autostop.toggle",
        "A",
        "autostop_toggle",
        "Auto-stop on/off for this VM",
        "Keep-alive",
        mutating=True,
        show=False,
    ),  # fmt: skip
    Action("keepalive.relaunch", "L", "relaunch", "Relaunch now", "Keep-alive", mutating=True, show=False),
    Action("keepalive.timeline", "t", "timeline", "Preemption timeline", "Keep-alive", show=False),
    Action(
        "curves.open",
        "v",
        "curves",
        "Training curves of the marked (or selected) machines",
        "Curves",
        show=False,
    ),
    Action("results.pull", "p", "pull", "Pull the run directory to ./pulled/NAME", "Results", show=False),
    Action("vm.start", "U", "vm_start", "Start VM", "VM", mutating=True, show=False),
    Action(
        "vm.create", "C", "create_from", "Create VMs like this one (a form)", "VM", mutating=True, show=False
    ),
    Action("vm.stop", "X", "vm_stop", "Stop VM", "VM", destructive=True, mutating=True, show=False),
    Action(
        "demo.preempt",
        "P",
        "preempt",
        "Preempt the VM (demo)",
        "Demo",
        mutating=True,
        demo_only=True,
        label="Preempt",
    ),
    # The logs screen: on it, these keys come first (there `s` follows, it does not start a job).
    Action(
        "logs.follow",
        "s",
        "toggle_follow",
        "Follow the newest lines on/off",
        "Logs screen",
        screen="logs",
        label="Follow",
    ),
    Action(
        "logs.wrap", "w", "toggle_wrap", "Wrap long lines on/off", "Logs screen", screen="logs", label="Wrap"
    ),
    Action(
        "logs.merge",
        "m",
        "toggle_merged",
        "Merged view (a name prefix per line) or panes",
        "Logs screen",
        screen="logs",
        label="Merge",
    ),
    Action(
        "logs.filter",
        "slash",
        "open_filter",
        "Filter lines (Esc clears)",
        "Logs screen",
        screen="logs",
        label="Filter",
    ),
    Action(
        "logs.next_error",
        "e",
        "next_error",
        "Next error line",
        "Logs screen",
        screen="logs",
        label="Next error",
    ),
    Action(
        "logs.previous_error",
        "E",
        "previous_error",
        "Previous error line",
        "Logs screen",
        screen="logs",
        show=False,
    ),
    Action(
        "logs.fullscreen",
        "f",
        "fullscreen",
        "Focused pane fullscreen on/off",
        "Logs screen",
        screen="logs",
        label="Full",
    ),
    Action(
        "logs.next_panes",
        "right_square_bracket",
        "next_panes",
        "The next 8 panes (more than 8 sources: a TPU node's workers)",
        "Logs screen",
        screen="logs",
        show=False,
    ),
    Action(
        "logs.previous_panes",
        "left_square_bracket",
        "previous_panes",
        "The previous 8 panes",
        "Logs screen",
        screen="logs",
        show=False,
    ),
    Action(
        "logs.save",
        "ctrl+s",
        "save",
        "Save the focused pane's lines to a file",
        "Logs screen",
        screen="logs",
        label="Save",
    ),
    Action(
        "logs.curves",
        "v",
        "curves",
        "Training curves of these machines",
        "Logs screen",
        screen="logs",
        show=False,
    ),
    Action("logs.back", "escape", "back", "Back to the fleet", "Logs screen", screen="logs", label="Back"),
    # The sweep screen (`w`); Enter on a trial opens its own log (the table's own select key).
    Action(
        "sweep.sort",
        "s",
        "cycle_sort",
        "Sort trials by the next column (metric, trial, state)",
        "Sweep screen",
        screen="sweep",
        label="Sort",
    ),
    Action(
        "sweep.filter",
        "slash",
        "open_filter",
        "Filter trials: words that must all appear (a state, a VM, a trial, a value); Esc clears",
        "Sweep screen",
        screen="sweep",
        label="Filter",
    ),
    Action(
        "sweep.plots",
        "p",
        "toggle_plots",
        "Plots on/off: the metric per hyperparameter, the best curves, history and importances",
        "Sweep screen",
        screen="sweep",
        label="Plots",
    ),
    Action(
        "sweep.curves",
        "v",
        "curves",
        "The best trials' curves in the curves screen (as they are now)",
        "Sweep screen",
        screen="sweep",
        show=False,
    ),
    Action("sweep.back", "escape", "back", "Back to the fleet", "Sweep screen", screen="sweep", label="Back"),
    # The curves screen (`v`).
    Action(
        "curves.metric", "m", "next_metric", "Next metric", "Curves screen", screen="curves", label="Metric"
    ),
    Action(
        "curves.x",
        "x",
        "toggle_x",
        "x axis: step or wall time",
        "Curves screen",
        screen="curves",
        label="Step/time",
    ),
    Action(
        "curves.smooth",
        "s",
        "cycle_smoothing",
        "Smoothing: off, 0.6, 0.9",
        "Curves screen",
        screen="curves",
        label="Smooth",
    ),
    Action(
        "curves.log", "l", "toggle_log", "Log y axis on/off", "Curves screen", screen="curves", label="Log"
    ),
    Action("curves.back", "escape", "back", "Back", "Curves screen", screen="curves", label="Back"),
    # Moving in a table of rows (the fleet's; tui/rows.py binds them on the table itself, so the
    # filter box keeps j, k, g and Home/End as text). Home/End move rows, never sideways.
    Action("rows.down", "j", "cursor_down", "Next row (down too)", "Move", screen="rows", show=False),
    Action("rows.up", "k", "cursor_up", "Previous row (up too)", "Move", screen="rows", show=False),
    Action("rows.first", "g,home", "scroll_top", "First row", "Move", screen="rows", show=False),
    Action("rows.last", "G,end", "scroll_bottom", "Last row", "Move", screen="rows", show=False),
    # The same keys in a log pane (bound on the pane: LogView).
    Action(
        "lines.down", "j", "scroll_down", "Scroll down a line (down too)", "Move", screen="lines", show=False
    ),
    Action("lines.up", "k", "scroll_up", "Scroll up a line (up too)", "Move", screen="lines", show=False),
    Action(
        "lines.first", "g,home", "scroll_home", "The oldest line kept", "Move", screen="lines", show=False
    ),
    Action(
        "lines.last",
        "G,end",
        "scroll_end",
        "The newest line (follows again)",
        "Move",
        screen="lines",
        show=False,
    ),
)

# Keys that mean different things on different screens: `?` lists them, so a habit from one
# screen is not a surprise on another.
KEY_NOTES: tuple[tuple[str, str], ...] = (
    ("s", "starts a job on the fleet; in the logs screen it turns following on/off; sorts trials in the sweep screen; smooths the curves"),
    ("w", "opens the sweep screen from the fleet; wraps long lines in the logs screen"),
    ("f", "fullscreen pane in the logs screen; in the sweep screen it steps through trial states"),
    ("p", "pulls the run directory on the fleet; plots on/off in the sweep screen"),
    ("z", "expands or folds a group's row (Enter too); g is the first row, as in less and vim"),
    ("Esc", "clears the fleet's filter; goes back from the logs, sweep and curves screens"),
)  # fmt: skip


def actions_for(screen: str, *, readonly: bool = False, demo: bool = False) -> list[Action]:
    """The actions a screen binds, minus those the mode disables."""
    return [
        a
        for a in ACTIONS
        if a.screen == screen and not (readonly and a.mutating) and not (a.demo_only and not demo)
    ]


def bindings_for(screen: str) -> list[Binding]:
    """Every binding of a screen, with ids so ``App.set_keymap`` can rebind them; the screen's
    ``check_action`` (``action_allowed``) hides those that ``--readonly`` or a non-demo run disables."""
    return [
        Binding(a.key, a.action, a.footer, show=a.show, id=a.id, tooltip=a.description)
        for a in ACTIONS
        if a.screen == screen
    ]


def action_allowed(action: str, *, readonly: bool, demo: bool) -> bool:
    """False for an action the mode disables (Textual then hides and refuses it)."""
    for a in ACTIONS:
        if a.action == action:
            return not ((readonly and a.mutating) or (a.demo_only and not demo))
    return True


def refused_by_readonly(key: str, screen: str, keymap: Mapping[str, str] | None = None) -> Action | None:
    """The mutating action that ``key`` would run on ``screen`` (``keymap`` rebinds by id): under
    ``--readonly`` it is hidden and refused, and the screen says why instead of doing nothing."""
    for a in ACTIONS:
        if a.screen == screen and a.mutating:
            bound = (keymap or {}).get(a.id, a.key)
            if key in (k.strip() for k in bound.split(",")):
                return a
    return None


def demo_only_key(key: str, screen: str, keymap: Mapping[str, str] | None = None) -> Action | None:
    """The demo-only action ``key`` would run on ``screen``: outside the demo it is hidden, and the
    screen says where it works instead of doing nothing."""
    for a in ACTIONS:
        if a.screen == screen and a.demo_only:
            bound = (keymap or {}).get(a.id, a.key)
            if key in (k.strip() for k in bound.split(",")):
                return a
    return None


def validate_keymap(keymap: Mapping[str, str], known: Iterable[Action] = ACTIONS) -> dict[str, str]:
    """Check a ``[keys]`` table: every id must exist; returns it for ``App.set_keymap``."""
    ids = {a.id for a in known}
    for action_id, key in keymap.items():
        if action_id not in ids:
            raise ConfigError(f"[keys]: unknown action id {action_id!r}: use one of {', '.join(sorted(ids))}")
        if not key.strip():
            raise ConfigError(f"[keys]: {action_id} has an empty key: give a key such as 'ctrl+r'")
    return dict(keymap)


def key_label(key: str) -> str:
    """A key as a person reads it in help."""
    names = {
        "question_mark": "?",
        "slash": "/",
        "enter": "Enter",
        "escape": "Esc",
        "home": "Home",
        "end": "End",
    }
    return ",".join(names.get(k.strip(), k.strip()) for k in key.split(","))
