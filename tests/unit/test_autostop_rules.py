"""``AutoStopRules``: idle clock, warning, countdown, cancellation, after-job (pure, a fake clock)."""

from __future__ import annotations

from gcptui.remote.keepalive.autostop import AutoStopRules, Observation

IDLE_GPU = Observation("none", gpu_util=1.0, has_gpus=True)
BUSY_GPU = Observation("none", gpu_util=90.0, has_gpus=True)
RUNNING = Observation("running", gpu_util=1.0, has_gpus=True)


def _rules(**options: object) -> AutoStopRules:
    settings: dict[str, object] = {"idle_minutes": 1.0, "after_job": "none", "warn_seconds": 30.0}
    settings.update(options)
    return AutoStopRules(**settings)  # type: ignore[arg-type]


def test_idle_vm_is_warned_then_stopped_after_the_countdown() -> None:
    rules = _rules()
    assert rules.decide("a", 0.0, IDLE_GPU).kind == "none"
    assert rules.decide("a", 59.0, IDLE_GPU).kind == "none"
    warn = rules.decide("a", 60.0, IDLE_GPU)
    assert (warn.kind, warn.action) == ("warn", "stop") and "idle for 1.0 min" in warn.detail
    assert rules.seconds_left("a", 70.0) == 20.0
    assert rules.decide("a", 80.0, IDLE_GPU).kind == "none"
    act = rules.decide("a", 90.0, IDLE_GPU)
    assert (act.kind, act.action) == ("act", "stop")
    assert rules.decide("a", 91.0, IDLE_GPU).kind == "none"  # acted once; the clock starts over


def test_a_running_job_or_busy_gpus_or_recovery_or_a_key_cancel() -> None:
    rules = _rules()
    rules.decide("a", 0.0, IDLE_GPU)
    assert rules.decide("a", 60.0, IDLE_GPU).kind == "warn"
    assert rules.decide("a", 70.0, RUNNING).kind == "cancel"  # never act on a VM whose job runs
    assert rules.decide("a", 200.0, RUNNING).kind == "none"
    rules.decide("a", 300.0, IDLE_GPU)
    assert rules.decide("a", 360.0, IDLE_GPU).kind == "warn"
    assert rules.decide("a", 361.0, BUSY_GPU).detail == "its GPUs are busy again"
    rules.decide("a", 400.0, IDLE_GPU)
    assert rules.decide("a", 460.0, IDLE_GPU).kind == "warn"
    assert rules.decide("a", 500.0, IDLE_GPU, recovering=True).kind == "cancel"
    rules.decide("a", 600.0, IDLE_GPU)
    assert rules.decide("a", 660.0, IDLE_GPU).kind == "warn"
    assert rules.cancel("a", 661.0, "user").kind == "cancel"
    assert rules.decide("a", 700.0, IDLE_GPU).kind == "none"  # the idle clock restarted at the key
    rules.off.add("a")
    assert rules.decide("a", 10_000.0, IDLE_GPU).kind == "none"


def test_unknown_gpu_state_neither_starts_nor_stops_the_clock_and_idle_minutes_zero_is_off() -> None:
    rules = _rules()
    rules.decide("a", 0.0, IDLE_GPU)
    assert rules.decide("a", 30.0, Observation("none", gpu_util=None, has_gpus=True)).kind == "none"
    assert rules.decide("a", 60.0, IDLE_GPU).kind == "warn"
    off = _rules(idle_minutes=0.0)
    assert all(off.decide("a", t, IDLE_GPU).kind == "none" for t in (0.0, 1e6))


def test_after_job_acts_once_per_successful_job() -> None:
    rules = _rules(idle_minutes=0.0, after_job="delete", warn_seconds=0.0)
    failed = Observation("exited", exit_code=1, ended_at="t1")
    assert rules.decide("a", 0.0, failed).kind == "none"
    done = Observation("exited", exit_code=0, ended_at="t2")
    warn = rules.decide("a", 1.0, done)
    assert (warn.kind, warn.action) == ("warn", "delete") and warn.detail == "its job ended with exit code 0"
    assert rules.decide("a", 1.0, done).kind == "act"
    assert rules.decide("a", 2.0, done).kind == "none"  # the same finished job is not acted on again
    killed = Observation("killed", exit_code=None, ended_at="t3")
    assert _rules(idle_minutes=0.0, after_job="stop").decide("a", 0.0, killed).kind == "none"
