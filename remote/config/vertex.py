"""The ``[vertex]`` section: which regions' Vertex AI custom jobs are fleet rows, and what
``gcptui vertex submit`` asks for by default."""

from __future__ import annotations

import re

from pydantic import Field, StrictBool, field_validator

from gcptui.remote.config.base import _Section

_REGION = re.compile(r"[a-z]+(?:-[a-z]+)*[0-9]+")
_ACCELERATOR = re.compile(r"[A-Z][A-Z0-9_]*:[1-9][0-9]*")


class VertexConfig(_Section):
    """Vertex AI custom jobs beside the VMs (needs ``[gcp]``: the same project and credentials)."""

    regions: list[str] = Field(
        default=[],
        description="Regions whose custom jobs are listed (e.g. `us-central1`). Empty: none are listed.",
    )
    region: str = Field(
        default="", description="Default region of `gcptui vertex submit`. Empty: the first of `regions`."
    )
    machine_type: str = Field(
        default="n1-standard-8", description="Machine type of each worker of a submitted job."
    )
    accelerator: str = Field(
        default="",
        description="Accelerators of each worker as `TYPE:COUNT` (Vertex's names, e.g. `NVIDIA_L4:1`). Empty: none.",
    )
    image: str = Field(
        default="",
        description=(
            "Container image the workers run (a prebuilt PyTorch training image, e.g. "
            "`us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest`). Required to submit."
        ),
    )
    spot: StrictBool = Field(
        default=False, description="Submit jobs on Spot capacity (`scheduling.strategy` SPOT)."
    )

    @field_validator("regions")
    @classmethod
    def _regions_are_names(cls, value: list[str]) -> list[str]:
        for region in value:
            if not _REGION.fullmatch(region):
                raise ValueError(f"{region!r} is not a region name: write it as e.g. us-central1")
        return value

    @field_validator("region")
    @classmethod
    def _region_is_a_name(cls, value: str) -> str:
        if value and not _REGION.fullmatch(value):
            raise ValueError(f"{value!r} is not a region name: write it as e.g. us-central1")
        return value

    @field_validator("accelerator")
    @classmethod
    def _accelerator_is_type_count(cls, value: str) -> str:
        if value and not _ACCELERATOR.fullmatch(value):
            raise ValueError(f"{value!r} is not TYPE:COUNT: write it as e.g. NVIDIA_L4:1")
        return value

    def submit_region(self) -> str:
        """The region ``vertex submit`` uses without ``--region`` ("" when none is configured)."""
        return self.region or (self.regions[0] if self.regions else "")
