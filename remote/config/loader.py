"""Finding, reading and explaining ``gcptui.toml``: one line per mistake, with file, line and key."""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from pathlib import Path
from typing import Any, get_args

import platformdirs
from pydantic import BaseModel, ValidationError

from gcptui.remote.config.connection import GcpConfig
from gcptui.remote.config.schema import Config
from gcptui.remote.errors import ConfigError

CONFIG_NAME = "gcptui.toml"


def default_config_paths() -> list[Path]:
    """Where ``gcptui`` looks when ``--config`` is not given, first match wins."""
    return [Path.cwd() / CONFIG_NAME, platformdirs.user_config_path("gcptui") / CONFIG_NAME]


def find_config(explicit: str | os.PathLike[str] | None) -> Path | None:
    """The file to read: the explicit one (which must exist), else the first default that exists."""
    if explicit is not None:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(
                f"{path}: no such config file: check --config, or run without it to use the defaults"
            )
        return path
    for path in default_config_paths():
        if path.is_file():
            return path
    return None


def load_config(explicit: str | os.PathLike[str] | None = None) -> Config:
    """Read and validate the config; with no file anywhere, GCE with the ambient project is used."""
    path = find_config(explicit)
    if path is None:
        return Config(gcp=GcpConfig())
    config = parse_config(read_text(path), path)
    use_storage_emulator(config)
    return config


def use_storage_emulator(config: Config) -> None:
    """``[storage] emulator_host`` as ``STORAGE_EMULATOR_HOST`` for this process (unless one is
    exported): the Cloud Storage client reads only the environment, and every storage client of
    gcptui's, and the keeper's deploy, read it there."""
    if config.storage.emulator_host:
        os.environ.setdefault("STORAGE_EMULATOR_HOST", config.storage.emulator_host)


def read_text(path: Path) -> str:
    """A config or sweep file's text; one that cannot be read, or is not UTF-8, is a ``ConfigError``."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start}): save it as UTF-8") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read it ({err.strerror}): check its permissions") from None


def first_error(err: ValidationError) -> Any:
    """The error to report: an unknown key first (a typo like ``nme`` explains the missing ``name``
    beside it), else the first one."""
    errors = err.errors()
    return next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])


def parse_config(text: str, path: Path) -> Config:
    """Validate TOML text; errors name ``path:line`` and the dotted key."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML ({err}): fix the syntax") from None
    if "path" in data:  # the loader's own field (where the file is), never a key of the file
        line = _line_of(text, ["path"])
        raise ConfigError(
            f"{path}:{line or 1}: unknown key 'path': remove it or check its spelling "
            f"(the top level takes: {', '.join(allowed_keys(Config, []))})"
        )
    try:
        return Config.model_validate({**data, "path": path})
    except ValidationError as err:
        raise ConfigError(describe_error(first_error(err), text, path, Config)) from None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (``X``, ``X | None``, ``list[X]``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for arg in get_args(annotation) if (m := _model_in(arg)) is not None), None)


def allowed_keys(model: type[BaseModel], loc: list[Any]) -> list[str]:
    """The keys the section at ``loc`` takes (the names a file writes), read from the model: the
    error then says them, rather than pointing at docs/REFERENCE.md, which a pip install lacks."""
    current: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, int) or current is None:
            continue
        field = current.model_fields.get(str(part))
        current = _model_in(field.annotation) if field is not None else None
    if current is None:
        return []
    return sorted((f.alias or name) for name, f in current.model_fields.items() if name != "path")


def describe_error(error: Any, text: str, path: Path, model: type[BaseModel] | None = None) -> str:
    """One pydantic error as a line naming ``path:line``, the dotted key and what to do (the sweep file uses it too)."""
    loc = [part for part in error["loc"] if part != "path"]
    dotted = _dotted(loc)
    line = _line_of(text, loc)
    where = f"{path}:{line}" if line else str(path)
    kind = error["type"]
    if kind == "extra_forbidden":
        names = [str(part) for part in loc[:-1] if not isinstance(part, int)]
        listed = any(isinstance(part, int) for part in loc[:-1])
        section = (
            (f"[[{'.'.join(names)}]]" if listed else f"[{'.'.join(names)}]") if names else "the top level"
        )
        said = f"{where}: unknown key '{dotted}': remove it or check its spelling"
        allowed = allowed_keys(model, loc[:-1]) if model is not None else []
        if not allowed:
            return said
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        guess = f"did you mean '{close[0]}'? " if close else ""
        return f"{said} ({guess}{section} takes: {', '.join(allowed)})"
    if kind in WRONG_TYPE and dotted:
        return f"{where}: '{dotted}' {what_to_write(kind, error['input'], str(loc[-1]))}"
    message = str(error["msg"]).removeprefix("Value error, ")
    if kind == "missing":
        return f"{where}: '{dotted}' is required: add it"
    if not dotted:
        return f"{where}: {message}"
    return (
        f"{where}: '{dotted}' {message}"
        if message.startswith(("is ", "'", "must"))
        else f"{where}: '{dotted}': {message}"
    )


# A TOML value of the wrong kind where a strict boolean or number belongs (base.py).
WRONG_TYPE = ("bool_type", "int_type", "int_from_float", "float_type")
_YES, _NO = ("true", "yes", "on", "y", "1"), ("false", "no", "off", "n", "0")


def what_to_write(kind: str, value: Any, key: str) -> str:
    """'must be ..., not VALUE: write KEY = ...': the value as TOML reads it, and the line to write."""
    if isinstance(value, bool):
        shown = "true" if value else "false"
    elif isinstance(value, str):
        shown = f'the string "{value[:40]}"'
    elif isinstance(value, int | float):
        shown = str(value)
    else:
        shown = "a list" if isinstance(value, list) else "a table"
    text = value.strip().lower() if isinstance(value, str) else value
    if kind == "bool_type":
        if text in _YES or text == 1:
            fix = f"write {key} = true"
        elif text in _NO or text == 0:
            fix = f"write {key} = false"
        else:
            fix = f"write {key} = true or {key} = false"
        return f"must be true or false, not {shown}: {fix}"
    whole = kind != "float_type"
    if isinstance(value, float) and whole:
        return f"must be a whole number, not {shown}: write {key} = {int(value)}"
    number = value.strip() if isinstance(value, str) else ""
    pattern = r"[+-]?\d+" if whole else r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?"
    if re.fullmatch(pattern, number):
        return f"must be a number, not {shown}: write {key} = {number} (no quotes)"
    return f"must be a number, not {shown}: write {'a whole number' if whole else 'a number'}, without quotes"


def _dotted(loc: list[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _line_of(text: str, loc: list[Any]) -> int | None:
    """Best effort: the line of ``loc`` in the TOML text (tomllib keeps no positions)."""
    if not loc:
        return None
    str_parts = [p for p in loc if isinstance(p, str)]
    index = next((p for p in loc if isinstance(p, int)), None)
    table, key = (str_parts[0], str_parts[-1]) if len(str_parts) > 1 else (None, str_parts[0])
    current: str | None = None
    array_count = -1
    fallback = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        header = re.fullmatch(r"\[\[\s*([\w.-]+)\s*\]\]", line) or re.fullmatch(r"\[\s*([\w.-]+)\s*\]", line)
        if header:
            current = header.group(1)
            if line.startswith("[["):
                array_count = array_count + 1 if current == table else array_count
            if table is None and current == key:
                return number
            if current == table and key == table:
                fallback = fallback or number
            continue
        if re.match(rf"{re.escape(key)}\s*=", line) or re.match(rf'"{re.escape(key)}"\s*=', line):
            in_table = current == table or (table is None and current is None)
            if in_table and (index is None or array_count == index):
                return number
    return fallback
