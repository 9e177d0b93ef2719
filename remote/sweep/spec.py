"""The sweep file (TOML), validated with pydantic like ``gcptui.toml``.

```toml
name = "lr-bs"
command = "python -m gcptui_trainer --run-dir {run_dir} --steps 200 --lr {lr} --batch-size {batch_size} --resume"
metric = "val_loss"
goal = "min"
search = "random"        # or "grid"; "tpe" | "cmaes" | "gp": Optuna asks each trial as a slot frees
seed = 0
count = 12               # random: trials to draw; grid: at most this many (0: the whole grid)
vms = ["vm-0", "vm-1"]
at_end = "stop"          # "stop" | "delete" | "none"
# on = "vertex"          # or "gke": each trial a Vertex AI custom job / Kubernetes Job (no vms);
# slots = 4              #   at most this many at once

[params.lr]
kind = "log_uniform"
low = 1e-4
high = 1e-2

[params.batch_size]
kind = "list"
values = [8, 16]
```

Every mistake is one ``ConfigError`` line naming the file, the line and the key.
"""

from __future__ import annotations

import difflib
import math
import re
import string
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from gcptui.remote.cloud.create import check_vm_name, parse_gpus
from gcptui.remote.config.loader import describe_error, first_error, read_text
from gcptui.remote.config.work import check_env_names
from gcptui.remote.errors import ConfigError

ParamValue = int | float | str | bool
RUN_DIR = "run_dir"  # the placeholder every command gets: the trial's own run directory
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ListParam(_Strict):
    """A predetermined list of values, tried in order by a grid and drawn uniformly at random."""

    kind: Literal["list"]
    values: list[ParamValue] = Field(min_length=1)


class RangeParam(_Strict):
    """``uniform`` / ``log_uniform`` (multiplicative) between ``low`` and ``high``; ``int_`` variants round.

    A grid takes ``points`` values evenly spaced (in log space for ``log_uniform``), ends included.
    """

    kind: Literal["uniform", "log_uniform", "int_uniform", "int_log_uniform"]
    low: float
    high: float
    points: int = Field(default=3, ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> RangeParam:
        if not self.low <= self.high:
            raise ValueError(f"low ({self.low}) must be at most high ({self.high})")
        if "log" in self.kind and self.low <= 0:
            raise ValueError(f"a {self.kind} range needs low > 0, not {self.low}")
        if self.kind.startswith("int_") and math.ceil(self.low) > math.floor(self.high):
            # Every draw would be clamped to a value outside the range.
            raise ValueError(
                f"an {self.kind} range needs a whole number from low to high: {self.low}..{self.high}"
            )
        return self


class StepParam(_Strict):
    """``low``, ``low + step``, ... up to ``high`` (included when it falls on a step); ``int_step`` for ints."""

    kind: Literal["step", "int_step"]
    low: float
    high: float
    step: float = Field(gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> StepParam:
        if not self.low <= self.high:
            raise ValueError(f"low ({self.low}) must be at most high ({self.high})")
        if self.kind == "int_step" and not (float(self.low).is_integer() and float(self.step).is_integer()):
            # low 1, step 0.5 rounds 1, 1.5, 2, 2.5 to 1, 2, 2, 2: the same trial again and again.
            raise ValueError(
                f"an int_step range needs whole low and step, not low {self.low}, step {self.step}"
            )
        return self


Param = Annotated[ListParam | RangeParam | StepParam, Field(discriminator="kind")]
Search = Literal["grid", "random", "tpe", "cmaes", "gp"]
Engine = Literal["vms", "vertex", "gke"]
MODEL_BASED = ("tpe", "cmaes", "gp")  # an Optuna study picks each trial from the ones that ended


class PruneSpec(_Strict):
    """``[prune]``: stop a trial whose metric at a step is worse than the others' at that step
    (Optuna's pruners, fed with the metric at every step the trial reports)."""

    rule: Literal["median", "percentile", "hyperband", "none"] = "median"
    warmup_steps: int = Field(default=0, ge=0, description="Steps a trial runs before it may be pruned.")
    min_trials: int = Field(
        default=5, ge=0, description="median/percentile: trials that ended before any is pruned."
    )
    interval_steps: int = Field(default=1, ge=1, description="Check every N steps (after the warmup).")
    percentile: float = Field(default=25.0, gt=0, lt=100, description="percentile: the cut (best N %).")
    min_resource: int = Field(default=1, ge=1, description="hyperband: steps of the first rung.")
    max_resource: int | Literal["auto"] = Field(
        default="auto", description="hyperband: a trial's full steps (auto: from the first to end)."
    )
    reduction_factor: int = Field(default=3, ge=2, description="hyperband: 1/N of the trials go on per rung.")

    @field_validator("max_resource")
    @classmethod
    def _positive(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:
            raise ValueError(f'must be at least 1 (or "auto"), not {value}')
        return value


class VmsFrom(_Strict):
    """``vms = { count = 3, from = "base" }``: COUNT VMs made like the instance BASE (``vm create
    --from``'s code), named ``PREFIX-1 .. PREFIX-COUNT``; ``sweep run`` creates those that do not exist."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    count: int = Field(ge=1, le=64)
    base: str = Field(alias="from", min_length=1, description="The instance whose settings to copy.")
    prefix: str = Field(default="", description="Names PREFIX-1..PREFIX-N; empty: the sweep's name.")
    zone: str | None = None
    spot: bool | None = Field(default=None, description="True: Spot, False: on-demand; unset: the base's.")
    machine_type: str | None = None
    gpus: str | None = Field(
        default=None, description='"TYPE:COUNT" (e.g. "nvidia-l4:2"); unset: as the base.'
    )

    @field_validator("gpus")
    @classmethod
    def _gpus_parse(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_gpus(value)
            except ConfigError:  # its line names `vm create`'s --gpus flag, not this file's key
                raise ValueError(
                    f'is {value!r}: write "TYPE:COUNT", e.g. "nvidia-l4:1" (COUNT 0: no GPUs)'
                ) from None
        return value

    def names(self, sweep_name: str) -> list[str]:
        """The VMs' names: ``PREFIX-1 .. PREFIX-COUNT`` (the prefix defaults to the sweep's name made
        a GCE name: lowercase, ``-`` for anything else)."""
        prefix = self.prefix or re.sub(r"[^a-z0-9-]", "-", sweep_name.lower())
        if not prefix[:1].isalpha():
            prefix = f"sweep-{prefix}"
        return [check_vm_name(f"{prefix}-{k}") for k in range(1, self.count + 1)]


def _vms_kind(value: Any) -> str:
    return "from" if isinstance(value, dict | VmsFrom) else "names"


# A list of names, or a table: the tag picks the branch, so an error names the table's own key.
Vms = Annotated[
    Annotated[list[str], Tag("names")] | Annotated[VmsFrom, Tag("from")], Discriminator(_vms_kind)
]


class SweepSpec(_Strict):
    """One sweep: the command template, the search space, the metric and the VMs it runs on."""

    name: str = Field(description="The sweep's name: its state file, `sweep status NAME`.")
    command: str = Field(description="Command template: `{param}` placeholders and `{run_dir}`.")
    resume: str = Field(
        default="",
        description="Template of the command that continues a trial (retry, preemption). Empty: `command`.",
    )
    params: dict[str, Param] = Field(min_length=1)
    search: Search = "random"
    seed: int = 0
    count: int = Field(
        default=0, ge=0, description="random, tpe, cmaes, gp: trials run; grid: the first COUNT (0: all)."
    )
    prune: PruneSpec = Field(
        default=PruneSpec(rule="none"), description="Stop losing trials early (tpe, cmaes, gp)."
    )
    metric: str = Field(description="The progress-protocol key compared across trials, e.g. `val_loss`.")
    goal: Literal["min", "max"] = "min"
    on: Engine = Field(
        default="vms",
        description='Where trials run: "vms" (the sweep\'s VMs), "vertex" (a Vertex AI custom job each), '
        '"gke" (a Kubernetes Job each).',
    )
    vms: Vms = Field(
        default=[],
        description="The VMs (or [[hosts]]) the trials run on, or { count = N, from = BASE } to make them.",
    )
    slots: int = Field(default=4, ge=1, le=1000, description='on = "vertex" | "gke": trials (jobs) at once.')
    image: str = Field(
        default="",
        description='on = "gke": the image the trials\' pods run (python3 and google-cloud-storage); '
        'on = "vertex": instead of [vertex] image.',
    )
    spot: bool | None = Field(
        default=None,
        description='on = "vertex" | "gke": Spot workers (GKE: on Spot nodes); unset: [vertex] spot, or any node.',
    )
    cluster: str = Field(
        default="", description='on = "gke": the [[gke]] cluster\'s name (empty: the only one configured).'
    )
    trials_per_vm: int = Field(
        default=0,
        ge=0,
        description="Trials at once per VM, each pinned to its share of the GPUs; 0: one per GPU (1 without).",
    )
    at_end: Literal["stop", "delete", "none"] = "stop"
    max_failures: int = Field(default=1, ge=1, description="Failed attempts before a trial is given up.")
    run_root: str = Field(
        default="sweeps",
        description="Where run directories go, relative to [sync].dest (or absolute): RUN_ROOT/NAME/TRIAL.",
    )
    env: dict[str, str] = Field(default={}, description="Extra environment for every trial.")
    poll_seconds: float = Field(default=1.0, gt=0, description="How often job states are read.")
    keepalive: bool = Field(
        default=True,
        description="While `sweep run` runs, restart preempted VMs and resume their trials (needs [gcp]).",
    )

    @field_validator("name")
    @classmethod
    def _name_is_a_file_name(cls, value: str) -> str:
        if not re.fullmatch(NAME_PATTERN, value):
            raise ValueError(f"{value!r} must be letters, digits, '_', '.' or '-' (it names files)")
        return value

    @field_validator("params")
    @classmethod
    def _param_names(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name == RUN_DIR:
                raise ValueError(
                    f"{name!r} is not a usable parameter name (an identifier other than run_dir)"
                )
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        return check_env_names(value)

    @field_validator("vms")
    @classmethod
    def _vms_unique(cls, value: list[str] | VmsFrom) -> list[str] | VmsFrom:
        if isinstance(value, list) and len(set(value)) != len(value):
            raise ValueError("names a VM twice: list each VM once")
        return value

    @model_validator(mode="after")
    def _templates_match_params(self) -> SweepSpec:
        for key in ("command", "resume"):
            template = getattr(self, key)
            if not template and key == "resume":
                continue
            fields = placeholders(template)
            styled = formatted(template)
            if styled is not None:
                # Values are filled in shell-quoted (floats exact, by repr): a format spec or a
                # conversion would act on the quoted text (':.3g' fails there, '!r' quotes twice).
                written, field = styled
                raise ValueError(
                    f"{key} uses {written}: write {{{field}}} (the exact value is filled in, shell-quoted)"
                )
            unknown = fields - set(self.params) - {RUN_DIR}
            if unknown:
                raise ValueError(
                    f"{key} uses {{{sorted(unknown)[0]}}}, which is not a parameter: add [params.{sorted(unknown)[0]}]"
                )
            if RUN_DIR not in fields:
                raise ValueError(f"{key} must contain {{run_dir}}: each trial needs its own run directory")
        if self.search != "grid" and self.count < 1:
            raise ValueError(f"a {self.search} search needs count = N (the number of trials to run)")
        if self.prune.rule != "none" and self.search not in MODEL_BASED:
            raise ValueError(
                f'[prune] rule = "{self.prune.rule}" needs search = "tpe", "cmaes" or "gp" (an Optuna study)'
            )
        if self.on == "vms" and isinstance(self.vms, list) and not self.vms:
            raise ValueError(
                'vms names no VM: list at least one, write { count = N, from = BASE }, or set on = "vertex" | "gke"'
            )
        if self.on == "gke" and not self.image:
            raise ValueError('on = "gke" needs image = "IMAGE": what the trials\' pods run')
        if self.on != "vms" and self.vms:
            raise ValueError(
                f'on = "{self.on}" runs each trial as a job: remove vms (slots = N caps the jobs at once)'
            )
        if isinstance(self.vms, VmsFrom):
            try:
                self.vms.names(self.name)
            except ConfigError as err:
                raise ValueError(f"vms: {err}") from None
        return self

    @property
    def vm_names(self) -> list[str]:
        """The names of the sweep's VMs (listed, or the ones ``{ count, from }`` makes)."""
        return list(self.vms) if isinstance(self.vms, list) else self.vms.names(self.name)

    @property
    def resume_template(self) -> str:
        return self.resume or self.command

    def identity(self) -> dict[str, Any]:
        """What makes two sweep files the same search (a changed one must not resume an old state)."""
        return self.model_dump(include={"command", "resume", "params", "search", "seed", "metric", "goal"})

    @property
    def model_based(self) -> bool:
        """An Optuna study asks each trial (``tpe``, ``cmaes``, ``gp``): none is planned ahead."""
        return self.search in MODEL_BASED


def placeholders(template: str) -> set[str]:
    """The ``{name}`` fields of a template (``{{`` escapes a brace)."""
    try:
        return {field for _, field, _, _ in string.Formatter().parse(template) if field is not None}
    except ValueError as err:
        raise ValueError(f"is not a valid template ({err}): write a literal brace as {{{{ or }}}}") from None


def formatted(template: str) -> tuple[str, str] | None:
    """The first ``{name:spec}`` or ``{name!conversion}`` of a template: (as written, name); None: none."""
    for _, field, spec, conversion in string.Formatter().parse(template):
        if field is not None and (spec or conversion):
            written = field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
            return "{" + written + "}", field
    return None


def parse_sweep(text: str, path: Path) -> SweepSpec:
    """Validate a sweep file's text; errors name ``path:line`` and the key."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML ({err}): fix the syntax") from None
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as err:
        first = first_error(err)
        loc = list(first["loc"])
        if first["type"] in ("union_tag_invalid", "union_tag_not_found") and loc[:1] == ["params"]:
            raise ConfigError(_kind_error(first, loc, text, path)) from None
        kind = str(loc[2]) if len(loc) > 3 and loc[0] == "params" else ""
        # The discriminated union puts the kind into the location ("params", "lr", "list", "values"):
        # drop it so the line search finds the key under [params.lr].
        if len(loc) > 3 and loc[0] == "params" and isinstance(loc[2], str) and loc[2] in _KINDS:
            loc = [f"params.{loc[1]}", *loc[3:]]
        elif len(loc) >= 2 and loc[0] == "vms" and loc[1] in ("names", "from"):
            loc = ["vms", *loc[2:]]  # the union's tag, not a key of the file
        elif len(loc) >= 2 and loc[0] == "params":
            loc = [f"params.{loc[1]}", *loc[2:]] if len(loc) > 2 else loc
        if first["type"] == "extra_forbidden" and kind in _KIND_MODELS:
            message = _param_extra_key(kind, loc, text, path)
        else:
            message = describe_error({**first, "loc": loc}, text, path, SweepSpec)
        raise ConfigError(message.replace("docs/REFERENCE.md", "docs/sweeps.md")) from None


_KIND_MODELS: dict[str, type[_Strict]] = {
    "list": ListParam,
    **{kind: RangeParam for kind in ("uniform", "log_uniform", "int_uniform", "int_log_uniform")},
    **{kind: StepParam for kind in ("step", "int_step")},
}
_KINDS = set(_KIND_MODELS)


def _kind_error(error: Any, loc: list[Any], text: str, path: Path) -> str:
    """A missing or unknown ``kind`` in ``[params.NAME]`` as one line (pydantic's names the union's
    internals): the value, a did-you-mean and the kinds there are."""
    table = f"params.{loc[1]}"
    kinds = ", ".join(_KIND_MODELS)
    if error["type"] == "union_tag_not_found":
        said = {"type": "value_error", "loc": [table], "msg": f"must have kind = one of: {kinds}"}
        return describe_error(said, text, path)
    written = str(error.get("ctx", {}).get("tag", ""))
    # "log-uniform" and "Uniform" are near misses too: compare them in the kinds' own spelling.
    close = difflib.get_close_matches(written.lower().replace("-", "_"), list(_KIND_MODELS), n=1)
    guess = f"did you mean '{close[0]}'? " if close else ""
    said = {
        "type": "value_error",
        "loc": [table, "kind"],
        "msg": f"is {written!r}: {guess}kind takes: {kinds}",
    }
    return describe_error(said, text, path)


def _param_extra_key(kind: str, loc: list[Any], text: str, path: Path) -> str:
    """An unknown key in ``[params.NAME]``: the keys a KIND parameter takes, with a did-you-mean."""
    key = str(loc[-1])
    said = describe_error({"type": "extra_forbidden", "loc": loc}, text, path)
    allowed = sorted(_KIND_MODELS[kind].model_fields)
    close = difflib.get_close_matches(key, allowed, n=1)
    guess = f"did you mean '{close[0]}'? " if close else ""
    return f"{said} ({guess}a {kind} parameter takes: {', '.join(allowed)})"


def load_sweep(path: str | Path) -> SweepSpec:
    """Read and validate the sweep file at ``path``."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"{file}: no such sweep file: check the path")
    return parse_sweep(read_text(file), file)
