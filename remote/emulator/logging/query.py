"""A bounded parser and evaluator for the Logging query language's subset gcloud and gcptui send.

Supported: comparisons ``FIELD OP VALUE`` (``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``:``, and the
regular-expression matches ``=~``/``!~``) on dotted fields (a key with dots quoted:
``labels."compute.googleapis.com/x"``), quoted or bare values, ``AND``, ``OR`` (which binds tighter than ``AND``, as in Google's
language), ``NOT``/``-``, parentheses, juxtaposition as ``AND``, and a bare value as a search of the
entry's text. ``timestamp`` compares as a time, ``severity`` by level. Anything else is a
``QueryError`` (the API answers 400 INVALID_ARGUMENT), never a silently wider match.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

MAX_QUERY = 20_000  # Google's limit on a filter's length
SEVERITIES = ["DEFAULT", "DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL", "ALERT", "EMERGENCY"]
_TOKEN = re.compile(
    r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<op><=|>=|!=|=~|!~|[=<>:()])|(?P<word>[^\s"=<>:()!]+))'
)

Predicate = Callable[[dict[str, Any]], bool]


class QueryError(ValueError):
    """The filter is not one the emulator understands (Google would answer 400 for a malformed one)."""


def parse_time(text: str) -> datetime:
    """RFC 3339 (any fraction length, ``Z`` or an offset) or a bare date, as a UTC datetime."""
    value = text.strip()
    match = re.fullmatch(
        r"(\d{4}-\d{2}-\d{2})(?:[T ](\d{2}:\d{2}(?::\d{2})?)(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?", value
    )
    if match is None:
        raise QueryError(f"Invalid timestamp: {text!r}")
    day, clock, fraction, zone = match.groups()
    stamp = datetime.fromisoformat(
        f"{day}T{clock or '00:00'}{'' if clock and clock.count(':') == 2 else ':00'}"
    )
    if fraction:
        stamp = stamp.replace(microsecond=int((fraction[1:] + "000000")[:6]))
    if zone and zone != "Z":
        stamp = datetime.fromisoformat(f"{stamp.isoformat()}{zone[:3]}:{zone[-2:]}")
        return stamp.astimezone(UTC)
    return stamp.replace(tzinfo=UTC)


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    position = 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise QueryError(f"Unparseable filter near {text[position : position + 20]!r}")
        kind = match.lastgroup or ""
        value = match.group(kind)
        position = match.end()
        if kind == "str":
            value = _unquote(value)
        elif kind == "word" and value.endswith(".") and text[position : position + 1] == '"':
            value, position = _quoted_path(text, value, position)
        out.append((kind, value))
    return out


def _unquote(quoted: str) -> str:
    return re.sub(r"\\(.)", r"\1", quoted[1:-1])


_SEGMENT = re.compile(r'"(?:[^"\\]|\\.)*"|[^\s"=<>:()!.]+')


def _quoted_path(text: str, head: str, position: int) -> tuple[str, int]:
    """``resource.labels."compute.googleapis.com/x"``: a field path with a quoted key (which may hold
    dots), as ``PATH_SEP``-joined segments; and where the path ends."""
    segments = head[:-1].split(".")
    while True:
        match = _SEGMENT.match(text, position)
        if match is None:
            raise QueryError(f"Unparseable field path near {text[position : position + 20]!r}")
        piece = match.group(0)
        segments.append(_unquote(piece) if piece.startswith('"') else piece)
        position = match.end()
        if text[position : position + 1] != ".":
            return PATH_SEP.join(segments), position
        position += 1


PATH_SEP = "\x1f"  # joins a quoted path's segments: a quoted key may hold dots


def _field(entry: dict[str, Any], path: str) -> Any:
    value: Any = entry
    for part in path.split(PATH_SEP) if PATH_SEP in path else path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _text(entry: dict[str, Any]) -> str:
    payload = entry.get("jsonPayload") or {}
    return str(entry.get("textPayload") or payload.get("message") or "")


LOG_TIMES = frozenset({"timestamp", "receiveTimestamp"})


def _compare(path: str, op: str, wanted: str, times: frozenset[str] = LOG_TIMES) -> Predicate:
    if op in ("=~", "!~"):
        return _regex(path, op, wanted)
    if path in times:
        bound = parse_time(wanted)

        def key(entry: dict[str, Any]) -> Any:
            value = _field(entry, path)
            return parse_time(value) if isinstance(value, str) else None

        target: Any = bound
    elif path == "severity":
        if wanted.upper() not in SEVERITIES:
            raise QueryError(f"Unknown severity {wanted!r}")
        target = SEVERITIES.index(wanted.upper())

        def key(entry: dict[str, Any]) -> Any:
            return SEVERITIES.index(entry.get("severity", "DEFAULT"))
    else:
        target = wanted

        def key(entry: dict[str, Any]) -> Any:
            value = _field(entry, path)
            return None if value is None or isinstance(value, dict | list) else str(value)

    def check(entry: dict[str, Any]) -> bool:
        value = key(entry)
        if value is None:
            return op == "!="
        if op == ":":
            return str(target).lower() in str(value).lower() if isinstance(target, str) else value == target
        return {
            "=": value == target, "!=": value != target, "<": value < target, "<=": value <= target,
            ">": value > target, ">=": value >= target,
        }[op]  # fmt: skip

    return check


def _regex(path: str, op: str, wanted: str) -> Predicate:
    """``FIELD =~ "RE"``: the field's value holds a match of RE anywhere (``!~``: holds none)."""
    try:
        pattern = re.compile(wanted)
    except re.error as error:
        raise QueryError(f"Invalid regular expression {wanted!r}: {error}") from None

    def check(entry: dict[str, Any]) -> bool:
        value = _field(entry, path)
        found = (
            value is not None
            and not isinstance(value, dict | list)
            and pattern.search(str(value)) is not None
        )
        return found if op == "=~" else not found

    return check


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]], times: frozenset[str]) -> None:
        self.tokens, self.at, self.times = tokens, 0, times

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise QueryError("Unexpected end of filter")
        self.at += 1
        return token

    def conjunction(self) -> Predicate:
        parts = [self.disjunction()]
        while (token := self.peek()) is not None and token != ("op", ")"):
            if token == ("word", "AND"):
                self.take()
            parts.append(self.disjunction())
        return lambda entry: all(part(entry) for part in parts)

    def disjunction(self) -> Predicate:
        parts = [self.unary()]
        while self.peek() == ("word", "OR"):
            self.take()
            parts.append(self.unary())
        return parts[0] if len(parts) == 1 else (lambda entry: any(part(entry) for part in parts))

    def unary(self) -> Predicate:
        kind, value = self.take()
        if kind == "word" and value.startswith("-") and len(value) > 1:
            self.tokens[self.at - 1] = ("word", value[1:])  # ``-FIELD=V``: the dash negates the term
            self.at -= 1
            value = "-"
        if (kind, value) == ("word", "NOT") or (kind == "word" and value == "-"):
            inner = self.unary()
            return lambda entry: not inner(entry)
        if (kind, value) == ("op", "("):
            inner = self.conjunction()
            if self.take() != ("op", ")"):
                raise QueryError("Unbalanced parentheses in filter")
            return inner
        if kind == "op":
            raise QueryError(f"Unexpected {value!r} in filter")
        following = self.peek()
        if following is not None and following[0] == "op" and following[1] not in "()":
            op = self.take()[1]
            wanted_kind, wanted = self.take()
            if wanted_kind == "op":
                raise QueryError(f"Expected a value after {value}{op}")
            return _compare(value, op, wanted, self.times)
        if value in ("AND", "OR"):
            raise QueryError(f"Unexpected {value} in filter")
        needle = value.lower()
        return lambda entry: needle in _text(entry).lower()


def compile_filter(text: str, times: frozenset[str] = LOG_TIMES) -> Predicate:
    """A predicate over log entries (``{...}`` as the API returns them); QueryError if malformed.
    ``times``: the fields compared as times (Vertex AI's list filters, AIP-160 as Logging's, name
    ``create_time``)."""
    if len(text) > MAX_QUERY:
        raise QueryError("Filter is too long")
    tokens = _tokens(text)
    if not tokens:
        return lambda entry: True
    parser = _Parser(tokens, times)
    predicate = parser.conjunction()
    if parser.peek() is not None:
        raise QueryError("Unbalanced parentheses in filter")
    return predicate
