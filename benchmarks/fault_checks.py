"""The checkers of a fault campaign (``benchmarks/faults.py``): they read the recorded history after the
run, never the product's own opinion of itself, and each says what it saw break.

The history is a list of JSON objects in time order, each with ``t`` (seconds since the campaign
began) and ``type``:

- ``fault``: what the campaign did (``kind``: ``preempt``, ``burst``, ``stockout``, ``slow``,
  ``ssh_reset``, ``metadata``, ``kill``), to ``target`` (a machine: a VM, a TPU node, a GKE workload);
- ``line``: one line of a job's metrics log (``job``, ``rec``: the trainer's own record: a step, or an
  ``event`` such as ``checkpoint``, ``mirrored``, ``preempted``, ``resumed``, ``finished``), read off
  the machine's disk as it was written;
- ``event``: one keep-alive ``RecoveryEvent`` (``machine``, ``kind``, ``detail``): its timeline;
- ``procs``: the trainer processes of a job alive at that moment (``job``, ``pids``), recorded at each
  change.

``Fleet`` says what each machine is: its ``kind`` (``vm_stop``, ``vm_delete``, ``tpu``, ``gke``), its
jobs (a TPU node's workers each run one) and whether its disk outlives a preemption. Each checker
returns its violations: a dict with the checker, the seed, a sentence and the history excerpt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

Entry = dict[str, Any]
Violation = dict[str, Any]


@dataclass(frozen=True)
class Machine:
    kind: str  # vm_stop, vm_delete, tpu, gke
    jobs: tuple[str, ...]
    disk_kept: bool  # a STOP-action VM keeps its disk (local checkpoints count); the others do not


@dataclass
class Run:
    """One start of a job's trainer, as its metrics log shows it."""

    job: str
    t: float
    start_step: int  # the step it resumed from (0: from scratch)
    resumed: bool
    entry: Entry


@dataclass
class Campaign:
    seed: int
    fleet: dict[str, Machine]
    history: list[Entry]
    bound_s: float  # how long a preempted machine may take to train again (or give up with a reason)
    ended_at: float = 0.0  # t of the last history entry the run waited for
    _runs: dict[str, list[Run]] = field(default_factory=dict)

    def machine_of(self, job: str) -> str | None:
        return next((name for name, m in self.fleet.items() if job in m.jobs), None)

    def lines(self, job: str) -> list[Entry]:
        return [e for e in self.history if e["type"] == "line" and e["job"] == job]

    def runs(self, job: str) -> list[Run]:
        """Each start of ``job``: a ``resumed`` record, or a step at or below the last one seen (a
        restart from scratch; the first step ever is the first run)."""
        if job in self._runs:
            return self._runs[job]
        found: list[Run] = []
        last: int | None = None
        fresh = True  # the next step line starts a run unless a resumed record did
        for entry in self.lines(job):
            rec = entry["rec"]
            event = rec.get("event")
            step = rec.get("step")
            if event == "resumed" and isinstance(step, int):
                found.append(Run(job, entry["t"], step, True, entry))
                last, fresh = step, False
            elif event is None and isinstance(step, int):
                if fresh or (last is not None and step <= last):
                    found.append(Run(job, entry["t"], step - 1, False, entry))
                last, fresh = step, False
            elif event in ("preempted", "finished"):
                fresh = True  # whatever logs next is another start
        self._runs[job] = found
        return found

    def faults(self, kind: str, target: str | None = None) -> list[Entry]:
        return [
            e for e in self.history
            if e["type"] == "fault" and e["kind"] == kind and (target is None or e.get("target") == target)
            and not e.get("missed")
        ]  # fmt: skip

    def ended(self, job: str) -> float | None:
        """When ``job`` ended for good: the user killed it, or it finished."""
        times = [e["t"] for e in self.faults("kill") if e.get("job") == job]
        times += [e["t"] for e in self.lines(job) if e["rec"].get("event") == "finished"]
        return min(times) if times else None

    def violation(self, checker: str, what: str, excerpt: Iterable[Entry]) -> Violation:
        return {"checker": checker, "seed": self.seed, "what": what, "excerpt": list(excerpt)[:8]}


def _durable(campaign: Campaign, job: str, before: float) -> tuple[int, Entry | None]:
    """The newest step ``job`` could resume from at ``before``: mirrored to the bucket, or saved on a
    disk that outlives the preemption."""
    kept = False
    machine = campaign.machine_of(job)
    if machine is not None:
        kept = campaign.fleet[machine].disk_kept
    best, proof = 0, None
    for entry in campaign.lines(job):
        if entry["t"] >= before:
            break
        rec, step = entry["rec"], entry["rec"].get("step")
        if not isinstance(step, int):
            continue
        event = rec.get("event")
        durable = (
            event == "mirrored"
            or (event == "preempted" and rec.get("mirrored") is True)
            or (kept and (event == "checkpoint" or (event == "preempted" and rec.get("saved") is True)))
        )
        if durable and step >= best:
            best, proof = step, entry
    return best, proof


def check_lost_steps(campaign: Campaign) -> list[Violation]:
    """No step lost beyond the last durable checkpoint: each restart resumes at or after it."""
    found = []
    for machine in campaign.fleet.values():
        for job in machine.jobs:
            for run in campaign.runs(job)[1:]:
                durable, proof = _durable(campaign, job, run.t)
                if run.start_step < durable:
                    what = (f"{job} restarted from step {run.start_step} at t={run.t:.1f}s but step {durable} "
                            f"was durable before it: {durable - run.start_step} steps lost")  # fmt: skip
                    found.append(campaign.violation("lost_steps", what, [e for e in (proof, run.entry) if e]))
    return found


def check_running_twice(campaign: Campaign) -> list[Violation]:
    """No job running twice at once: never two live trainer processes of one job."""
    return [
        campaign.violation("running_twice", f"{e['job']} had {len(e['pids'])} trainers alive at t={e['t']:.1f}s", [e])
        for e in campaign.history
        if e["type"] == "procs" and len(e["pids"]) > 1
    ]  # fmt: skip


KILL_GRACE_S = 15.0  # a killed job's trainer may take this long to exit (stop_grace_seconds and more)


def check_no_relaunch_after_end(campaign: Campaign) -> list[Violation]:
    """A job the user killed, or that finished, is never started again (a run, or a live trainer)."""
    found = []
    for machine in campaign.fleet.values():
        for job in machine.jobs:
            end = campaign.ended(job)
            if end is None:
                continue
            for run in campaign.runs(job):
                if run.t > end:
                    found.append(campaign.violation(
                        "relaunched_after_end", f"{job} ended at t={end:.1f}s and started again at t={run.t:.1f}s",
                        [run.entry]))  # fmt: skip
            for e in campaign.history:
                if e["type"] == "procs" and e["job"] == job and e["pids"] and e["t"] > end + KILL_GRACE_S:
                    found.append(campaign.violation(
                        "relaunched_after_end", f"{job} ended at t={end:.1f}s but a trainer ran at t={e['t']:.1f}s", [e]))  # fmt: skip
                    break
    return found


GIVEN_UP = ("gave_up",)


def check_back_or_given_up(campaign: Campaign) -> list[Violation]:
    """Every preempted machine trains again within the bound, or keep-alive gave up with a reason."""
    found = []
    for name, machine in campaign.fleet.items():
        for fault in campaign.faults("preempt", name):
            t = fault["t"]
            for job in machine.jobs:
                end = campaign.ended(job)
                if end is not None and end <= t:
                    continue  # nothing to bring back: checked by relaunched_after_end
                back = [r for r in campaign.runs(job) if r.t > t]
                if back and back[0].t - t <= campaign.bound_s:
                    continue
                gave_up = [e for e in campaign.history if e["type"] == "event" and e["machine"] == name
                           and e["kind"] in GIVEN_UP and t < e["t"] <= t + campaign.bound_s]  # fmt: skip
                if gave_up and gave_up[0]["detail"].strip():
                    continue
                late = f"trained again after {back[0].t - t:.1f}s" if back else "never trained again"
                what = f"{job} of {name}, preempted at t={t:.1f}s, {late} (bound {campaign.bound_s:.0f}s), not given up with a reason"
                events = [
                    e
                    for e in campaign.history
                    if e["type"] == "event" and e["machine"] == name and e["t"] > t
                ]
                found.append(campaign.violation("stranded", what, [fault, *events[-6:]]))
    return found


def check_timeline(campaign: Campaign) -> list[Violation]:
    """Every keep-alive timeline entry matches what happened: a preemption it reports was one, a job it
    says resumed did start again, nothing-to-resume only for an ended job, a give-up says why."""
    found = []
    for e in campaign.history:
        if e["type"] != "event":
            continue
        name, kind, t = e["machine"], e["kind"], e["t"]
        machine = campaign.fleet.get(name)
        if machine is None:
            continue
        preempts = [f["t"] for f in campaign.faults("preempt", name) if f["t"] <= t]
        if kind in ("preempted", "notice"):
            if not preempts or t - preempts[-1] > campaign.bound_s:
                found.append(campaign.violation("timeline", f"{name}: '{kind}' at t={t:.1f}s with no preemption before it", [e]))  # fmt: skip
        elif kind == "resumed":
            # Around it: keep-alive reads the job's own resumed line, so it may say so just after a new
            # preemption began (a race the campaign makes on purpose), or a tail read later.
            starts = [r for job in machine.jobs for r in campaign.runs(job) if t - 10.0 <= r.t <= t + 30.0]
            if not starts:
                found.append(campaign.violation("timeline", f"{name}: 'resumed' at t={t:.1f}s but no job of it started again", [e]))  # fmt: skip
        elif kind in ("gave_up", "failed") and not str(e.get("detail", "")).strip():
            found.append(
                campaign.violation("timeline", f"{name}: '{kind}' at t={t:.1f}s gives no reason", [e])
            )
        elif kind == "nothing_to_resume":
            live = [job for job in machine.jobs if (campaign.ended(job) or float("inf")) > t]
            if live:
                found.append(campaign.violation(
                    "timeline", f"{name}: 'nothing to resume' at t={t:.1f}s while {', '.join(live)} had not ended", [e]))  # fmt: skip
    return found


CHECKERS: dict[str, Callable[[Campaign], list[Violation]]] = {
    "lost_steps": check_lost_steps,
    "running_twice": check_running_twice,
    "relaunched_after_end": check_no_relaunch_after_end,
    "stranded": check_back_or_given_up,
    "timeline": check_timeline,
}


def check(campaign: Campaign) -> dict[str, list[Violation]]:
    """Every checker's violations, by checker (an empty list: it held)."""
    return {name: checker(campaign) for name, checker in CHECKERS.items()}


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return round(ordered[index], 2)


def resume_times(campaign: Campaign) -> dict[str, dict[str, Any]]:
    """Per kind of machine: seconds from each preemption to its first job training again, and from
    keep-alive seeing the machine running again (``running``) to that; p50 and p95."""
    by_kind: dict[str, dict[str, list[float]]] = {}
    for name, machine in campaign.fleet.items():
        job = machine.jobs[0]
        for fault in campaign.faults("preempt", name):
            t = fault["t"]
            end = campaign.ended(job)
            if end is not None and end <= t:
                continue
            back = [r for r in campaign.runs(job) if r.t > t]
            if not back:
                continue
            figures = by_kind.setdefault(machine.kind, {"from_preempt": [], "after_back": []})
            figures["from_preempt"].append(back[0].t - t)
            running = [e["t"] for e in campaign.history if e["type"] == "event" and e["machine"] == name
                       and e["kind"] == "running" and t < e["t"] <= back[0].t]  # fmt: skip
            if running:
                figures["after_back"].append(back[0].t - running[-1])
    return {
        kind: {
            "n": len(f["from_preempt"]),
            "from_preempt_p50_s": percentile(f["from_preempt"], 0.5),
            "from_preempt_p95_s": percentile(f["from_preempt"], 0.95),
            "after_back_p50_s": percentile(f["after_back"], 0.5),
            "after_back_p95_s": percentile(f["after_back"], 0.95),
        }
        for kind, f in sorted(by_kind.items())
    }
