"""What the emulated APIs and machines share about resources: Google's name rule and a GPU spec."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Google's rule for resource names (RFC 1035): what an instance, disk or node name must match.
NAME_PATTERN = "[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
_NAME = re.compile(NAME_PATTERN)


def valid_name(name: object) -> bool:
    """1-63 characters: lowercase letters, digits, hyphens; a letter first, no hyphen last."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


@dataclass(frozen=True, slots=True)
class Accelerator:
    """GPUs attached to an emulated machine: GCE's short accelerator type and count."""

    type: str
    count: int
