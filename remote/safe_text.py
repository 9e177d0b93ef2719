"""One sanitizer for text from a VM, a log, a file name or an API on its way to a terminal or Textual.

Order matters: control characters go first, then escape sequences are matched. Removing controls
after matching let ``ESC \\x01 ]52;c;...`` pass as text and turn into a working OSC 52 (clipboard
write) once the ``\\x01`` was gone. Only SGR sequences (colours, bold) may stay: ANSI colours in
training logs are a feature; titles, clipboard writes, hyperlinks, cursor moves and screen
clears are not.
"""

from __future__ import annotations

import re

# Every C0 control but tab, newline, BEL and ESC (ESC starts the sequences matched next; BEL ends an
# OSC and goes after), DEL, and every C1 control (U+0080-U+009F: the 8-bit CSI, OSC, DCS... that some
# terminals honour).
_CONTROLS = re.compile(r"[\x00-\x06\x08\x0b-\x1a\x1c-\x1f\x7f-\x9f]")
# After the controls are gone: CSI; string sequences (OSC, DCS, SOS, PM, APC) up to BEL, ST or the
# end of the text; other escapes (intermediates + final byte); and a lone ESC.
_SEQUENCE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?|[ -/]*[0-~])?")
_SGR = re.compile(r"\x1b\[[0-9;:]*m")


def _keep_sgr(match: re.Match[str]) -> str:
    text = match.group(0)
    return text if _SGR.fullmatch(text) else ""


def sanitize(text: str, *, colours: bool = True) -> str:
    """``text`` safe to print or render: no controls but tab and newline, no escape sequence but
    SGR colours (none at all with ``colours=False``)."""
    if text.isprintable():  # the common case: nothing to do (ESC and every control are unprintable)
        return text
    text = _CONTROLS.sub("", text)
    if "\x1b" in text:
        text = _SEQUENCE.sub(_keep_sgr if colours else "", text)
    return text.replace("\x07", "")


def one_line(text: str) -> str:
    """``sanitize`` without colours, newlines and tabs as spaces: for a status cell or a message."""
    return sanitize(text, colours=False).replace("\n", " ").replace("\t", " ")


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, an ellipsis marking a cut."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def vm_field(text: str, limit: int = 300) -> str:
    """A short field from a VM (a GPU name, a job's start time, a checkpoint path): ``one_line``,
    runs of spaces folded, bounded."""
    return clip(" ".join(one_line(text).split()), limit)


MAX_NAME_BYTES = 255  # the longest file name Linux file systems allow


def plain_name(name: str) -> bool:
    """Whether ``name`` (one component of a path from a VM or the bucket) may name a local file:
    printable (no control, no escape sequence, so it can be shown as is), not empty, ``.`` or
    ``..``, no separator, and short enough for a local file system."""
    return (
        name not in ("", ".", "..")
        and "/" not in name
        and "\\" not in name
        and name.isprintable()
        and len(name.encode("utf-8", errors="replace")) <= MAX_NAME_BYTES
    )
