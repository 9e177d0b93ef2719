"""A log view's buffer is bounded by characters as well as lines."""

from __future__ import annotations

from gcptui.tui.logs.buffer import LogLines


def test_long_lines_are_bounded_by_characters_not_only_by_count() -> None:
    buffer = LogLines(max_lines=10_000, max_chars=100_000)
    for i in range(50):
        appended = buffer.add([f"{i:03d}" + "x" * 16_000], None, None)
    assert buffer.chars <= 100_000 and buffer.chars == sum(map(len, buffer.lines))
    assert len(buffer.lines) == 6 and buffer.lines[-1].startswith("049")
    assert buffer.first == 44 and appended.dropped == 1
    assert len(buffer.widths) == len(buffer.lines)


def test_the_line_bound_keeps_the_character_count_right() -> None:
    buffer = LogLines(max_lines=5, max_chars=1_000_000)
    for i in range(20):
        buffer.add([f"line {i}", "y" * i], None, None)
    assert len(buffer.lines) == 5 and buffer.chars == sum(map(len, buffer.lines))
    buffer.set_filter("line")
    buffer.add(["z" * 999_990, "line last"], None, None)
    assert buffer.chars <= 1_000_000 and buffer.chars == sum(map(len, buffer.lines))
    assert buffer.entry_text(buffer.entry_count() - 1) == "line last"
