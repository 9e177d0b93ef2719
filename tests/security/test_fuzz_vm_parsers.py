"""Every parser of text a VM writes is total and bounded: whatever arrives (escape sequences, a
400-digit number, JSON nested 100000 deep, a line of megabytes, invalid UTF-8), no exception
escapes, numbers come out range-checked, text comes out with no escape sequence but SGR colours,
and memory stays proportional to the input's allowed size (hypothesis)."""

from __future__ import annotations

import json
import math
import re
import tracemalloc

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gcptui.remote.jobs.protocol import parse_status
from gcptui.remote.keepalive.relaunch import last_step_logged, resumed_step
from gcptui.remote.safe_text import one_line, sanitize, vm_field
from gcptui.remote.sweep.vmside import log_tail, parse_metrics
from gcptui.remote.telemetry.gpu import parse_gpu_line, parse_process_line
from gcptui.remote.telemetry.log_text import LineAssembler
from gcptui.remote.telemetry.progress import MAX_COUNT, MAX_MAGNITUDE, ProgressTracker, json_records
from gcptui.remote.telemetry.tpu_info import parse_tpu_info

ESCAPES = [
    "\x1b]0;t\x07",
    "\x1b]52;c;eA==\x07",
    "\x1b[2J",
    "\x1b\x01]52;c;x\x07",
    "\x9b2J",
    "\x9d0;x\x07",
    "\x1b[31m",
]
NON_SGR_ESC = re.compile(r"\x1b(?!\[[0-9;:]*m)")

numbers = st.one_of(
    st.integers(),
    st.just(int("9" * 400)),
    st.just(-int("9" * 400)),
    st.floats(allow_nan=True, allow_infinity=True),
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=20), st.sampled_from(ESCAPES)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
keys = st.sampled_from(["step", "total_steps", "loss", "samples_per_s", "time", "event", "path", "url",
                        "error", "reason", "what", "score", "seconds"])  # fmt: skip
events = st.sampled_from(["checkpoint", "mirrored", "mirror_failed", "mirror_off", "resumed", "preempted"])


def _record_line(record: dict[str, object]) -> str:
    return json.dumps(record, allow_nan=True)


protocol_lines = st.one_of(
    st.dictionaries(keys, st.one_of(json_values, events), max_size=6).map(_record_line),
    st.text(max_size=200),
    st.sampled_from(ESCAPES),
    st.just('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"),  # RecursionError in json
    st.just('{"step": ' + "9" * 400 + "}"),  # OverflowError once float()ed
    st.just('{"step": 5, "loss": ' + "1" * 5000 + "}"),  # past int's default digit limit
    st.just('{"x": "' + "a" * 200_000 + '"}'),  # a line over the cap: skipped unparsed
    st.binary(max_size=100).map(lambda b: b.decode("utf-8", errors="replace")),
)
FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


def _inert(text: str) -> None:
    assert not NON_SGR_ESC.search(text), repr(text)
    assert not re.search(r"[\x80-\x9f\x07]", text), repr(text)


@FUZZ
@given(st.lists(protocol_lines, max_size=8))
def test_the_progress_protocol(lines: list[str]) -> None:
    tracker = ProgressTracker()
    for line in lines:
        tracker.feed(line)
    p = tracker.progress
    for count in (p.step, p.total_steps):
        assert count is None or 0 <= count <= MAX_COUNT
    for value in (p.loss, p.samples_per_s, p.steps_per_s, p.updated_at, *p.losses):
        assert value is None or (math.isfinite(value) and abs(value) <= MAX_MAGNITUDE)
    for checkpoint in (p.last_checkpoint, p.mirrored):
        if checkpoint is not None:
            _inert(checkpoint.path)
    _inert(p.mirror_problem)
    json_records(lines)
    last_step_logged(lines)
    resumed_step(lines)


@FUZZ
@given(
    st.lists(protocol_lines, max_size=8),
    st.lists(protocol_lines, max_size=2),
    st.sampled_from(["min", "max"]),
)
def test_sweep_metrics_and_log_tails(head: list[str], last: list[str], goal: str) -> None:
    found = parse_metrics("\n".join(head) + "\n---\n" + "\n".join(last), "score", goal)
    for value in (found.last, found.best, *(v for _, v in found.curve)):
        assert value is None or math.isfinite(value)
    for line in log_tail("\n".join(head)):
        _inert(line)


job_files = st.lists(
    st.tuples(st.sampled_from(["state", "pid", "pgid", "exit_code", "started_at", "detail", "phase", "x"]),
              st.one_of(st.text(max_size=30), st.sampled_from(ESCAPES), st.just("9" * 400), st.just("²"))),
    max_size=8,
)  # fmt: skip


@FUZZ
@given(job_files, st.one_of(st.text(max_size=100), st.sampled_from(ESCAPES)))
def test_job_state_files(fields: list[tuple[str, str]], command: str) -> None:
    text = "".join(f"{k}={v}\n" for k, v in fields) + "command:\n" + command
    status = parse_status("vm", text)
    for number in (status.pid, status.pgid, status.exit_code):
        assert number is None or abs(number) < 10**18
    for field in (status.started_at, status.ended_at, status.detail, status.phase, status.command):
        if field is not None:
            _inert(field)


smi_fields = st.one_of(st.text(max_size=20), st.sampled_from(ESCAPES), st.just("9" * 400), st.just("1e999"),
                       st.just("nan"), st.just("[N/A]"), st.integers().map(str))  # fmt: skip


@FUZZ
@given(st.lists(smi_fields, min_size=0, max_size=9))
def test_nvidia_smi_lines(parts: list[str]) -> None:
    line = ", ".join(parts)
    sample = parse_gpu_line(line)
    if sample is not None:
        _inert(sample.name)
        for value in (sample.util, sample.mem_used_mib, sample.mem_total_mib, sample.temp_c, sample.power_w):
            assert value is None or math.isfinite(value)
        sample.mem_percent  # noqa: B018 - must not raise
    process = parse_process_line(line)
    if process is not None:
        _inert(process.name)


@FUZZ
@given(
    st.lists(st.one_of(st.binary(max_size=300), st.sampled_from([e.encode() for e in ESCAPES])), max_size=10)
)
def test_log_lines_and_text(chunks: list[bytes]) -> None:
    assembler = LineAssembler()
    for chunk in chunks:
        for line in assembler.feed(chunk):
            _inert(line)
    text = b"".join(chunks).decode("utf-8", errors="replace")
    _inert(sanitize(text))
    for cleaned in (one_line(text), vm_field(text), sanitize(text, colours=False)):
        assert "\x1b" not in cleaned


tpu_cells = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["²", "٣", "9" * 400, "1 GiB / 2 GiB", "1e999 GiB / 2 GiB", "50%", "TPU v5e chip"]),
)
tpu_lines = st.one_of(
    st.sampled_from(["TPU Chips", "TPU Runtime Utilization", "| Chip | Type |", "+----+"]),
    st.lists(tpu_cells, min_size=2, max_size=4).map(lambda cells: "│ " + " │ ".join(cells) + " │"),
)


@FUZZ
@given(st.lists(tpu_lines, max_size=12))
@example(["TPU Runtime Utilization", "│ ² │ 1 GiB / 2 GiB │ 5% │"])  # "²".isdigit(), int() refuses it
def test_tpu_info_tables(lines: list[str]) -> None:
    for sample in parse_tpu_info("\n".join(lines)):
        _inert(sample.name)
        for value in (sample.util, sample.mem_used_mib, sample.mem_total_mib):
            assert value is None or math.isfinite(value)


def test_a_huge_line_is_skipped_without_being_parsed() -> None:
    """A 64 MiB line (a VM's metrics file can be anything) costs no more than itself to skip."""
    line = '{"step": 1, "pad": "' + "a" * (64 << 20) + '"}'
    tracemalloc.start()
    try:
        tracker = ProgressTracker()
        assert not tracker.feed(line)
        assert json_records([line]) == []
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # nothing of the size of the line was built
