"""Each checker of the fault campaign catches what it guards: fed a history that breaks its invariant
(written as the harness records one), it reports a violation with the seed and the excerpt that shows
it; fed the same history without the break, it reports nothing."""

from __future__ import annotations

from typing import Any

from benchmarks.fault_checks import (
    Campaign,
    Machine,
    check,
    check_back_or_given_up,
    check_lost_steps,
    check_no_relaunch_after_end,
    check_running_twice,
    check_timeline,
    resume_times,
)

SEED = 4242
FLEET = {
    "spot-stop": Machine("vm_stop", ("spot-stop",), True),
    "spot-del": Machine("vm_delete", ("spot-del",), False),
}


def line(t: float, job: str, **rec: Any) -> dict[str, Any]:
    return {"t": t, "type": "line", "job": job, "rec": rec}


def event(t: float, machine: str, kind: str, detail: str = "") -> dict[str, Any]:
    return {"t": t, "type": "event", "machine": machine, "kind": kind, "detail": detail}


def fault(t: float, kind: str, target: str, **more: Any) -> dict[str, Any]:
    return {"t": t, "type": "fault", "kind": kind, "target": target, **more}


def steps(job: str, t: float, first: int, last: int) -> list[dict[str, Any]]:
    return [line(t + 0.01 * i, job, step=s) for i, s in enumerate(range(first, last + 1))]


def preemption_of_spot_del(resume_at: int, resumed_t: float = 20.0) -> list[dict[str, Any]]:
    """spot-del trains to step 120 (mirrored at 100), is preempted and resumes at ``resume_at``."""
    return [
        *steps("spot-del", 1.0, 1, 100),
        line(3.0, "spot-del", event="mirrored", step=100),
        *steps("spot-del", 3.1, 101, 120),
        fault(5.0, "preempt", "spot-del"),
        event(6.0, "spot-del", "preempted"),
        line(6.5, "spot-del", event="preempted", step=120, saved=True, mirrored=False),
        event(15.0, "spot-del", "running"),
        line(resumed_t, "spot-del", event="resumed", step=resume_at),
        event(resumed_t + 0.2, "spot-del", "resumed"),
        *steps("spot-del", resumed_t + 0.5, resume_at + 1, resume_at + 10),
    ]


def campaign(history: list[dict[str, Any]]) -> Campaign:
    return Campaign(SEED, FLEET, sorted(history, key=lambda e: e["t"]), bound_s=60.0, ended_at=100.0)


def test_lost_steps_catches_a_resume_behind_the_mirrored_checkpoint() -> None:
    assert check_lost_steps(campaign(preemption_of_spot_del(100))) == []
    # The DELETE-action VM's fresh disk: its local save at 120 is gone, so resuming at 100 loses nothing
    # durable; starting over at 0 (or resuming an older 50) loses 100 (50) mirrored steps.
    [found] = check_lost_steps(campaign(preemption_of_spot_del(50)))
    assert found["checker"] == "lost_steps" and found["seed"] == SEED
    assert "50 steps lost" in found["what"]
    assert {e["rec"].get("event") for e in found["excerpt"]} == {"mirrored", "resumed"}


def test_lost_steps_counts_a_kept_disk_s_local_checkpoint() -> None:
    history = [
        *steps("spot-stop", 1.0, 1, 60),
        line(2.0, "spot-stop", event="checkpoint", step=50),  # on the disk a STOP-action VM keeps
        fault(5.0, "preempt", "spot-stop"),
        line(9.0, "spot-stop", event="resumed", step=0),  # started over though step 50 was on disk
    ]
    [found] = check_lost_steps(campaign(history))
    assert "50 steps lost" in found["what"]


def test_running_twice_catches_two_live_trainers_of_one_job() -> None:
    once = [{"t": 1.0, "type": "procs", "job": "spot-del", "pids": [10]}]
    assert check_running_twice(campaign(once)) == []
    twice = [*once, {"t": 9.0, "type": "procs", "job": "spot-del", "pids": [10, 11]}]
    [found] = check_running_twice(campaign(twice))
    assert found["checker"] == "running_twice" and found["excerpt"] == [twice[1]]


def test_relaunch_after_a_kill_or_the_end_is_caught() -> None:
    base = [*steps("spot-stop", 1.0, 1, 30), fault(4.0, "kill", "spot-stop", job="spot-stop")]
    assert check_no_relaunch_after_end(campaign(base)) == []
    relaunched = [
        *base,
        fault(6.0, "preempt", "spot-stop"),
        line(12.0, "spot-stop", event="resumed", step=30),
    ]
    [found] = check_no_relaunch_after_end(campaign(relaunched))
    assert found["checker"] == "relaunched_after_end" and "started again" in found["what"]
    finished = [*steps("spot-del", 1.0, 1, 5), line(2.0, "spot-del", event="finished", step=5),
                {"t": 40.0, "type": "procs", "job": "spot-del", "pids": [77]}]  # fmt: skip
    [found] = check_no_relaunch_after_end(campaign(finished))
    assert "a trainer ran" in found["what"]


def test_stranded_catches_a_machine_never_back_and_accepts_a_reasoned_give_up() -> None:
    assert check_back_or_given_up(campaign(preemption_of_spot_del(100))) == []
    never = [e for e in preemption_of_spot_del(100) if e["t"] < 15.0]
    [found] = check_back_or_given_up(campaign(never))
    assert found["checker"] == "stranded" and "never trained again" in found["what"]
    assert found["excerpt"][0]["type"] == "fault"
    late = preemption_of_spot_del(100, resumed_t=90.0)  # past the 60 s bound
    assert "after 85.0s" in check_back_or_given_up(campaign(late))[0]["what"]
    gave_up = [*never, event(30.0, "spot-del", "gave_up", "max_restarts (20) reached")]
    assert check_back_or_given_up(campaign(gave_up)) == []
    silent = [*never, event(30.0, "spot-del", "gave_up", "")]
    assert len(check_back_or_given_up(campaign(silent))) == 1


def test_timeline_catches_entries_that_did_not_happen() -> None:
    good = preemption_of_spot_del(100)
    assert check_timeline(campaign(good)) == []
    phantom = [*good, event(40.0, "spot-stop", "preempted")]  # no preemption of spot-stop at all
    [found] = check_timeline(campaign(phantom))
    assert found["checker"] == "timeline" and "no preemption" in found["what"]
    no_start = [e for e in good if not (e["type"] == "line" and e["t"] >= 20.0)]  # said resumed; never was
    [found] = check_timeline(campaign(no_start))
    assert "no job of it started again" in found["what"]
    idle = [*good, event(30.0, "spot-del", "nothing_to_resume")]  # the job had not ended
    assert "had not ended" in check_timeline(campaign(idle))[0]["what"]
    reasonless = [*good, event(30.0, "spot-del", "failed", "")]
    assert "gives no reason" in check_timeline(campaign(reasonless))[0]["what"]


def test_check_runs_every_checker_and_times_the_resume() -> None:
    result = check(campaign(preemption_of_spot_del(100)))
    assert set(result) == {"lost_steps", "running_twice", "relaunched_after_end", "stranded", "timeline"}
    assert all(v == [] for v in result.values())
    times = resume_times(campaign(preemption_of_spot_del(100)))
    assert times["vm_delete"]["n"] == 1
    assert times["vm_delete"]["from_preempt_p95_s"] == 15.0  # preempted at 5, resumed at 20
    assert times["vm_delete"]["after_back_p95_s"] == 5.0  # running at 15
