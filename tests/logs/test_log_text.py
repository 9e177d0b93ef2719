"""Pure text handling: line splitting across chunks, \\r collapse, ANSI kept."""

from __future__ import annotations

from gcptui.remote.telemetry.log_text import (
    BINARY_MARK,
    CUT_MARK,
    LineAssembler,
    clean_line,
    collapse_cr,
    keep_colours,
    strip_ansi,
)


def test_lines_split_across_chunk_boundaries_and_utf8_survives() -> None:
    asm = LineAssembler()
    data = "héllo wörld\nsecond line\nthird".encode()
    got: list[str] = []
    for i in range(len(data)):  # one byte at a time: every boundary, mid-character included
        got.extend(asm.feed(data[i : i + 1]))
    assert got == ["héllo wörld", "second line"]
    assert asm.partial == "third"
    assert asm.finish() == ["third"]
    assert asm.partial is None


def test_tqdm_redraws_collapse_to_the_last_one() -> None:
    asm = LineAssembler()
    lines = asm.feed(b"start\n" + b"".join(b"\r%3d%%|" % p for p in range(101)))
    assert lines == ["start"]
    assert asm.partial == "100%|"
    assert asm.feed(b"\n") == ["100%|"]


def test_crlf_is_a_plain_line_end() -> None:
    assert LineAssembler().feed(b"a\r\nb\r\n") == ["a", "b"]


def test_trailing_carriage_return_keeps_the_text() -> None:
    assert collapse_cr("50%\r") == "50%"
    assert collapse_cr("a\rb\rc") == "c"
    assert collapse_cr("\r\r") == ""


def test_colours_kept_cursor_movement_dropped() -> None:
    raw = "\x1b[1;31mERROR\x1b[0m \x1b[2K\x1b[1Aboom\x07\x1b]0;title\x07"
    assert keep_colours(raw) == "\x1b[1;31mERROR\x1b[0m boom"
    assert strip_ansi(keep_colours(raw)) == "ERROR boom"


def test_tabs_expand_for_known_widths() -> None:
    assert clean_line("a\tb") == "a       b"


def test_runaway_line_is_cut_and_runaway_bar_kept_short() -> None:
    asm = LineAssembler(max_line_chars=100)
    assert asm.feed(b"x" * 250) == ["x" * 100 + CUT_MARK]
    assert asm.partial is None
    assert asm.feed(b"x" * 10_000) == []  # the rest of the cut line is skipped, never held
    assert asm.feed(b"tail\nnext line\n") == ["next line"]
    assert asm.feed(b"y" * 150 + b"\nshort\n") == ["y" * 100 + CUT_MARK, "short"]
    asm = LineAssembler(max_line_chars=100)
    asm.feed(b"".join(b"\rstep %05d" % i for i in range(100)))
    assert asm.partial == "step 00099"


def test_reset_returns_the_unfinished_line() -> None:
    asm = LineAssembler()
    asm.feed(b"half")
    assert asm.reset() == "half"
    assert asm.partial is None


def test_binary_runs_show_as_one_short_placeholder() -> None:
    import random

    blob = random.Random(3).randbytes(200_000)
    asm = LineAssembler()
    lines = asm.feed(b"before\n" + blob + b"\nafter\n")
    assert lines[0] == "before" and lines[-1] == "after"
    assert lines[1] == BINARY_MARK
    shown = sum(len(line) for line in lines)
    assert shown < len(blob) // 100, f"{shown} characters shown for {len(blob)} bytes of binary"


def test_plain_chunks_and_mixed_chunks_give_the_same_lines_in_any_cut() -> None:
    """Chunks of printable ASCII skip per-line cleaning; a chunk with colours, tabs, CRs or binary
    takes the full path; either way the lines are what cleaning each line gives, wherever cut."""
    plain = "".join(f"step {i} loss 0.{i:04d} lr 3e-4\n" for i in range(300))
    mixed = "\x1b[31mred\x1b[0m\x1b[2Jcleared\n\tx\ntqdm 1%\rtqdm 99%\n" + "\x00\x01\x02\x03" * 8 + "\nok\n"
    data = (plain + mixed + plain).encode()
    expected = LineAssembler().feed(data)
    assert expected[:300] == plain.splitlines() and "\x1b[31mred\x1b[0mcleared" in expected
    assert "        x" in expected and "tqdm 99%" in expected and BINARY_MARK in expected
    for size in (1, 7, 64, 4096):
        assembler = LineAssembler()
        lines = [line for k in range(0, len(data), size) for line in assembler.feed(data[k : k + size])]
        assert lines == expected, size
    long = LineAssembler(max_line_chars=100)
    assert long.feed(b"a" * 150 + b"\nb\n") == ["a" * 100 + CUT_MARK, "b"]  # never taken as it came
