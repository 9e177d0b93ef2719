"""Entry point of `python -m gcptui_trainer` (and of each `torchrun -m gcptui_trainer` worker)."""

from .cli import main
from .distributed import exit_process

exit_process(main())
