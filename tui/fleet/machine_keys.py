"""The fleet screen's keys that act on machines: the selected one or every marked one (the app owns
the services; the screen picks the machines). A key whose answer could change nothing asks nothing:
``K`` where the job is known not to run, ``X`` on a stopped VM and ``U`` on a running one say so at
once; an action on several machines is one question naming them and one notification."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from textual.screen import Screen

from gcptui.remote.compute.backend import Capability
from gcptui.remote.models import FleetSnapshot, Instance, State
from gcptui.tui.dialogs.choice import ChoiceScreen
from gcptui.tui.dialogs.confirm import ConfirmScreen
from gcptui.tui.fleet.actions import FleetActions
from gcptui.tui.fleet.groups import GroupRow
from gcptui.tui.fleet.rerun import ENDED_STATES, RERUN_ANSWERS, ended_words, rerun_label
from gcptui.tui.live.columns import status_word
from gcptui.tui.live.state import Live

# A machine in one of these has nothing left to stop (X says so instead of asking), or is already
# up or on its way (U says so). Neutral states: a static host's is unknown, so both keys go on.
NOTHING_TO_STOP = frozenset({State.STOPPING, State.STOPPED, State.PREEMPTED, State.SUCCEEDED, State.FAILED})
ALREADY_STARTED = frozenset({State.RUNNING, State.PROVISIONING})


class MachineKeys(Screen[None]):
    """The machine keys of ``FleetScreen``, which supplies the attributes declared here."""

    actions: FleetActions
    live: Mapping[str, Live]
    snapshot: FleetSnapshot | None
    marked: set[str]
    stop_grace_seconds: float

    if TYPE_CHECKING:  # provided by FleetScreen and GroupRowsMixin

        def selected_instance(self) -> Instance | None: ...

        def selected_group(self) -> GroupRow | None: ...

        def _render_rows(self) -> None: ...

        def group_job(self, label: str, action: str, question: str | None) -> bool: ...

        def group_job_start(self) -> bool: ...

        def group_logs(self) -> bool: ...

    def _selected_or_tell(self) -> Instance | None:
        instance = self.selected_instance()
        if instance is None:
            self.notify("no machine selected", severity="warning")
        return instance

    def _reachable_or_tell(self) -> Instance | None:
        instance = self._selected_or_tell()
        if instance is not None and not instance.reachable:
            self.notify(
                f"{instance.name} is {status_word(instance)}: start it first (U), then try again",
                severity="warning",
            )
            return None
        return instance

    def _job(self, label: str, action: str, question: str | None = None) -> None:
        """Run a job action on the marked machines (any marked) or the selected one; ask first when
        ``question`` is given or when it acts on several machines, naming them."""
        if self.group_job(label, action, question):
            return
        if not self.marked:
            if (instance := self._reachable_or_tell()) is not None:
                self._act(label, [instance], lambda inst: self.actions.job_action(action, inst), question)
            return
        targets = self._marked_reachable()
        if action == "start":
            # Asked only about the machines a start can act on: one already running its job would
            # be listed, then counted as failed ("1 of 3 failed").
            busy = [i for i in targets if self._job_running(i)]
            if busy:
                names = ", ".join(i.name for i in busy)
                self.notify(f"a job already runs on {names}: R restarts it", title=label)
                targets = [i for i in targets if i not in busy]
        if targets:
            ask = question or f"{label} on {{name}}?"
            self._act(label, targets, lambda inst: self.actions.job_action(action, inst), ask)

    def _job_running(self, instance: Instance) -> bool:
        live = self.live.get(instance.name)
        return live is not None and live.job is not None and live.job.state == "running"

    def _marked_reachable(self) -> list[Instance]:
        """The marked machines that exist and answer SSH; says which ones are left out and why."""
        found = [i for n in sorted(self.marked) if self.snapshot and (i := self.snapshot.find(n))]
        left_out = [i for i in found if not i.reachable]
        if left_out:
            words = ", ".join(f"{i.name} ({status_word(i)})" for i in left_out)
            self.notify(f"left out, not running: {words}", severity="warning")
        return [i for i in found if i.reachable]

    def _vm(self, label: str, action: str, question: str | None = None) -> None:
        if (instance := self._selected_or_tell()) is not None:
            self._act(label, [instance], lambda inst: self.actions.vm_action(action, inst), question)

    def _act(
        self,
        label: str,
        instances: list[Instance],
        run: Callable[[Instance], Awaitable[str | None]],
        question: str | None,
    ) -> None:
        def go() -> None:
            self.actions.act_all(label, instances, run)  # one notification for them all

        if question is None:
            go()
            return

        def answered(yes: bool | None) -> None:
            if yes:
                go()

        names = ", ".join(i.name for i in instances)
        self.app.push_screen(ConfirmScreen(question.format(name=names)), answered)

    def action_job_start(self) -> None:
        if self.group_job_start():
            return
        # A job that ran and ended: offer a fresh run or a resume, as either can be meant.
        instance = None if self.marked else self.selected_instance()
        live = self.live.get(instance.name) if instance is not None else None
        job = live.job if live is not None else None
        if instance is None or job is None or job.state not in ENDED_STATES or not instance.reachable:
            self._job("Start job", "start")
            return

        def chosen(action: str | None) -> None:
            if action is not None:
                self.actions.act(
                    rerun_label(action), instance, lambda inst: self.actions.job_action(action, inst)
                )

        question = f"The job on {instance.name} ended ({ended_words(job)}). Run it again how?"
        self.app.push_screen(ChoiceScreen(question, RERUN_ANSWERS), chosen)

    def action_job_restart(self) -> None:
        self._job("Restart job", "restart")

    def _job_not_running(self, instance: Instance) -> str | None:
        """The job state when it is known and not running (a kill would find nothing to kill)."""
        live = self.live.get(instance.name)
        job = live.job if live is not None and live.watched else None
        return job.state if job is not None and job.state != "running" else None

    def action_job_kill(self) -> None:
        job = self.selected_instance()
        if (
            not self.marked and job is not None and self.actions.can(job, Capability.CANCEL)
        ):  # cancelled through its provider (a Vertex AI job)
            ask = "Cancel the Vertex AI job {name}? (Vertex stops its workers; `job restart` resumes it)"
            self._act("Cancel job", [job], lambda inst: self.actions.job_action("kill", inst), ask)
            return
        grace = self.stop_grace_seconds
        question = f"Kill the job on {{name}}? (SIGTERM, SIGKILL after {grace:g}s)"
        if self.selected_group() is not None:
            self._job("Kill job", "kill", question)
            return
        # No question whose answer cannot change anything: a machine whose job is known not to run
        # is told so at once ("Kill the job…?" then "job none" taught people to stop reading it).
        if self.marked:
            reachable_marked = self._marked_reachable()
            targets = [i for i in reachable_marked if self._job_not_running(i) is None]
            if reachable_marked and not targets:
                words = ", ".join(f"{i.name} ({self._job_not_running(i)})" for i in reachable_marked)
                self.notify(f"no job running on the marked machines: {words}", title="Kill job")
            elif targets:
                self._act("Kill job", targets, lambda inst: self.actions.job_action("kill", inst), question)
            return
        instance = self.selected_instance()
        state = self._job_not_running(instance) if instance is not None else None
        if instance is not None and state is not None:
            self.notify(f"{instance.name}: no job running (job {state}): nothing to kill", title="Kill job")
            return
        self._job("Kill job", "kill", question)

    def action_vm_start(self) -> None:
        instance = self.selected_instance()
        if instance is not None and instance.state in ALREADY_STARTED:
            self.notify(f"{instance.name} is already {status_word(instance)}", title="Start VM")
            return
        self._vm("Start VM", "start")

    def action_vm_stop(self) -> None:
        instance = self.selected_instance()
        if instance is not None and instance.state in NOTHING_TO_STOP:
            self.notify(
                f"{instance.name} is not running ({status_word(instance)}): nothing to stop", title="Stop VM"
            )
            return
        self._vm("Stop VM", "stop", "Stop the VM {name}? Its job ends.")

    def action_preempt(self) -> None:
        self._vm("Preempt (demo)", "preempt")

    def action_sync_toggle(self) -> None:
        if (i := self._selected_or_tell()) is not None:
            on = self.actions.toggle_sync(i)
            self.notify(f"{i.name}: live sync {'on' if on else 'off'}", title="Sync")

    def action_keepalive_toggle(self) -> None:
        if (i := self._selected_or_tell()) is not None:
            self.actions.toggle_keepalive(i)

    def action_autostop_toggle(self) -> None:
        if (i := self._selected_or_tell()) is not None:
            self.actions.toggle_autostop(i)

    def action_relaunch(self) -> None:
        if (i := self._selected_or_tell()) is not None:
            self.actions.relaunch_now(i)

    def action_create_from(self) -> None:
        if (i := self._selected_or_tell()) is not None:
            self.actions.create_from(i)

    def action_shell(self) -> None:
        if (i := self._selected_or_tell()) is not None:
            self.actions.open_shell(i)

    def action_timeline(self) -> None:
        if (i := self._selected_or_tell()) is not None:
            self.actions.show_timeline(i)

    def action_curves(self) -> None:
        if any(self.snapshot and self.snapshot.find(n) for n in self.marked):
            names = [i.name for i in self._marked_reachable()]
        else:
            names = [i.name] if (i := self._reachable_or_tell()) else []
        if names:
            self.actions.open_curves(sorted(names))

    def action_pull(self) -> None:
        if (i := self._selected_or_tell()) is not None:
            self.actions.pull_run_dir(i)

    def action_mark(self) -> None:
        if (i := self._selected_or_tell()) is not None:
            self.marked ^= {i.name}
            self._render_rows()

    def action_clear_marks(self) -> None:
        if self.marked:
            self.marked = set()
            self._render_rows()
            self.notify("marks cleared: s, K, R and l act on the selected machine again", title="Marks")

    def action_sweeps(self) -> None:
        self.actions.open_sweep()

    def action_logs(self) -> None:
        if self.group_logs():
            return
        if (
            not self.marked
            and (row := self.selected_instance()) is not None
            and self.actions.can(row, Capability.CLOUD_LOGS)
        ):
            self.actions.open_logs([row.name])  # its logs come from Cloud Logging, not from a machine
            return
        # A stopped VM is said at once, as s and K do (its pane used to say "connecting…" for ~20 s).
        if any(self.snapshot and self.snapshot.find(n) for n in self.marked):
            names = [i.name for i in self._marked_reachable()]
        else:
            names = [i.name] if (i := self._reachable_or_tell()) else []
        if names:
            self.actions.open_logs(sorted(names)[:8])
