"""Entry point of `python -m gcptui_trainer` (and of each `torchrun -m gcptui_trainer` worker)."""

import sys

from .cli import main

sys.exit(main())
