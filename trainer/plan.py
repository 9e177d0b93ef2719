"""How long a run is: a number of steps, of epochs, or both, checked when the run is built."""

from __future__ import annotations


def planned_steps(
    total_steps: int | None, total_epochs: int | None, steps_per_epoch: int | None
) -> int | None:
    """The planned number of steps (None when epochs of unknown length are all that is known).

    Raises ``TypeError`` when neither length is given and ``ValueError`` for a length under 1:
    mistakes in the loop's own code, caught before any training.
    """
    if total_steps is None and total_epochs is None:
        raise TypeError("ResumableRun needs total_steps= or total_epochs= (or both)")
    for name, value in (
        ("total_steps", total_steps),
        ("total_epochs", total_epochs),
        ("steps_per_epoch", steps_per_epoch),
    ):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be at least 1, not {value}")
    if total_steps is not None:
        return total_steps
    if total_epochs is not None and steps_per_epoch is not None:
        return total_epochs * steps_per_epoch
    return None
