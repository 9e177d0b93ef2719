"""Entry point of `python -m trainer` (and of each `torchrun -m trainer` worker)."""

import sys

from trainer.cli import main

sys.exit(main())
