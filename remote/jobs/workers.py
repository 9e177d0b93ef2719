"""One job across a row's workers (a TPU node's hosts): the same program on every worker at once.

A multi-host TPU slice trains only when the same program runs on every worker together (JAX and
PyTorch/XLA then find each other through the TPU runtime). ``WorkerJobRunner`` runs ``[job]`` on each
worker as its own supervised job, with the worker's rank and every worker's address in its
environment. Each worker mirrors its checkpoints to its own place in the bucket (``<bucket>/NODE/wN``,
as ``JobRunner`` names it by the worker row's name): two workers never write one prefix, and a node
made anew finds each worker's newest checkpoint where that worker left it.
"""

from __future__ import annotations

from collections.abc import Sequence

from gcptui.remote.config import Config, JobConfig
from gcptui.remote.errors import ConfigError
from gcptui.remote.jobs.runner import JobRunner
from gcptui.remote.models import Instance

# What each worker's job is told (beside [job].env): the names TPU VMs' own tools use, and gcptui's.
WORKER_ID_ENV = "TPU_WORKER_ID"  # this worker's index, 0 first (libtpu's name)
WORKER_HOSTNAMES_ENV = "TPU_WORKER_HOSTNAMES"  # every worker's internal address, in order
RANK_ENV = "GCPTUI_WORKER_RANK"
WORKERS_ENV = "GCPTUI_WORKERS"  # how many workers run the job
COORDINATOR_ENV = "GCPTUI_COORDINATOR"  # worker 0's address and a port, for jax.distributed.initialize
ROW_ENV = "GCPTUI_NODE"  # the row (TPU node) the worker belongs to
COORDINATOR_PORT = 8476  # JAX's default coordinator port on TPU VMs


class WorkerJobRunner(JobRunner):
    """A ``JobRunner`` whose job on each worker of a prepared row is ``[job]`` with that worker's rank."""

    def __init__(self, config: Config, *, remote_home: str | None = None) -> None:
        super().__init__(config.job, config.sync.dest, remote_home=remote_home, storage=config.storage)
        self.worker_jobs: dict[str, JobConfig] = {}
        self.worker_rows: dict[str, str] = {}  # worker row name (NODE/wN) -> its row's name

    def prepare(self, row: str, workers: Sequence[Instance]) -> None:
        """Fix the job of every worker of row ``row`` (``workers`` in rank order, worker 0 first)."""
        if not workers:
            raise ConfigError(f"{row} has no workers up: wait until `gcptui ls` shows it running")
        addresses = [w.internal_ip or w.external_ip or "" for w in workers]
        if not all(addresses):
            missing = [w.name for w, a in zip(workers, addresses, strict=True) if not a]
            raise ConfigError(f"{row}: no address yet for {', '.join(missing)}: wait until it runs")
        for rank, worker in enumerate(workers):
            env = {
                WORKER_ID_ENV: str(rank),
                WORKER_HOSTNAMES_ENV: ",".join(addresses),
                RANK_ENV: str(rank),
                WORKERS_ENV: str(len(workers)),
                COORDINATOR_ENV: f"{addresses[0]}:{COORDINATOR_PORT}",
                ROW_ENV: row,
                **self.job.env,
            }
            self.worker_jobs[worker.name] = JobConfig(
                setup=self.job.setup,
                command=self.job.command,
                resume=self.job.resume_command,
                env=env,
                stop_grace_seconds=self.job.stop_grace_seconds,
            )
            self.worker_rows[worker.name] = row

    def job_for(self, name: str) -> JobConfig:
        return self.worker_jobs.get(name, self.job)
