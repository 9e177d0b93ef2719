"""The Optuna study behind a model-based sweep (``search = "tpe" | "cmaes" | "gp"``) and its pruner.

Ask and tell: the scheduler asks the study for a trial when a slot frees, reports each running
trial's metric at the steps it logs (the progress protocol), stops a trial the pruner calls a loser,
and tells the study how each trial ended. The study is kept in Optuna's journal file beside the
sweep's state (``study.journal``); the sweep's state stays the authority on what ran, so opening the
study settles it against the state: a trial the state has ended and the study has not heard of is
told now (once), a trial the study asked for that never reached the state is failed (never run).

Each study trial carries the sweep trial's index (user attribute ``gcptui_index``). Optuna is
imported here only when a model-based sweep runs (it is a heavy import).
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gcptui.remote.errors import ConfigError
from gcptui.remote.sweep.spec import ListParam, ParamValue, RangeParam, StepParam, SweepSpec
from gcptui.remote.sweep.state import SweepState, Trial, sweep_dir
from gcptui.remote.sweep.trials import TrialPlan

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution

INDEX_ATTR = "gcptui_index"
JOURNAL = "study.journal"
TERMINAL = ("finished", "failed", "pruned")


def journal_path(name: str) -> Path:
    return sweep_dir(name) / JOURNAL


def load_optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise ConfigError(
            'search = "tpe", "cmaes" or "gp" needs Optuna: `pip install optuna` (and `cmaes` for cmaes)'
        ) from None
    optuna.logging.set_verbosity(logging.ERROR)  # no "Trial 3 finished ..." lines among the sweep's
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


# ---- the search space -------------------------------------------------------------------------


def distributions(spec: SweepSpec) -> dict[str, BaseDistribution]:
    """Each parameter as an Optuna distribution (a list is categorical; steps keep their grid)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out: dict[str, BaseDistribution] = {}
    for name, param in spec.params.items():
        if isinstance(param, ListParam):
            out[name] = CategoricalDistribution(list(dict.fromkeys(param.values)))
        elif isinstance(param, StepParam):
            steps = int(math.floor((param.high - param.low) / param.step + 1e-9))
            if param.kind == "int_step":
                low, step = int(param.low), int(param.step)
                out[name] = IntDistribution(low, low + steps * step, step=step)
            else:
                out[name] = FloatDistribution(param.low, param.low + steps * param.step, step=param.step)
        else:
            out[name] = _range(param)
    return out


def _range(param: RangeParam) -> BaseDistribution:
    from optuna.distributions import FloatDistribution, IntDistribution

    log = "log" in param.kind
    if param.kind.startswith("int_"):
        return IntDistribution(math.ceil(param.low), math.floor(param.high), log=log)
    return FloatDistribution(param.low, param.high, log=log)


def inside(distribution: BaseDistribution, value: object) -> bool:
    """``value`` is one the distribution can give (finite, in range, on its step, one of its choices)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(distribution, CategoricalDistribution):
        return any(type(value) is type(c) and value == c for c in distribution.choices)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return False
    if isinstance(distribution, IntDistribution):
        if not isinstance(value, int) or not distribution.low <= value <= distribution.high:
            return False
        return (value - distribution.low) % distribution.step == 0
    if isinstance(distribution, FloatDistribution):
        span = abs(distribution.high - distribution.low)
        tolerance = 1e-9 * max(1.0, span)
        if not distribution.low - tolerance <= value <= distribution.high + tolerance:
            return False
        if distribution.step is None:
            return True
        steps = (value - distribution.low) / distribution.step
        return abs(steps - round(steps)) < 1e-6
    return False


def params_inside(spec_distributions: dict[str, BaseDistribution], params: dict[str, Any]) -> bool:
    """Exactly the spec's parameters, each inside its distribution."""
    return set(params) == set(spec_distributions) and all(
        inside(spec_distributions[k], v) for k, v in params.items()
    )


# ---- samplers and pruners ---------------------------------------------------------------------


def trial_seed(seed: int, index: int) -> int:
    """The sampler's seed for trial ``index``: a sweep asked again from the same results (another
    laptop, after a crash) gets the same trial, as a random search's draws do."""
    return random.Random(f"{seed}/{index}").getrandbits(31)


def make_sampler(spec: SweepSpec, index: int) -> optuna.samplers.BaseSampler:
    optuna = load_optuna()
    seed = trial_seed(spec.seed, index)
    if spec.search == "cmaes":
        try:
            import cmaes  # noqa: F401 - CmaEsSampler imports it on first use, with a long traceback
        except ImportError:
            raise ConfigError('search = "cmaes" needs the cmaes package: `pip install cmaes`') from None
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if spec.search == "gp":
        try:
            import scipy  # noqa: F401
            import torch  # noqa: F401
        except ImportError:
            raise ConfigError('search = "gp" needs torch and scipy: `pip install torch scipy`') from None
        return optuna.samplers.GPSampler(seed=seed, warn_independent_sampling=False)
    # constant_liar: trials running at once (several slots) are not all asked the same point.
    # Random start-up trials: Optuna's 10 is for long studies; a sweep of tens of trials spends a
    # fifth of its budget (4 to 10) on them before the model leads.
    startup = min(10, max(4, spec.count // 5))
    return optuna.samplers.TPESampler(seed=seed, constant_liar=True, n_startup_trials=startup)


def make_pruner(spec: SweepSpec) -> optuna.pruners.BasePruner:
    optuna = load_optuna()
    prune = spec.prune
    if prune.rule == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=prune.min_trials,
            n_warmup_steps=prune.warmup_steps,
            interval_steps=prune.interval_steps,
        )
    if prune.rule == "percentile":
        return optuna.pruners.PercentilePruner(
            prune.percentile,
            n_startup_trials=prune.min_trials,
            n_warmup_steps=prune.warmup_steps,
            interval_steps=prune.interval_steps,
        )
    if prune.rule == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=max(prune.min_resource, prune.warmup_steps or 1),
            max_resource=prune.max_resource,
            reduction_factor=prune.reduction_factor,
        )
    return optuna.pruners.NopPruner()


# ---- the study --------------------------------------------------------------------------------


def frozen_from(
    spec: SweepSpec, trial: Trial, dists: dict[str, BaseDistribution]
) -> optuna.trial.FrozenTrial:
    """The study's record of a sweep trial, as the (validated) sweep state has it."""
    optuna = load_optuna()
    state, value = _outcome(trial)
    return optuna.trial.create_trial(
        state=state,
        value=value,
        params=dict(trial.params),
        distributions=dists,
        user_attrs={INDEX_ATTR: trial.index},
        intermediate_values={s: v for s, v in trial.curve if s >= 0},
    )


def _outcome(trial: Trial) -> tuple[Any, float | None]:
    """(Optuna state, value) of a sweep trial: finished with a finite metric is COMPLETE."""
    from optuna.trial import TrialState

    if trial.state == "finished" and trial.metric is not None and math.isfinite(trial.metric):
        return TrialState.COMPLETE, trial.metric
    if trial.state == "pruned":
        return TrialState.PRUNED, None
    if trial.state in TERMINAL:
        return TrialState.FAIL, None
    return TrialState.RUNNING, None


class SweepStudy:
    """One sweep's Optuna study over a journal file: ask, report, tell; see the module's docstring."""

    def __init__(self, spec: SweepSpec, study: optuna.Study, path: Path | None) -> None:
        self.spec = spec
        self.study = study
        self.path = path
        self.dists = distributions(spec)
        self._reported: dict[int, int] = {}  # sweep index -> the last step reported
        self._numbers: dict[int, int] = {}  # sweep index -> the number of the study trial holding it
        self._prune_at: dict[int, int] = {}  # sweep index -> the step the pruner stopped it at

    @classmethod
    def open(cls, state: SweepState, path: Path | None = None) -> SweepStudy:
        """The study of ``state`` kept at ``path`` (a journal file; None: in memory only), settled
        against the state (see the module's docstring)."""
        optuna = load_optuna()
        spec = state.spec
        storage: Any = None
        if path is not None:
            from optuna.storages import JournalStorage
            from optuna.storages.journal import JournalFileBackend

            path.parent.mkdir(parents=True, exist_ok=True)
            storage = JournalStorage(JournalFileBackend(str(path)))
        study = optuna.create_study(
            study_name=spec.name,
            storage=storage,
            load_if_exists=True,
            direction="minimize" if spec.goal == "min" else "maximize",
            sampler=make_sampler(spec, 0),
            pruner=make_pruner(spec),
        )
        opened = cls(spec, study, path)
        opened.settle(state)
        return opened

    def _frozen(self, index: int) -> optuna.trial.FrozenTrial | None:
        """The study's record of sweep trial ``index`` (None: the study holds none for it)."""
        mapped = self._numbers.get(index)
        return None if mapped is None else self.study.get_trials(deepcopy=False)[mapped]

    def settle(self, state: SweepState) -> None:
        """Bring the study up to the state: every ended trial told (once), every asked trial that no
        sweep trial holds failed, every sweep trial the study lacks added as it stands.

        A study trial stands for a sweep trial when it carries its index and the same parameters:
        a journal that is not this state's (a stale one, a sweep started afresh under the name)
        holds results, never the sweep's trials."""
        from optuna.trial import TrialState

        wanted = {t.index: t.params for t in state.trials}
        for held in self.study.get_trials(deepcopy=False):
            index = held.user_attrs.get(INDEX_ATTR)
            if (
                isinstance(index, int)
                and not isinstance(index, bool)
                and index in wanted
                and index not in self._numbers
                and held.params == wanted[index]
            ):
                self._numbers[index] = held.number
        mine = set(self._numbers.values())
        for asked in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING)):
            if asked.number not in mine:  # asked, and no sweep trial ever held it: never run
                self.study.tell(asked.number, state=TrialState.FAIL, skip_if_finished=True)
        for trial in state.trials:
            frozen = self._frozen(trial.index)
            if frozen is None:
                if params_inside(self.dists, trial.params):
                    self.study.add_trial(frozen_from(self.spec, trial, self.dists))
                    self._numbers[trial.index] = len(self.study.get_trials(deepcopy=False)) - 1
                    self._reported[trial.index] = max((s for s, _ in trial.curve), default=-1)
                continue
            self._reported[trial.index] = max(frozen.intermediate_values, default=-1)
            if frozen.state == TrialState.RUNNING and trial.state in TERMINAL:
                self.tell(trial)

    def _trial(self, index: int) -> optuna.trial.Trial | None:
        optuna = load_optuna()
        frozen = self._frozen(index)
        if frozen is None or frozen.state.is_finished():
            return None
        return optuna.trial.Trial(self.study, frozen._trial_id)

    def ask(self, state: SweepState) -> Trial:
        """A new sweep trial, its parameters from the sampler (seeded by its index), queued in ``state``."""
        index = max((t.index for t in state.trials), default=-1) + 1
        self.study.sampler = make_sampler(self.spec, index)
        asked = self.study.ask(self.dists)
        asked.set_user_attr(INDEX_ATTR, index)
        params: dict[str, ParamValue] = {name: asked.params[name] for name in self.spec.params}
        (added,) = state.add([TrialPlan(index, params)])
        self._numbers[index] = asked.number
        self._reported[index] = -1
        return added

    def report(self, trial: Trial, *, check: bool = True) -> bool:
        """Report the trial's metric at the steps logged since the last report, asking the pruner at
        each (``check``); True: prune it (asked again each poll until it is stopped: a kill that
        failed is tried again). ``check=False``: the trial ended (report every step, decide nothing).

        The pruner is asked step by step and nothing past the step it prunes at is reported, so
        the decision and the values the sampler later sees do not depend on how many steps one
        poll happened to read (a sweep whose trials run one at a time is the same on every engine)."""
        ongoing = self._trial(trial.index)
        if ongoing is None:
            return False
        if check and trial.index in self._prune_at:
            return True
        last = self._reported.get(trial.index, -1)
        bound = trial.pruned_at_step if trial.pruned_at_step is not None else math.inf
        fresh = sorted({s: v for s, v in trial.curve if last < s <= bound}.items())
        ruled = check and self.spec.prune.rule != "none"
        for step, value in fresh:
            ongoing.report(value, step)
            self._reported[trial.index] = step
            # Its last step is its end: nothing is left to save by stopping it there.
            final = trial.total_steps is not None and step >= trial.total_steps
            if ruled and not final and ongoing.should_prune():
                self._prune_at[trial.index] = step
                return True
        reported = self._reported.get(trial.index, -1)
        if (
            not ruled
            or reported < 0
            or fresh
            or (trial.total_steps is not None and reported >= trial.total_steps)
        ):
            return False
        if ongoing.should_prune():  # the same step, against trials that ended since
            self._prune_at[trial.index] = self._reported[trial.index]
            return True
        return False

    def pruned_at(self, trial: Trial) -> int | None:
        """The step at which ``report`` decided to prune the trial (None: it did not, in this run)."""
        return self._prune_at.get(trial.index)

    def tell(self, trial: Trial) -> None:
        """Tell the study how the trial ended (a trial it was told of already is left as it is)."""
        frozen = self._frozen(trial.index)
        if frozen is None or frozen.state.is_finished():
            return
        state, value = _outcome(trial)
        with contextlib.suppress(ValueError, RuntimeError):  # finished meanwhile (never told twice)
            self.study.tell(frozen.number, value, state=state, skip_if_finished=True)

    def budget_left(self, state: SweepState) -> int:
        return max(0, self.spec.count - len(state.trials))


def study_from_state(state: SweepState) -> optuna.Study:
    """An in-memory study of the sweep's ended trials (any search): what the report's importances
    and optimization history are computed from, with Optuna's own functions."""
    optuna = load_optuna()
    spec = state.spec
    study = optuna.create_study(direction="minimize" if spec.goal == "min" else "maximize")
    dists = distributions(spec)
    ended = [t for t in sorted(state.trials, key=lambda t: t.index) if t.state in TERMINAL]
    study.add_trials([frozen_from(spec, t, dists) for t in ended if params_inside(dists, t.params)])
    return study


def importances(study: optuna.Study) -> dict[str, float]:
    """Each parameter's share of the metric's variance (Optuna's fANOVA); empty below two scored
    trials or when no parameter varies."""
    optuna = load_optuna()
    from optuna.trial import TrialState

    if len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))) < 2:
        return {}
    try:
        found = optuna.importance.get_param_importances(study)
    except (ValueError, RuntimeError):
        return {}
    return {name: float(score) for name, score in found.items()}


def history(study: optuna.Study) -> list[tuple[int, float, float]]:
    """(sweep trial index, its value, the best value so far) of each scored trial, in index order."""
    from optuna.study import StudyDirection
    from optuna.trial import TrialState

    pick = min if study.direction == StudyDirection.MINIMIZE else max
    out: list[tuple[int, float, float]] = []
    for frozen in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        value = float(frozen.value)  # type: ignore[arg-type]
        best = pick(value, out[-1][2]) if out else value
        out.append((int(frozen.user_attrs[INDEX_ATTR]), value, best))
    return out
