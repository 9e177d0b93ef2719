"""The one sanitizer: controls first, then sequences; only SGR survives."""

from __future__ import annotations

import pytest

from gcptui.remote.safe_text import one_line, sanitize


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("a\x1b\x01]52;c;cHduZWQ=\x07b", "ab"),  # a control spliced into OSC 52 does not revive it
        ("\x1b]0;title\x07x", "x"),
        ("\x1b]8;;http://e\x1b\\link\x1b]8;;\x1b\\", "link"),
        ("\x1b[2J\x1b[Hx", "x"),
        ("a\x1b\x02[2Jb", "ab"),
        ("\x9b2J\x9d0;t\x07c", "2J0;tc"),  # 8-bit CSI/OSC lose their introducer: plain text remains
        ("\x1bPq#0;2;0;0;0\x1b\\x", "x"),  # DCS (sixel)
        ("\x1b]0;never ends", ""),
        ("\x1b[31mred\x1b[0m\tok", "\x1b[31mred\x1b[0m\tok"),
        ("tail ESC\x1b", "tail ESC"),
        ("plain ünïcode 日本", "plain ünïcode 日本"),
    ],
)
def test_sanitize(raw: str, shown: str) -> None:
    assert sanitize(raw) == shown


def test_without_colours_and_one_line() -> None:
    assert sanitize("\x1b[1mbold\x1b[0m", colours=False) == "bold"
    assert one_line("a\nb\tc\x1b[31m") == "a b c"
