"""``gcptui sweep run|status|report|extend``: hyperparameter sweeps across VMs, headless."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from rich.console import Console
from rich.text import Text

from gcptui.remote.config import Config
from gcptui.remote.errors import ConfigError, GcptuiError
from gcptui.remote.services import Services
from gcptui.remote.sweep.job_scheduler import JobScheduler, engine_for
from gcptui.remote.sweep.report import ranked, write_report
from gcptui.remote.sweep.scheduler import Scheduler
from gcptui.remote.sweep.spec import NAME_PATTERN, SweepSpec, load_sweep
from gcptui.remote.sweep.state import (
    SweepState,
    Trial,
    load_state,
    require_state,
    run_lock,
    save_state,
    sweep_dir,
    sweeps_dir,
)
from gcptui.remote.sweep.trials import extend_trials, grid_size, initial_trials
from gcptui.tui.cli.common import with_services
from gcptui.tui.cli.logs import iso_time

STATE_STYLES = {
    "finished": "green",
    "running": "bold cyan",
    "starting": "cyan",
    "failed": "red",
    "queued": "dim",
    "pruned": "yellow",
}


def run_sweep_command(args: argparse.Namespace) -> int:
    action = args.sweep_action
    if action == "run":
        return run_sweep(args)
    if action == "status":
        return sweep_status(args)
    if action == "report":
        return sweep_report(args)
    return sweep_extend(args)


def _saved(
    name: str, bucket: str, say: Callable[[str], None], verb: str = "resuming from"
) -> SweepState | None:
    """Sweep ``name``'s state: this machine's, or the bucket's when that one was saved later (it ran
    on another machine since): then it becomes this machine's too."""
    local = load_state(name)
    if not bucket:
        return local
    from gcptui.remote.sweep.bucket_state import download_state, newer, state_url

    try:
        remote = download_state(bucket, name)
    except GcptuiError as err:
        say(f"warning: {err} (going on with this machine's state)")
        return local
    chosen = newer(local, remote)
    if chosen is not None and chosen is remote:
        say(f"sweep {name}: {verb} {state_url(bucket, name)} (saved there last)")
        save_state(chosen)
    return chosen


def _spec_and_state(
    file_or_name: str, bucket: str = "", say: Callable[[str], None] = lambda _line: None
) -> tuple[SweepSpec, SweepState]:
    """The spec from FILE (or the saved state of a sweep named so), and its state (new or saved)."""
    path = Path(file_or_name)
    name = _as_name(file_or_name)
    if name is not None:
        named = _saved(name, bucket, say)
        if named is not None:
            return named.spec, named
        if not path.suffix:
            where = "on this machine or in the bucket" if bucket else "on this machine"
            raise ConfigError(
                f"no sweep file {file_or_name} and no sweep named {file_or_name!r} {where}: "
                f"give the sweep file's path (this machine's sweeps are in {sweeps_dir()})"
            )
    spec = load_sweep(path)
    saved = _saved(spec.name, bucket, say)
    if saved is None:
        state = SweepState(name=spec.name, spec=spec, created_at=time.time(), trials=[])
        state.add(initial_trials(spec))
        save_state(state)
        return spec, state
    state = saved
    if state.spec.identity() != spec.identity():
        raise ConfigError(
            f"{path}: sweep {spec.name!r} exists with another command, search or metric: "
            "give this sweep a new name (or move its state away: "
            f"{sweep_dir(spec.name)})"
        )
    if spec.count != state.spec.count and spec.model_based:
        more = spec.count - state.spec.count
        say(f"{path}: count = {spec.count} is not applied: sweep {spec.name} runs {state.spec.count} trials"
            + (f"; `gcptui sweep extend {spec.name} --count {more}` asks its study for the rest" if more > 0 else ""))  # fmt: skip
        spec = spec.model_copy(update={"count": state.spec.count})
    elif spec.count != state.spec.count:
        # The trials were drawn when the sweep was made (extend adds more): taking the new count
        # would only make the saved spec claim trials the sweep never queued.
        wanted = spec.count or (grid_size(spec) if spec.search == "grid" else 0)
        more = wanted - len(state.trials)
        say(f"{path}: count = {spec.count} is not applied: sweep {spec.name} has {len(state.trials)} trials"
            + (f"; `gcptui sweep extend {spec.name} --count {more}` queues the rest" if more > 0 else ""))  # fmt: skip
        spec = spec.model_copy(update={"count": state.spec.count})
    if spec.on != state.spec.on and any(t.attempts for t in state.trials):
        raise ConfigError(
            f'{path}: sweep {spec.name!r} ran its trials with on = "{state.spec.on}": '
            f"set it back (or give this sweep a new name)"
        )
    state.spec = spec  # VMs, at_end, max_failures, poll may change between runs
    return spec, state


def run_sweep(args: argparse.Namespace) -> int:
    from gcptui.remote.config import load_config

    err = Console(stderr=True, soft_wrap=True, highlight=False)

    def say(line: str) -> None:
        err.print(line, markup=False)

    config = load_config(getattr(args, "config", None))
    with run_lock(_sweep_name(args.file)):  # before the state is read: a running one writes it
        return _run_locked(args, config, say)


def _as_name(file_or_name: str) -> str | None:
    """FILE_OR_NAME as a sweep's name: when it is no file and could name a sweep; else None."""
    if Path(file_or_name).is_file() or not re.fullmatch(NAME_PATTERN, file_or_name):
        return None
    return file_or_name


def _sweep_name(file_or_name: str) -> str:
    # A file's sweep name, or the clear error of a missing one.
    return _as_name(file_or_name) or load_sweep(Path(file_or_name)).name


def _run_locked(args: argparse.Namespace, config: Config, say: Callable[[str], None]) -> int:
    from gcptui.remote.sweep.bucket_state import StateMirror
    from gcptui.remote.sweep.provision import ensure_vms

    bucket = config.storage.bucket
    before, started = load_state(_sweep_name(args.file)), time.time()
    spec, state = _spec_and_state(args.file, bucket, say)
    if ensure_vms(config, spec, say, skip=state.vms_done):
        state.vms_done = []  # a VM made now is not one the sweep is done with
    study, journal = None, None
    if spec.model_based:
        from gcptui.remote.sweep.study_store import JournalMirror, open_for_run

        # The state resumed from the bucket's copy (saved here just now; a new one is made now):
        # then its study is the bucket's too.
        made_now = before is None and state.created_at >= started
        from_bucket = not made_now and (before is None or before.updated_at < state.updated_at)
        study = open_for_run(state, bucket, from_bucket, say)
        journal = JournalMirror(bucket, spec.name, study.path, say) if bucket and study.path else None
    mirror = StateMirror(bucket, spec.name, say) if bucket else None

    where = ", ".join(spec.vm_names) if spec.on == "vms" else f"{spec.on} ({spec.slots} at once)"

    async def body(services: Services) -> int:
        counts = state.counts()
        say(f"sweep {spec.name}: {len(state.trials)} trials ({counts['finished']} finished, "
            f"{counts['failed']} failed, {counts['running'] + counts['starting']} running) on {where}")  # fmt: skip
        if mirror is not None:
            mirror.push(state)

        # Each VM gets the tree before its first trial (the scheduler syncs it when it becomes usable).
        def on_change(changed: SweepState) -> None:
            if mirror is not None:
                mirror.push(changed)
            if journal is not None:
                journal.push()

        if spec.on == "vms":
            final = await Scheduler(
                services, state, say=say, on_change=on_change, sync=not args.no_sync, study=study
            ).run()
        else:
            engine = engine_for(services, spec, say)
            final = await JobScheduler(
                services, state, engine, say=say, on_change=on_change, study=study
            ).run()
        leader = final.leader()
        counts = final.counts()
        pruned = f", {counts['pruned']} pruned" if counts["pruned"] else ""
        say(f"sweep {spec.name} done: {counts['finished']} finished, {counts['failed']} failed{pruned}"
            + (f"; best {leader.id} {spec.metric} {leader.metric} ({_params(leader.params)})" if leader else ""))  # fmt: skip
        return 0

    try:
        return with_services(args, body)
    except KeyboardInterrupt:
        on = "on the VMs" if spec.on == "vms" else f"as {spec.on} jobs"
        say(f"interrupted: trials keep running {on}; `gcptui sweep run {args.file}` resumes")
        return 130
    finally:
        if mirror is not None:
            mirror.close()
        if journal is not None:
            journal.close()


def _params(params: Mapping[str, object]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


def status_json(state: SweepState) -> dict[str, object]:
    leader = state.leader()
    return {
        "name": state.name,
        "metric": state.spec.metric,
        "goal": state.spec.goal,
        "on": state.spec.on,
        "counts": state.counts(),
        "leader": leader.id if leader else None,
        "vms_done": state.vms_done,
        "finished_at": iso_time(state.finished_at or 0.0),
        "trials": [_trial_json(t) for t in sorted(state.trials, key=lambda t: t.index)],
    }


def _trial_json(trial: Trial) -> dict[str, object]:
    """A trial as ``status --json`` prints it: its saved fields, times as ISO 8601 UTC (the saved
    state keeps Unix times)."""
    data = trial.model_dump(mode="json", exclude={"curve"})
    for key in ("started_at", "ended_at"):
        data[key] = iso_time(data[key] or 0.0)
    return data


def _bucket(args: argparse.Namespace) -> str:
    """``[storage] bucket`` of the config (empty: none)."""
    from gcptui.remote.config import load_config

    return load_config(getattr(args, "config", None)).storage.bucket


def _read_state(args: argparse.Namespace, bucket: str | None = None) -> SweepState:
    """Sweep NAME's state for ``status``, ``report`` and ``extend``: this machine's, or the bucket's
    (``[storage] bucket``) when that one was saved later, e.g. the sweep runs on another laptop."""
    bucket = _bucket(args) if bucket is None else bucket
    if not bucket:
        return require_state(args.name)
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    state = _saved(args.name, bucket, lambda line: err.print(line, markup=False), verb="read from")
    return state if state is not None else require_state(args.name)


def sweep_status(args: argparse.Namespace) -> int:
    state = _read_state(args)
    if args.json:
        json.dump(status_json(state), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    from gcptui.tui.cli.tables import Cell, print_table

    leader = state.leader()
    where = "VM" if state.spec.on == "vms" else "Job"  # a Vertex AI job's id, a Kubernetes Job's name
    headers = ("Trial", *state.spec.params, where, "State", "Step", state.spec.metric, "Exit")
    rows: list[list[Cell]] = []
    for t in ranked(state):
        lead = "bold reverse " if leader is not None and t.id == leader.id else ""
        step = f"{t.step or 0}/{t.total_steps}" if t.total_steps else str(t.step or "-")
        if t.state == "pruned":
            step = f"pruned@{t.pruned_at_step}"
        cells = [
            t.id, *(str(t.params.get(p, "")) for p in state.spec.params), t.vm or "-", t.state, step,
            "-" if t.metric is None else f"{t.metric:.5g}", "-" if t.exit_code is None else str(t.exit_code),
        ]  # fmt: skip
        styles = {len(cells) - 4: STATE_STYLES.get(t.state, "")}  # the State column
        rows.append([Text(cell, lead + styles.get(n, "")) for n, cell in enumerate(cells)])
    # On a terminal a table (the leader highlighted); piped, a header line and tab-separated rows.
    print_table(headers, rows, title=f"sweep {state.name}: {state.spec.metric} ({state.spec.goal})")
    return 0


def sweep_report(args: argparse.Namespace) -> int:
    state = _read_state(args)
    folder = Path(args.out).expanduser() if args.out else sweep_dir(state.name) / "report"
    try:
        written = write_report(state, folder, best=args.best)
    except OSError as err:  # --out names a file, or a folder this user cannot write: theirs to fix
        where = err.filename or folder
        raise ConfigError(
            f"cannot write the report into {where}: {err.strerror}: give --out a folder"
        ) from None
    for path in written:
        print(path)
    return 0


def sweep_extend(args: argparse.Namespace) -> int:
    # A `sweep run` of it saves its own copy of the state: trials queued beside it would be written
    # over and never run, so extend takes the same lock (refused in one line while it runs).
    with run_lock(args.name):
        # The newer of this machine's state and the bucket's, as `sweep run` takes it: extending an
        # older copy here would save it as the newest, and a run would redo what ran elsewhere since.
        bucket = _bucket(args)
        state = _read_state(args, bucket)
        if state.spec.model_based:
            return _extend_study(state, bucket, args.count)
        added = state.add(extend_trials(state.spec, len(state.trials), args.count))
        save_state(state)
        if bucket:  # so a `sweep run` on another machine finds the new trials
            _put_in_bucket(bucket, state)
    print(
        f"sweep {state.name}: queued {len(added)} more trials ({added[0].id}..{added[-1].id}): "
        f"`gcptui sweep run {state.name}` runs them",
        file=sys.stderr,
    )
    return 0


def _extend_study(state: SweepState, bucket: str, count: int) -> int:
    """A model-based sweep grows its budget: the run asks the study for each new trial as a slot
    frees (asking now, before the running trials end, would only make it guess)."""
    if count < 1:
        raise ConfigError("--count must be at least 1")
    state.spec = state.spec.model_copy(update={"count": state.spec.count + count})
    state.finished_at = None
    state.vms_done = []  # the new trials need the VMs again
    save_state(state)
    if bucket:
        _put_in_bucket(bucket, state)
    print(
        f"sweep {state.name}: {count} more trials ({state.spec.count} in all), asked from its "
        f"{state.spec.search} study as slots free: `gcptui sweep run {state.name}` runs them",
        file=sys.stderr,
    )
    return 0


def _put_in_bucket(bucket: str, state: SweepState) -> None:
    """The extended state into the bucket; one warning when it cannot get there."""
    from gcptui.remote.sweep.bucket_state import encode_state, upload_state

    try:
        upload_state(bucket, state.name, encode_state(state))
    except GcptuiError as err:
        print(
            f"warning: {err} (the new trials are on this machine only: run the sweep here)", file=sys.stderr
        )
