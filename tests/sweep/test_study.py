"""The Optuna study of a model-based sweep: the search space, ask/report/tell against the sweep's
state, settling after a crash (nothing told twice), and a journal from the bucket read back checked.
Real Optuna over real journal files; no VM (the emulator tests run the scheduler)."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from gcptui.remote.errors import ConfigError
from gcptui.remote.sweep.spec import parse_sweep
from gcptui.remote.sweep.state import SweepState
from gcptui.remote.sweep.study import INDEX_ATTR, SweepStudy, distributions, inside
from gcptui.remote.sweep.study_store import adopt_journal

TPE = """
name = "opt"
command = "python train.py --lr {lr} --bs {bs} --k {k} --run-dir {run_dir}"
metric = "loss"
vms = ["a"]
search = "tpe"
seed = 3
count = 6

[params.lr]
kind = "log_uniform"
low = 1e-4
high = 1e-1

[params.bs]
kind = "list"
values = [8, 16]

[params.k]
kind = "int_step"
low = 1
high = 8
step = 3

[prune]
rule = "median"
warmup_steps = 2
min_trials = 2
"""


def new_state(text: str = TPE) -> SweepState:
    spec = parse_sweep(text, Path("opt.toml"))
    return SweepState(name=spec.name, spec=spec, created_at=0.0, trials=[])


def run_trial(study: SweepStudy, state: SweepState, loss: float | None = None, steps: int = 6) -> None:
    """Ask a trial and run it: ``loss + 1/step`` at each step (loss: 100 * lr when None), pruned
    when the pruner says so."""
    trial = study.ask(state)
    loss = 100 * float(trial.params["lr"]) if loss is None else loss
    trial.state = "running"
    for step in range(1, steps + 1):
        trial.curve.append((step, loss + 1 / step))
        trial.step, trial.metric = step, loss + 1 / step
        if study.report(trial):
            trial.state, trial.pruned_at_step = "pruned", step
            break
    else:
        trial.state = "finished"
    study.tell(trial)


def test_the_file_takes_model_based_searches_and_prune_rules() -> None:
    state = new_state()
    assert state.spec.model_based and state.spec.prune.rule == "median" and state.spec.prune.warmup_steps == 2
    with pytest.raises(ConfigError, match="a tpe search needs count = N"):
        parse_sweep(TPE.replace("count = 6", ""), Path("opt.toml"))
    grid = TPE.replace('search = "tpe"', 'search = "grid"')
    with pytest.raises(ConfigError, match='needs search = "tpe", "cmaes" or "gp"'):
        parse_sweep(grid, Path("opt.toml"))
    with pytest.raises(ConfigError, match="opt.toml:.*rule"):
        parse_sweep(TPE.replace('rule = "median"', 'rule = "mean"'), Path("opt.toml"))


def test_parameters_map_to_distributions_that_check_values() -> None:
    dists = distributions(new_state().spec)
    assert dists["lr"] == FloatDistribution(1e-4, 1e-1, log=True)
    assert dists["k"].high == 7 and dists["k"].step == 3  # type: ignore[attr-defined]  # 1, 4, 7
    assert inside(dists["k"], 4) and not inside(dists["k"], 5) and not inside(dists["k"], 10)
    assert inside(dists["bs"], 16) and not inside(dists["bs"], 32) and not inside(dists["bs"], "16")
    assert not inside(dists["lr"], float("nan")) and not inside(dists["lr"], 0.5)


def test_the_same_seed_asks_the_same_trials_and_every_trial_is_told(tmp_path: Path) -> None:
    runs = []
    for name in ("a", "b"):
        state = new_state()
        study = SweepStudy.open(state, tmp_path / name / "study.journal")
        for k in range(6):
            run_trial(study, state, loss=float(k % 3))
        runs.append(state)
        done = study.study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))
        assert sorted(t.user_attrs[INDEX_ATTR] for t in done) == list(range(6))
    assert [t.params for t in runs[0].trials] == [t.params for t in runs[1].trials]
    assert [t.id for t in runs[0].trials] == ["t000", "t001", "t002", "t003", "t004", "t005"]
    for trial in runs[0].trials:
        assert trial.command.startswith("python train.py --lr ") and trial.params["k"] in (1, 4, 7)


def test_a_clearly_worse_trial_is_pruned_after_the_warmup(tmp_path: Path) -> None:
    state = new_state()
    study = SweepStudy.open(state, tmp_path / "study.journal")
    run_trial(study, state, loss=0.0)
    run_trial(study, state, loss=0.1)
    run_trial(study, state, loss=5.0)
    worse = state.trials[2]
    assert [t.state for t in state.trials] == ["finished", "finished", "pruned"]
    assert worse.pruned_at_step == 2  # at the end of the warmup (warmup_steps = 2 run)
    frozen = study.study.trials[2]
    assert frozen.state == TrialState.PRUNED and max(frozen.intermediate_values) == 2


def test_reopening_after_a_crash_tells_what_ended_once_and_fails_what_never_ran(tmp_path: Path) -> None:
    path = tmp_path / "study.journal"
    state = new_state()
    study = SweepStudy.open(state, path)
    run_trial(study, state, loss=1.0)
    # A crash after the state recorded t001 finished, before the study was told; and another
    # just after the study was asked for a trial the state never saw.
    ended = study.ask(state)
    ended.state, ended.metric, ended.curve = "finished", 0.5, [(1, 0.5)]
    study.study.ask()  # asked, then the laptop died before it reached the state (no index)
    again = SweepStudy.open(state, path)
    again_twice = SweepStudy.open(state, path)
    trials = again_twice.study.trials
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.FAIL]
    assert trials[1].value == 0.5 and trials[1].user_attrs[INDEX_ATTR] == 1
    assert again.study.trials[1].state == TrialState.COMPLETE
    # Each trial's end is written once: one state change per trial in the journal.
    told: dict[int, int] = {}
    for line in path.read_text().splitlines():
        op = json.loads(line)
        if op["op_code"] == 6:  # SET_TRIAL_STATE_VALUES
            told[op["trial_id"]] = told.get(op["trial_id"], 0) + 1
    assert told == {0: 1, 1: 1, 2: 1}


def test_a_journal_from_the_bucket_feeds_the_study_only_what_passes_the_checks(tmp_path: Path) -> None:
    spec = new_state().spec
    foreign = tmp_path / "foreign.journal"
    study = optuna.create_study(study_name="opt", storage=JournalStorage(JournalFileBackend(str(foreign))))
    wide = {**distributions(spec), "lr": FloatDistribution(1e-6, 10.0, log=True)}

    def add(index: object, lr: float, value: float, **extra: object) -> None:
        study.add_trial(optuna.trial.create_trial(
            value=value, params={"lr": lr, "bs": 8, "k": 4}, distributions=wide,
            user_attrs={INDEX_ATTR: index}, **extra))  # type: ignore[arg-type]  # fmt: skip

    add(0, 1e-3, 0.25, system_attrs={"cma:optimizer": "80049500"})  # a pickle: never copied
    add(1, 5.0, 0.1)  # lr outside the sweep's range
    add(2, 1e-2, 0.3, intermediate_values={1: float("inf")})
    add("3", 1e-2, 0.3)  # the index is no whole number
    add(4, 2e-3, 0.2)
    path = tmp_path / "sweeps" / "opt" / "study.journal"
    assert adopt_journal(foreign.read_bytes(), spec, path) == 2
    kept = optuna.load_study(study_name="opt", storage=JournalStorage(JournalFileBackend(str(path)))).trials
    assert [(t.user_attrs, t.value) for t in kept] == [({INDEX_ATTR: 0}, 0.25), ({INDEX_ATTR: 4}, 0.2)]
    assert all(t.system_attrs == {} for t in kept)
    with pytest.raises(ValueError, match="not a journal of study 'opt'"):
        adopt_journal(b'{"op_code": 99}\n', spec, tmp_path / "x.journal")


def test_the_report_adds_importances_and_the_optimization_history(tmp_path: Path) -> None:
    from gcptui.remote.sweep.report import write_report

    state = new_state()
    study = SweepStudy.open(state, None)
    for _ in range(6):
        run_trial(study, state)
    written = {p.name for p in write_report(state, tmp_path)}
    assert {"importances.csv", "importances.svg", "history.csv", "history.svg"} <= written
    data = json.loads((tmp_path / "results.json").read_text())
    assert set(data["importances"]) == {"lr", "bs", "k"}
    assert abs(sum(data["importances"].values()) - 1.0) < 1e-6
    bests = [row["best"] for row in data["history"]]
    assert bests == sorted(bests, reverse=True) and data["history"][0]["trial"] == "t000"
    pruned = [row for row in data["trials"] if row["state"] == "pruned"]
    assert all(row["pruned_at_step"] for row in pruned)


@pytest.mark.parametrize(("search", "rule"), [("cmaes", "percentile"), ("gp", "hyperband"), ("tpe", "none")])
def test_every_search_and_prune_rule_asks_trials_inside_the_space(
    search: str, rule: str, tmp_path: Path
) -> None:
    text = TPE.replace('search = "tpe"', f'search = "{search}"').replace(
        'rule = "median"', f'rule = "{rule}"'
    )
    state = new_state(text)
    study = SweepStudy.open(state, tmp_path / "study.journal")
    for k in range(6):
        run_trial(study, state, loss=float(k % 2))
    dists = distributions(state.spec)
    assert len(state.trials) == 6 and all(
        inside(dists[n], v) for t in state.trials for n, v in t.params.items()
    )
    assert {t.state for t in state.trials} <= {"finished", "pruned"}
    ended = study.study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))
    assert len(ended) == 6


def test_a_journal_that_is_not_the_states_holds_results_never_its_trials(tmp_path: Path) -> None:
    # A sweep started afresh under the name of an old one whose journal is still there (or came
    # from the bucket): t000 of the new state is not the journal's t000.
    path = tmp_path / "study.journal"
    old = new_state()
    old_study = SweepStudy.open(old, path)
    for _ in range(2):
        run_trial(old_study, old, loss=1.0)
    old_study.ask(old)  # left running in the old journal
    fresh = new_state(TPE.replace("seed = 3", "seed = 4"))
    study = SweepStudy.open(fresh, path)
    run_trial(study, fresh, loss=0.25)
    trials = study.study.trials
    assert [t.state for t in trials[:3]] == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.FAIL]
    assert trials[3].state == TrialState.COMPLETE and trials[3].value == 0.25 + 1 / 6
    assert trials[3].params == fresh.trials[0].params and max(trials[3].intermediate_values) == 6
    assert trials[0].value == 1.0 + 1 / 6  # the old trial 0 was not reported to


def test_a_journal_in_the_bucket_is_used_only_when_signed_with_this_machines_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gcptui.remote.errors import GcptuiError
    from gcptui.remote.sweep.study_store import decode_journal, encode_journal

    monkeypatch.setenv("GCPTUI_SWEEPS_DIR", str(tmp_path / "sweeps"))
    with pytest.raises(GcptuiError, match="no sweep key"):
        decode_journal(b"anything", "opt", "gs://b/x")
    signed = encode_journal("opt", b'{"op_code": 0}\n')  # makes this machine's key
    assert decode_journal(signed, "opt", "gs://b/x") == b'{"op_code": 0}\n'
    for planted in (
        b'{"op_code": 0}\n',
        signed.replace(b"op_code", b"op_kode"),
        encode_journal("other", b"x"),
    ):
        with pytest.raises(GcptuiError, match="not signed with this machine's sweep key"):
            decode_journal(planted, "opt", "gs://b/x")
