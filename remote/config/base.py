"""The base of every config section: unknown keys are errors, values are frozen."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

Port = Annotated[int, Field(ge=1, le=65535)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
