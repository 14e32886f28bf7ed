"""Rules files: ``.claude/rules/**/*.md``, Claude Code's modular project instructions.

Every Markdown file under a ``rules`` directory (the user's in ``$CLAUDE_CONFIG_DIR``, the
project's in ``.claude/rules`` of each directory read) is an instruction file like
``.claude/CLAUDE.md``. One whose frontmatter names ``paths`` (globs) is conditional: it joins
a conversation only once the model works on a matching file. This module finds the files,
reads their frontmatter and matches the globs; :mod:`taskloom.instructions` loads them.

The globs match as Claude Code matches them (gitignore's way): relative to the directory
holding ``.claude`` for a project's rules and to the session's directory for the user's; a
pattern without a ``/`` (but a trailing one) matches at any depth, one naming a directory
matches everything below it, ``{a,b}`` alternatives are expanded, and a trailing ``/**`` is
dropped.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator
from pathlib import Path

from taskloom._dataclass import dataclass
from taskloom.frontmatter import parse_yaml, split_frontmatter
from taskloom.instruction_imports import Scope

#: Where the rules live under a directory (and under Claude Code's configuration directory).
RULES_DIR = Path(".claude") / "rules"


@dataclass(frozen=True)
class HeldRule:
    """A conditional rules file, waiting for the model to work on a file its globs match.

    Attributes:
        path: The file.
        scope: ``user`` or ``project``.
        globs: Its ``paths`` patterns.
        base: The directory the patterns are relative to.
        bound: The directory its imports must stay in (None: anywhere, a user file's).
    """

    path: Path
    scope: Scope
    globs: tuple[str, ...]
    base: Path
    bound: Path | None

    def matches(self, target: Path) -> bool:
        """Whether ``target`` (absolute, symlinks resolved) is one of the rule's files."""
        return matches(self.globs, self.base, target)


def rule_files(directory: Path) -> list[Path]:
    """The ``*.md`` files under ``directory``, recursively, in name order.

    Name order keeps the session's instructions the same from one run to the next (a prompt
    prefix the provider can cache). A symlinked directory is followed, each real directory
    once: a link back up the tree is cut there.
    """
    found: list[Path] = []
    _walk(directory, set(), found)
    return found


def _walk(directory: Path, visited: set[str], found: list[Path]) -> None:
    real = os.path.realpath(directory)
    if real in visited:
        return
    visited.add(real)
    try:
        names = sorted(os.listdir(real))
    except OSError:  # missing, not a directory, or unreadable: no rules there
        return
    for name in names:
        path = directory / name
        if os.path.isdir(path):
            _walk(path, visited, found)
        elif name.endswith(".md") and os.path.isfile(path):
            found.append(path)


def rule_globs(text: str) -> tuple[str, tuple[str, ...]]:
    """A rules file's body and its ``paths`` globs (none: it always applies).

    Raises:
        ValueError: The frontmatter is not YAML, or ``paths`` is neither a glob, a
            comma-separated list of globs, nor a list of them.
    """
    if not text.lstrip("\ufeff").startswith("---"):
        return text, ()
    try:
        meta, body, first = split_frontmatter(text)
    except ValueError:
        return text, ()  # a rule line (---) opening the text, not frontmatter
    import yaml  # only for a file with frontmatter: PyYAML costs start-up time

    data = parse_yaml(meta, yaml, first)
    return body, paths_globs(data.get("paths"))


def paths_globs(value: object) -> tuple[str, ...]:
    """The globs of a ``paths`` value, as Claude Code reads it.

    A string is split at commas outside braces; a trailing ``/**`` is dropped (the directory
    matches everything below it); only ``**`` or nothing left means every file: no globs.

    Raises:
        ValueError: ``value`` is neither a string nor a list of strings.
    """
    if value is None:
        return ()
    if isinstance(value, str):
        items = _split_commas(value)
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = [p for v in value for p in _split_commas(v)]
    else:
        raise ValueError(
            "frontmatter 'paths' must be a glob or a list of globs, like "
            f'["src/api/**/*.ts"]; got {value!r}'
        )
    globs = [g.removesuffix("/**") for g in (i.strip() for i in items)]
    globs = [g for g in globs if g]
    if all(g == "**" for g in globs):
        return ()
    return tuple(dict.fromkeys(globs))


def _split_commas(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += (char == "{") - (char == "}")
        if char == "," and depth <= 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def matches(globs: tuple[str, ...], base: Path, target: Path) -> bool:
    """Whether ``target`` is matched by one of ``globs``, relative to ``base``.

    ``target`` outside ``base`` matches nothing. A directory a glob names matches the files
    below it (``src`` matches ``src/api/x.ts``), as in a ``.gitignore``.
    """
    rel = os.path.relpath(target, base)
    if rel == "." or rel.startswith(".." + os.sep) or rel == ".." or os.path.isabs(rel):
        return False
    parts = Path(rel).as_posix().split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(_regex(g).fullmatch(p) for g in globs for p in prefixes)


@functools.lru_cache(maxsize=256)
def _regex(glob: str) -> re.Pattern[str]:
    """A gitignore-style glob as a regex for ``fullmatch`` against a relative path."""
    anchored = "/" in glob.rstrip("/")
    glob = glob.strip("/")
    out = [] if anchored else ["(?:[^/]+/)*"]
    out.extend(_pieces(glob))
    return re.compile("".join(out), re.DOTALL)


def _pieces(glob: str) -> Iterator[str]:
    """The regex of ``glob``, piece by piece: ``**``, ``*``, ``?``, ``[...]``, ``{a,b}``."""
    i, depth = 0, 0
    while i < len(glob):
        char = glob[i]
        if glob.startswith("**/", i) and (i == 0 or glob[i - 1] == "/"):
            yield "(?:[^/]+/)*"
            i += 3
            continue
        if glob.startswith("**", i) and i + 2 == len(glob) and (i == 0 or glob[i - 1] == "/"):
            yield ".*"
            i += 2
            continue
        if char == "*":
            yield "[^/]*"
        elif char == "?":
            yield "[^/]"
        elif char == "[" and (end := glob.find("]", i + 2)) > 0:
            body = glob[i + 1 : end]
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            yield "[" + ("^/" if negate else "") + body.replace("\\", "\\\\") + "]"
            i = end
        elif char == "{":
            depth += 1
            yield "(?:"
        elif char == "," and depth:
            yield "|"
        elif char == "}" and depth:
            depth -= 1
            yield ")"
        else:
            yield re.escape(char)
        i += 1


__all__ = ["RULES_DIR", "HeldRule", "matches", "paths_globs", "rule_files", "rule_globs"]
