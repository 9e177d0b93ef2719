"""The sweep file and trial generation: pure logic, deterministic with a seed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gcptui.remote.errors import ConfigError
from gcptui.remote.sweep.spec import parse_sweep
from gcptui.remote.sweep.state import SweepState, load_state, new_trial, save_state
from gcptui.remote.sweep.trials import extend_trials, grid_values, initial_trials, render

BASE = """
name = "lr-bs"
command = "python train.py --lr {lr} --batch-size {batch_size} --run-dir {run_dir}"
metric = "val_loss"
vms = ["a", "b"]
search = "random"
seed = 7
count = 12

[params.lr]
kind = "log_uniform"
low = 1e-4
high = 1e-1

[params.batch_size]
kind = "list"
values = [8, 16, 32]
"""


def spec(text: str = BASE):
    return parse_sweep(text, Path("sweep.toml"))


def test_random_trials_are_the_same_for_the_same_seed_and_in_range() -> None:
    first, again = initial_trials(spec()), initial_trials(spec())
    assert [t.params for t in first] == [t.params for t in again]
    assert len(first) == 12 and [t.id for t in first][:2] == ["t000", "t001"]
    for t in first:
        assert 1e-4 <= t.params["lr"] <= 1e-1 and t.params["batch_size"] in (8, 16, 32)
    # Spread on a log scale: both decades ends get draws out of 12.
    logs = [math.log10(t.params["lr"]) for t in first]  # type: ignore[arg-type]
    assert min(logs) < -3 and max(logs) > -2
    other = initial_trials(spec(BASE.replace("seed = 7", "seed = 8")))
    assert [t.params for t in other] != [t.params for t in first]


def test_extend_continues_the_sequence_without_changing_earlier_trials() -> None:
    s = spec()
    more = extend_trials(s, 12, 3)
    assert [t.index for t in more] == [12, 13, 14]
    longer = initial_trials(spec(BASE.replace("count = 12", "count = 15")))
    assert [t.params for t in longer[12:]] == [t.params for t in more]


def test_grid_is_the_product_in_order_and_cannot_grow_past_its_end() -> None:
    text = BASE.replace('search = "random"', 'search = "grid"').replace("count = 12", "count = 0")
    text = text.replace('kind = "log_uniform"', 'kind = "log_uniform"\npoints = 3')
    trials = initial_trials(spec(text))
    assert len(trials) == 9
    assert [round(t.params["lr"], 12) for t in trials[:3]] == [1e-4] * 3  # type: ignore[arg-type]
    assert [t.params["batch_size"] for t in trials[:3]] == [8, 16, 32]
    assert math.isclose(trials[3].params["lr"], 10**-2.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="grid's 9 points all have trials"):
        extend_trials(spec(text), 9, 1)


def test_step_and_int_variants() -> None:
    s = spec(BASE + '\n[params.layers]\nkind = "int_step"\nlow = 2\nhigh = 8\nstep = 3\n'
             '\n[params.width]\nkind = "int_log_uniform"\nlow = 16\nhigh = 256\n'
             '\n[params.drop]\nkind = "step"\nlow = 0.0\nhigh = 0.3\nstep = 0.1\n')  # fmt: skip
    assert grid_values(s.params["layers"]) == [2, 5, 8]
    assert len(grid_values(s.params["drop"])) == 4
    for t in initial_trials(s):
        assert t.params["layers"] in (2, 5, 8)
        assert isinstance(t.params["width"], int) and 16 <= t.params["width"] <= 256
    # A grid of an int range stays inside it: low 0.4 no longer rounds to 0.
    inside = spec(BASE + '\n[params.depth]\nkind = "int_uniform"\nlow = 0.4\nhigh = 2.6\npoints = 3\n')
    assert grid_values(inside.params["depth"]) == [1, 2]


def test_commands_get_quoted_values_and_a_run_dir_per_trial() -> None:
    s = spec(
        BASE.replace(
            "[params.batch_size]", '[params.opt]\nkind = "list"\nvalues = ["a b"]\n\n[params.batch_size]'
        )
    )
    trial = new_trial(s, initial_trials(s)[0])
    assert trial.run_dir == "sweeps/lr-bs/t000"
    assert "--run-dir sweeps/lr-bs/t000" in trial.command
    lr = trial.params["lr"]
    assert f"--lr {lr!r}" in trial.command  # repr: the exact float back
    assert float(repr(lr)) == lr
    assert render("x {opt} {run_dir}", {"opt": "a b"}, "r") == "x 'a b' r"
    assert json.loads(trial.params_json) == trial.params


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("count = 12", "count = 12\ncolour = 1"), "sweep.toml:9: unknown key 'colour'"),
        (("high = 1e-1", "high = 1e-1\nstepp = 2"), "sweep.toml:14: unknown key 'params.lr.stepp'"),
        (("low = 1e-4", "low = -1.0"), "log_uniform range needs low > 0"),
        (("--run-dir {run_dir}", ""), "must contain {run_dir}"),
        (("--lr {lr}", "--lr {rate}"), "uses {rate}, which is not a parameter"),
        # A format spec would act on the shell-quoted text (a traceback at `sweep run`), '!r' quote it twice.
        (("--lr {lr}", "--lr {lr:.3g}"), "command uses {lr:.3g}: write {lr}"),
        (("--lr {lr}", "--lr {lr!r}"), "command uses {lr!r}: write {lr}"),
        (('goal = "min"\n', ""), None),
        # No whole number in range: every draw was clamped to 0 or 1, outside it.
        (
            ('kind = "log_uniform"\nlow = 1e-4\nhigh = 1e-1', 'kind = "int_uniform"\nlow = 0.2\nhigh = 0.7'),
            "int_uniform range needs a whole number from low to high",
        ),
        # A fractional step repeats grid points (1, 1.5, 2, 2.5, 3 rounded).
        (
            ("count = 12", 'count = 12\n\n[params.layers]\nkind = "int_step"\nlow = 1\nhigh = 3\nstep = 0.5'),
            "int_step range needs whole low and step",
        ),
        (('vms = ["a", "b"]', 'vms = ["a", "a"]'), "names a VM twice"),
        # The sweep file's own key and line, not the CLI's --gpus flag (there is none in a sweep file).
        (
            ('vms = ["a", "b"]', 'vms = { count = 2, from = "base", gpus = "l4" }'),
            "sweep.toml: 'vms.gpus' is 'l4': write \"TYPE:COUNT\"",
        ),
        (('kind = "list"', 'kind = "choice"'), "params.batch_size"),
        # Names go unquoted into the file the VM's supervisor sources: one ran a command, one ended it.
        (("count = 12", 'count = 12\nenv = { "WANDB-PROJECT" = "x" }'), "'WANDB-PROJECT' is not a valid"),
        (("count = 12", 'count = 12\nenv = { "A; touch x; B" = "y" }'), "'A; touch x; B' is not a valid"),
    ],
)
def test_mistakes_are_one_line_with_file_and_line(change: tuple[str, str], message: str | None) -> None:
    old, new = change
    assert old in BASE or message is None
    if message is None:
        spec(BASE.replace(old, new))
        return
    with pytest.raises(ConfigError) as err:
        spec(BASE.replace(old, new))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_state_round_trips_through_an_atomic_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GCPTUI_SWEEPS_DIR", str(tmp_path))
    s = spec()
    state = SweepState(name=s.name, spec=s, created_at=1.0, trials=[])
    state.add(initial_trials(s))
    state.trials[3].state, state.trials[3].metric = "finished", 1.5
    state.trials[4].state, state.trials[4].metric = "finished", 0.5
    path = save_state(state)
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]  # no temporary left behind
    loaded = load_state(s.name)
    assert loaded is not None and loaded == state
    assert loaded.leader() is not None and loaded.leader().id == "t004"  # type: ignore[union-attr]
    assert loaded.counts() == {
        "queued": 10,
        "starting": 0,
        "running": 0,
        "finished": 2,
        "failed": 0,
        "pruned": 0,
    }


@pytest.mark.parametrize(
    ("change", "line"),
    [
        # A typo'd top-level key: the key it meant, as gcptui.toml's errors say it.
        (
            ("count = 12", "count = 12\nserach = 'tpe'"),
            "sweep.toml:9: unknown key 'serach': remove it or check its spelling (did you mean 'search'? "
            "the top level takes: ",
        ),
        (
            ("count = 12", "count = 12\n[prune]\nrul = 'median'"),
            "sweep.toml:10: unknown key 'prune.rul': remove it or check its spelling (did you mean 'rule'? "
            "[prune] takes: ",
        ),
        # A range key in a list parameter: the keys a list takes.
        (
            ("values = [8, 16, 32]", "values = [8, 16, 32]\nvalue = 1"),
            "sweep.toml:18: unknown key 'params.batch_size.value': remove it or check its spelling "
            "(did you mean 'values'? a list parameter takes: kind, values)",
        ),
        # pydantic's own message names the union's tags and no line.
        (
            ('kind = "log_uniform"', 'kind = "log-uniform"'),
            "sweep.toml:11: 'params.lr.kind' is 'log-uniform': did you mean 'log_uniform'? kind takes: list, "
            "uniform, log_uniform, int_uniform, int_log_uniform, step, int_step",
        ),
        (
            ('kind = "log_uniform"\n', ""),
            "sweep.toml:10: 'params.lr' must have kind = one of: list, uniform,",
        ),
    ],
)
def test_typos_get_a_did_you_mean_on_one_line(change: tuple[str, str], line: str) -> None:
    old, new = change
    assert old in BASE
    with pytest.raises(ConfigError) as err:
        spec(BASE.replace(old, new))
    assert str(err.value).startswith(line) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('vms = ["a", "b"]', ""), "vms names no VM: list at least one"),
        (
            ('vms = ["a", "b"]', 'on = "vertex"\nvms = ["a"]'),
            'on = "vertex" runs each trial as a job: remove vms',
        ),
        (('vms = ["a", "b"]', 'on = "gke"'), 'on = "gke" needs image = "IMAGE"'),
        (('vms = ["a", "b"]', 'on = "k8s"'), "sweep.toml:5: 'on': Input should be 'vms', 'vertex' or 'gke'"),
    ],
)
def test_where_trials_run_is_checked(change: tuple[str, str], message: str) -> None:
    old, new = change
    with pytest.raises(ConfigError) as err:
        spec(BASE.replace(old, new))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_jobs_need_no_vms() -> None:
    vertex = spec(BASE.replace('vms = ["a", "b"]', 'on = "vertex"\nslots = 8\nspot = true'))
    assert (vertex.on, vertex.slots, vertex.spot, vertex.vm_names) == ("vertex", 8, True, [])
    assert spec().on == "vms" and spec().slots == 4
