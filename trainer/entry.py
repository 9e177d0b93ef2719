"""`gcptui_trainer.main(fn)`: the library's errors in a user's script as one line and exit code 2.

    def train() -> None:
        args = parse_args()
        run = ResumableRun(args.run_dir, ..., resume=args.resume)
        ...

    if __name__ == "__main__":
        gcptui_trainer.main(train, resume_flag="--resume")

Without it, a RunDirectoryInUseError or a CheckpointMismatchError is a traceback and exit code 1,
which a job runner cannot tell from a crash.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, NoReturn

from . import distributed
from .errors import RESUME_FLAG, Preempted, TrainerError

USAGE_ERROR = 2
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C


def main(fn: Callable[..., Any], *args: Any, resume_flag: str = "--resume") -> NoReturn:
    """Call `fn(*args)` and exit: 0 when it returns (or its int return value), 143 after a preemption save.

    A TrainerError (a problem the user can fix: a run dir in use, a changed config, state that cannot
    be saved) becomes `error: MESSAGE` on stderr (rank 0 only) and exit code 2; hints name
    `resume_flag`, the script's own flag for resuming. Ctrl-C is `interrupted` and 130. Other
    exceptions (bugs) keep their traceback. Leaves the process group, if one was joined.
    """
    token = RESUME_FLAG.set(resume_flag)
    code: int = 0
    together = False  # see distributed.shutdown
    try:
        result = fn(*args)
        if isinstance(result, int) and not isinstance(result, bool):
            code = result
        together = True
    except Preempted as exc:
        together = True  # every rank stopped on the step they agreed on
        code = int(exc.code)  # type: ignore[arg-type]
    except TrainerError as exc:
        if distributed.place().rank == 0:
            print(f"error: {exc}", file=sys.stderr, flush=True)
        code = USAGE_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        code = INTERRUPTED
    finally:
        RESUME_FLAG.reset(token)
        distributed.shutdown(together)
    distributed.exit_process(code)
