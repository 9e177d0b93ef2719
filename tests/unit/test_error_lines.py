"""``e``/``E`` in the logs screen find the lines a failed training run leaves."""

from __future__ import annotations

import pytest

from gcptui.remote.telemetry.log_text import ERROR_PATTERN


@pytest.mark.parametrize(
    "line",
    [
        "==== gcptui: job ended with exit code 1 ====",
        "ModuleNotFoundError: No module named 'torchvision'",
        "Segmentation fault (core dumped)",
        "Traceback (most recent call last):",
        "RuntimeError: CUDA out of memory",
        "ValueError: bad shape",
    ],
)
def test_error_lines_are_found(line: str) -> None:
    assert ERROR_PATTERN.search(line)


@pytest.mark.parametrize("line", ["==== gcptui: job ended with exit code 0 ====", "step 3/100 loss 1.25"])
def test_ordinary_lines_are_not(line: str) -> None:
    assert not ERROR_PATTERN.search(line)
