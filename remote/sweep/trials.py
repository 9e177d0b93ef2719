"""Trials from a sweep spec: a grid, or draws from a seeded random stream; commands filled in.

Trial ``i`` of a random search draws from its own ``random.Random(f"{seed}/{i}")``, so the same seed
gives the same trials on any machine, and ``sweep extend`` continues the sequence (trials
``n, n+1, ...``) without changing the trials already there.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gcptui.remote.errors import ConfigError
from gcptui.remote.sweep.spec import RUN_DIR, ListParam, Param, ParamValue, RangeParam, StepParam, SweepSpec


@dataclass(frozen=True, slots=True)
class TrialPlan:
    """One trial to run: its id, its parameter values, and its position in the search."""

    index: int
    params: dict[str, ParamValue]

    @property
    def id(self) -> str:
        return trial_id(self.index)


def trial_id(index: int) -> str:
    """``t000``, ``t001``, ...: sortable, and usable as a directory name."""
    return f"t{index:03d}"


def _step_values(param: StepParam) -> list[float]:
    count = int(math.floor((param.high - param.low) / param.step + 1e-9)) + 1
    values = [param.low + k * param.step for k in range(count)]
    return [int(round(v)) for v in values] if param.kind == "int_step" else values


def grid_values(param: Param) -> list[ParamValue]:
    """The values a grid search tries for ``param``, in order."""
    if isinstance(param, ListParam):
        return list(param.values)
    if isinstance(param, StepParam):
        return list(_step_values(param))
    log = "log" in param.kind
    low, high = (math.log(param.low), math.log(param.high)) if log else (param.low, param.high)
    n = param.points
    points = [low + (high - low) * k / (n - 1) for k in range(n)] if n > 1 else [low]
    values: list[float] = [math.exp(p) for p in points] if log else points
    if param.kind.startswith("int_"):
        # Rounding may merge points, and must not leave the range (low 0.4 rounds to 0).
        low, high = math.ceil(param.low), math.floor(param.high)
        return list(dict.fromkeys(min(max(int(round(v)), low), high) for v in values))
    return list(values)


def draw(param: Param, rng: random.Random) -> ParamValue:
    """One random value of ``param``."""
    if isinstance(param, ListParam):
        return rng.choice(param.values)
    if isinstance(param, StepParam):
        return rng.choice(_step_values(param))
    return _draw_range(param, rng)


def _draw_range(param: RangeParam, rng: random.Random) -> ParamValue:
    if "log" in param.kind:
        value = math.exp(rng.uniform(math.log(param.low), math.log(param.high)))
    else:
        value = rng.uniform(param.low, param.high)
    if param.kind.startswith("int_"):
        return min(max(int(round(value)), math.ceil(param.low)), math.floor(param.high))
    return value


def _grid(spec: SweepSpec) -> Iterator[dict[str, ParamValue]]:
    names = list(spec.params)
    for combo in itertools.product(*(grid_values(spec.params[n]) for n in names)):
        yield dict(zip(names, combo, strict=True))


def grid_size(spec: SweepSpec) -> int:
    return math.prod(len(grid_values(p)) for p in spec.params.values())


def plan_trials(spec: SweepSpec, start: int, count: int) -> list[TrialPlan]:
    """Trials ``start .. start+count-1`` of the search (a grid stops at its end)."""
    if spec.search == "random":
        plans = []
        for index in range(start, start + count):
            rng = random.Random(f"{spec.seed}/{index}")
            plans.append(TrialPlan(index, {name: draw(p, rng) for name, p in spec.params.items()}))
        return plans
    combos = itertools.islice(_grid(spec), start, start + count)
    return [TrialPlan(start + k, combo) for k, combo in enumerate(combos)]


def initial_trials(spec: SweepSpec) -> list[TrialPlan]:
    """The trials a new sweep starts with: ``count`` draws, or the grid (its first ``count``); none
    for a model-based search (its study asks each one when a slot frees)."""
    if spec.model_based:
        return []
    if spec.search == "random":
        return plan_trials(spec, 0, spec.count)
    size = grid_size(spec)
    return plan_trials(spec, 0, min(size, spec.count) if spec.count else size)


def extend_trials(spec: SweepSpec, existing: int, count: int) -> list[TrialPlan]:
    """``count`` more trials after the ``existing`` ones; a grid cannot grow past its end."""
    if count < 1:
        raise ConfigError("--count must be at least 1")
    if spec.model_based:  # its study asks them as slots free (the caller raises the budget)
        return []
    if spec.search == "grid":
        left = grid_size(spec) - existing
        if left <= 0:
            raise ConfigError(
                f"sweep {spec.name}: the grid's {existing} points all have trials: "
                'add values to the parameters in a new sweep, or use search = "random"'
            )
        count = min(count, left)
    return plan_trials(spec, existing, count)


def format_value(value: ParamValue) -> str:
    """A value as it appears on the command line: repr() of a float round-trips exactly."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def render(template: str, params: dict[str, ParamValue], run_dir: str) -> str:
    """The template with every ``{param}`` and ``{run_dir}`` filled in, each value shell-quoted."""
    fields: dict[str, Any] = {name: shlex.quote(format_value(v)) for name, v in params.items()}
    fields[RUN_DIR] = shlex.quote(run_dir)
    return template.format(**fields)


def params_json(params: dict[str, ParamValue]) -> str:
    """``GCPTUI_PARAMS``: the trial's parameters as one JSON object."""
    return json.dumps(params, sort_keys=True)
