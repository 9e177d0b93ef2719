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
from typing import Any, Literal, NoReturn

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
    with script(resume_flag=resume_flag) as guard:
        result = fn(*args)
        if isinstance(result, int) and not isinstance(result, bool):
            guard.code = result
    raise AssertionError("unreachable: script() exits")  # pragma: no cover


class script:  # noqa: N801 - used as a statement: `with gcptui_trainer.script():`
    """`main()` for a module-level script: the block's outcome becomes the exit code.

        with gcptui_trainer.script(resume_flag="--continue"):
            run = ResumableRun(...)
            ...the training loop, at module level...

    Exits when the block ends, as `main()` does: 0 (or `guard.code`), 143 after a preemption save,
    2 with one `error:` line for a TrainerError, 130 on Ctrl-C; a bug keeps its traceback.
    """

    def __init__(self, resume_flag: str = "--resume") -> None:
        self.resume_flag = resume_flag
        self.code = 0
        self._token: Any = None

    def __enter__(self) -> script:
        self._token = RESUME_FLAG.set(self.resume_flag)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> Literal[False]:
        RESUME_FLAG.reset(self._token)
        together = False  # see distributed.shutdown
        if exc is None:
            code, together = self.code, True
        elif isinstance(exc, Preempted):
            code, together = int(exc.code), True  # type: ignore[arg-type]  # every rank agreed on the step
        elif isinstance(exc, TrainerError):
            if distributed.place().rank == 0:
                print(f"error: {exc}", file=sys.stderr, flush=True)
            code = USAGE_ERROR
        elif isinstance(exc, KeyboardInterrupt):
            print("interrupted", file=sys.stderr, flush=True)
            code = INTERRUPTED
        else:
            distributed.shutdown(False)
            return False  # a bug: its traceback
        distributed.shutdown(together)
        distributed.exit_process(code)
