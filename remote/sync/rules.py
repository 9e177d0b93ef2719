"""What is synced: the tree minus its git-ignored paths, minus ``[sync].exclude``, minus ``.git/``.

Git semantics, as ``git status`` sees them:

- every directory may hold a ``.gitignore`` whose patterns are relative to that directory;
  a deeper file overrides a shallower one, and within a file the last matching pattern wins;
- ``!pattern`` re-includes, except below a directory that is itself ignored (git never
  descends into it, and neither does the scan);
- ``.git/info/exclude`` counts beneath every ``.gitignore``;
- ``[sync].exclude`` (gitignore syntax, relative to the root) counts above all of them, so it
  can both exclude more and ``!``-re-include a git-ignored file;
- any path component named ``.git`` is never synced (nested repositories included).

Patterns are parsed by pathspec's ``GitIgnoreSpec`` (git's wildmatch) and, as in git, a pattern
counts only where it matches the path itself: a directory pattern (``build/``, ``!*/``) never
decides a file's fate, it excludes or re-includes the directory, and a file below an excluded
directory is excluded with it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from pathspec import GitIgnoreSpec

from gcptui.remote.sync.manifest import parent_of

GITIGNORE = ".gitignore"
INFO_EXCLUDE = ".git/info/exclude"


class _Patterns:
    """One ignore file's patterns, matched as git matches them: against the path itself only.

    pathspec's patterns also match every path below a matching directory (``foo/`` matches
    ``foo/a.py``); git instead never looks inside an excluded directory, and a pattern that
    matches only a directory (``!*/``) says nothing about the files in it. So a file is judged only
    by the patterns that match the file itself, and a directory by those that match it as a
    directory; what lies below an excluded directory is handled by ``dir_excluded``.
    """

    def __init__(self, lines: list[str]) -> None:
        # (include, regex, dir_marker): include True ignores, False re-includes ("!").
        self._rules: list[tuple[bool, re.Pattern[str], bool]] = []
        # Patterns whose last segment is "*" or "**" (``data/**``, ``/x/*``): they match every name
        # in a directory they reach, so a scan need not list it (``SyncRules.contents_ignored``).
        self._every_name: list[re.Pattern[str]] = []
        self.negates = False  # a "!" pattern: a name below an ignored one may come back
        for pattern in GitIgnoreSpec.from_lines([_git_globstar_dir(line) for line in lines]).patterns:
            regex = getattr(pattern, "regex", None)
            if pattern.include is None or regex is None:
                continue
            self.negates = self.negates or not pattern.include
            text = str(getattr(pattern, "pattern", "")).rstrip(" ")
            if pattern.include and text.rpartition("/")[2] in ("*", "**"):
                self._every_name.append(regex)
            if "ps_d" in regex.groupindex:
                # The name matched, then either the end or a "/" (a directory): anchored at the end,
                # only the path itself counts, as a directory when it ends in the "/" we append.
                self._rules.append(
                    (pattern.include, re.compile(f"(?:{regex.pattern})\\Z", regex.flags), True)
                )
            else:  # "*", "x/**": the pattern itself matches at any depth
                self._rules.append((pattern.include, regex, False))

    def verdict(self, rel: str, is_dir: bool, prefix: bool = False) -> bool | None:
        """True: ignored, False: re-included by a ``!`` pattern, None: no pattern matches.

        ``prefix``: a directory also matches a pattern that matches only what it holds (``x/**``
        matches ``x``), as ``protect`` wants; git's rules never do.
        """
        text = rel + "/" if is_dir else rel
        for include, regex, anchored in reversed(self._rules):  # the last matching pattern wins
            match = regex.search(text)
            if match is None:
                continue
            if anchored or not is_dir or prefix or match.end() < len(text):
                return include
            # Only the "/" appended to a directory completed the match ("x/**" on x): it matches
            # what is inside x, not x itself.
        return None

    def ignores_every_name_in(self, rel_dir: str) -> bool:
        """True when a pattern ignores any name at all directly in ``rel_dir`` (a name no pattern
        names: a NUL, which no file name holds, so only a ``*`` or ``**`` segment matches it)."""
        probe = f"{rel_dir}/\x00" if rel_dir else "\x00"
        return any(regex.search(probe) and regex.search(probe + "/") for regex in self._every_name)


def _git_globstar_dir(line: str) -> str:
    """``x/**/`` as git reads it: every directory below ``x``. pathspec reads it as ``x/`` (``x``
    itself), so ``!x/**/`` re-included only ``x``; ``x/**/*/`` is what git means."""
    text = line.rstrip(" ")
    if text.endswith("/**/") and text.lstrip("!") != "/**/":
        return text + "*/"
    return line


def _spec(lines: Iterable[str]) -> _Patterns | None:
    cleaned = [line for line in lines if line.strip() and not line.lstrip().startswith("#")]
    return _Patterns(cleaned) if cleaned else None


def _verdict(spec: _Patterns | None, rel: str, is_dir: bool) -> bool | None:
    """True: ignored, False: re-included by a ``!`` pattern, None: no pattern matches."""
    if spec is None:
        return None
    return spec.verdict(rel, is_dir)


class SyncRules:
    """Decides whether a tree-relative path is synced. Reads ``.gitignore`` files lazily.

    Call :meth:`reload` after any ``.gitignore`` or ``.git/info/exclude`` changed.
    """

    def __init__(self, root: Path, exclude: Iterable[str] = ()) -> None:
        self.root = root
        self._exclude = _spec(exclude)
        self.reload()

    def reload(self) -> None:
        """Forget every cached ``.gitignore`` and verdict (the files changed on disk)."""
        self._dir_specs: dict[str, _Patterns | None] = {}
        # Per directory: the directories at or above it that hold a .gitignore, deepest first.
        self._chains: dict[str, tuple[tuple[str, _Patterns], ...]] = {}
        self._dir_ignored: dict[str, bool] = {"": False}
        self._info = self._read(self.root / INFO_EXCLUDE)

    @staticmethod
    def _read(path: Path) -> _Patterns | None:
        try:
            return _spec(path.read_text(encoding="utf-8", errors="surrogateescape").splitlines())
        except OSError:
            return None

    def _spec_for(self, rel_dir: str) -> _Patterns | None:
        if rel_dir not in self._dir_specs:
            base = self.root / rel_dir if rel_dir else self.root
            self._dir_specs[rel_dir] = self._read(base / GITIGNORE)
        return self._dir_specs[rel_dir]

    def ignores(self, rel: str, is_dir: bool) -> bool:
        """True when ``rel`` itself is excluded (its parent directories are not consulted)."""
        if rel.split("/")[-1] == ".git":
            return True
        verdict = _verdict(self._exclude, rel, is_dir)
        if verdict is not None:
            return verdict
        # Deepest .gitignore first: the first file with a matching pattern decides.
        for rel_dir, spec in self._chain(parent_of(rel)):
            verdict = spec.verdict(rel[len(rel_dir) + 1 :] if rel_dir else rel, is_dir)
            if verdict is not None:
                return verdict
        return bool(_verdict(self._info, rel, is_dir))

    def _chain(self, rel_dir: str) -> tuple[tuple[str, _Patterns], ...]:
        """The .gitignore files that apply in ``rel_dir``, deepest first (cached: a scan asks once
        per file, and most directories hold none)."""
        chain = self._chains.get(rel_dir)
        if chain is None:
            above = self._chain(parent_of(rel_dir)) if rel_dir else ()
            spec = self._spec_for(rel_dir)
            chain = ((rel_dir, spec), *above) if spec is not None else above
            self._chains[rel_dir] = chain
        return chain

    def dir_excluded(self, rel_dir: str) -> bool:
        """True when the directory or any directory above it is excluded (cached)."""
        cached = self._dir_ignored.get(rel_dir)
        if cached is None:
            cached = self.dir_excluded(parent_of(rel_dir)) or self.ignores(rel_dir, True)
            self._dir_ignored[rel_dir] = cached
        return cached

    def contents_ignored(self, rel_dir: str) -> bool:
        """True when nothing below the directory ``rel_dir`` can be synced, so a scan need not list
        it (``data/**`` over 95,000 files): a pattern ignores every name in it, and no ``!``
        pattern that applies there could bring one back. Without "!" patterns, any matching
        pattern ignores; so the check is per file of patterns, never by precedence."""
        specs = [self._exclude, self._info, *(spec for _, spec in self._chain(rel_dir))]
        if any(spec is not None and spec.negates for spec in specs):
            return False
        if self._exclude is not None and self._exclude.ignores_every_name_in(rel_dir):
            return True
        if self._info is not None and self._info.ignores_every_name_in(rel_dir):
            return True
        # Each .gitignore sees the path relative to its own folder ("" for the directory's own).
        return any(
            spec.ignores_every_name_in(rel_dir[len(base) + 1 :] if base else rel_dir)
            for base, spec in self._chain(rel_dir)
        )

    def synced(self, rel: str, is_dir: bool) -> bool:
        """True when ``rel`` is synced: neither it nor a directory above it is excluded."""
        if is_dir:
            return not self.dir_excluded(rel)
        return not self.dir_excluded(parent_of(rel)) and not self.ignores(rel, False)

    @staticmethod
    def is_rule_file(rel: str) -> bool:
        """True for files whose change alters what is synced."""
        return rel == INFO_EXCLUDE or rel.split("/")[-1] == GITIGNORE


class PathSet:
    """Gitignore-style patterns relative to the root (``[sync].protect``), with descendants.

    ``outputs`` protects the directory and everything below it; ``*.ckpt`` every checkpoint.
    """

    def __init__(self, patterns: Iterable[str]) -> None:
        self._spec = _spec(patterns)
        self._dirs: dict[str, bool] = {"": False}

    def __bool__(self) -> bool:
        return self._spec is not None

    def _dir(self, rel_dir: str) -> bool:
        cached = self._dirs.get(rel_dir)
        if cached is None:
            # "runs/**" protects the runs folder too: the folder is a prefix of what it protects.
            spec = self._spec
            cached = self._dir(parent_of(rel_dir)) or bool(spec and spec.verdict(rel_dir, True, prefix=True))
            self._dirs[rel_dir] = cached
        return cached

    def matches(self, rel: str, is_dir: bool = False) -> bool:
        """True when ``rel`` or a directory above it matches a pattern."""
        if self._spec is None:
            return False
        if is_dir:
            return self._dir(rel)
        return self._dir(parent_of(rel)) or bool(_verdict(self._spec, rel, False)) or self._dir(rel)
