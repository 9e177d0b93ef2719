"""The base of every config section: unknown keys are errors, values are frozen.

TOML has booleans and numbers, so a section's flags and numbers take only those (``StrictBool``,
``StrictInt``, ``StrictFloat``): ``enabled = "yes"`` or ``port = "50407"`` is a mistake to name
(loader.describe_error says what to write), not a string to convert behind the user's back.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictInt

Port = Annotated[StrictInt, Field(ge=1, le=65535)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
