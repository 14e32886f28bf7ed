"""YAML frontmatter of Markdown files: agent definitions, skills and slash commands.

A file starts with a ``---`` line, its YAML, and a closing ``---`` line; the rest is its body.
Hand-written frontmatter is often not strict YAML (``description: Use when: ...``): values
that do not parse alone are read as text. PyYAML is imported by the callers, only when there
are files to read (it costs start-up time).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from types import ModuleType
from typing import Any

_CLOSING = re.compile(r"-{3,}")


def split_frontmatter(text: str) -> tuple[str, str, int]:
    """Split a file into its YAML frontmatter and its body.

    Returns:
        The frontmatter, the body, and the file's line number of the frontmatter's first line.

    Raises:
        ValueError: There is no frontmatter block, or it is never closed.
    """
    lines = text.lstrip("\ufeff").replace("\r\n", "\n").split("\n")
    start = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    if start == len(lines) or lines[start].rstrip() != "---":
        raise ValueError("no frontmatter: the file must start with a '---' line")
    for end in range(start + 1, len(lines)):
        # Some editors close the block with a longer rule ("-------------"); accept it.
        if _CLOSING.fullmatch(lines[end].strip()):
            return "\n".join(lines[start + 1 : end]), "\n".join(lines[end + 1 :]), start + 2
    raise ValueError("frontmatter is never closed by a '---' line")


def parse_yaml(meta: str, yaml: ModuleType, first: int = 1) -> dict[Any, Any]:
    """Parse frontmatter, repairing unquoted values as hand-written files often need.

    Args:
        meta: The frontmatter.
        yaml: The yaml module (imported by the caller, only when there are files).
        first: The file's line number of the frontmatter's first line (for errors).

    Raises:
        ValueError: The frontmatter is not YAML even after repair (naming the file's line),
            or is not a mapping.
    """
    try:
        data = yaml.safe_load(meta)
    except yaml.YAMLError as exc:
        repaired = _quote_bad_values(meta, yaml)
        try:
            data = yaml.safe_load(repaired) if repaired != meta else None
        except yaml.YAMLError:
            data = None
        if data is None:
            data = _by_known_keys(meta, yaml)
        if data is None:
            raise ValueError(_yaml_problem(exc, first)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"frontmatter must be a mapping of keys, not {type(data).__name__}")
    return data


def _yaml_problem(exc: Exception, first: int) -> str:
    """``invalid YAML frontmatter at line N: what`` for a YAML error, N the file's line.

    The line is where the broken construct starts (an unclosed quote or bracket), else where
    the parser gave up.
    """
    problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
    context = getattr(exc, "context", None)
    mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)
    where = f" at line {first + mark.line}" if mark is not None else ""
    what = f"{context}: {problem}" if context else problem
    return f"invalid YAML frontmatter{where}: {what}"


_TOP_LEVEL_PAIR = re.compile(r"^([A-Za-z_][\w.-]*)[ \t]*:[ \t]+(\S.*?)[ \t]*$")

#: What closes the quote, list or mapping a value opens with.
_CLOSERS = {"'": "'", '"': '"', "[": "]", "{": "}"}


def _unclosed(value: str) -> bool:
    """Whether ``value`` opens a quote, a list or a mapping that it never closes.

    Such a value is broken, not plain text to quote: its file is skipped, saying where.
    ``"Expert" reviewer`` or ``[Beta] Reviews code`` close what they open, and are read as
    text when YAML refuses them whole.
    """
    opener = value[:1]
    if opener in ("'", '"'):
        return _CLOSERS[opener] not in value[1:]
    if opener not in ("[", "{"):
        return False
    depth = 0
    for char in value:
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                return False
    return True


def _quote_bad_values(meta: str, yaml: ModuleType) -> str:
    """Single-quote each one-line top-level value that is not valid YAML on its own.

    This is what makes ``description: Use this agent when: the user asks`` load, and values
    that start with a YAML indicator (``*``, ``@``, backquote, ``%``...). Values continued on
    indented lines are left alone: quoting their first line would break them. So are values
    that open a quote, a list or a mapping: when they do not parse, the file is broken.
    """
    lines = meta.split("\n")
    for i, line in enumerate(lines):
        match = _TOP_LEVEL_PAIR.match(line)
        if match is None or _continues(lines, i) or _unclosed(match.group(2)):
            continue
        try:
            if isinstance(yaml.safe_load(line), dict):
                continue
        except yaml.YAMLError:
            pass
        key, value = match.groups()
        # Single quotes: backslashes stay literal, as they are in a plain scalar.
        lines[i] = f"{key}: '{value.replace(chr(39), chr(39) * 2)}'"
    return "\n".join(lines)


def _continues(lines: list[str], i: int) -> bool:
    """Whether the value on line ``i`` goes on over the following indented lines."""
    following: Iterator[str] = (line for line in lines[i + 1 :] if line.strip())
    nxt = next(following, "")
    return nxt[:1] in (" ", "\t")


#: The top-level fields agent, skill and command files have (Claude Code's names, and the
#: snake_case spellings the agents loader also reads).
KNOWN_KEYS = frozenset(
    {
        "name", "description", "tools", "disallowedTools", "disallowed_tools", "model",
        "color", "permissionMode", "permission_mode", "maxTurns", "max_turns", "background",
        "isolation", "memory", "skills", "effort", "hooks", "mcpServers", "mcp_servers",
        "omitClaudeMd", "omit_claude_md", "initialPrompt", "allowed-tools", "argument-hint",
        "arguments", "user-invocable", "disable-model-invocation", "when_to_use", "version",
        "license", "paths", "context", "agent",
    }
)  # fmt: skip

_KNOWN_KEY_LINE = re.compile(r"^([A-Za-z_][\w-]*)[ \t]*:(?:[ \t]|$)")


def _by_known_keys(meta: str, yaml: ModuleType) -> dict[str, Any] | None:
    """Read frontmatter YAML refuses as fields starting at lines that name a known field.

    The last resort for a long description written over several unindented lines, some of
    them looking like keys of their own (``user: "…"`` inside an example): every line up to
    the next known field belongs to the field before it. A field whose lines are YAML on
    their own (``tools: [Read, Grep]``, an indented ``hooks`` mapping) keeps its YAML value;
    any other is its text. None when the first line names no known field.
    """
    fields: list[tuple[str, list[str]]] = []
    for line in meta.split("\n"):
        match = _KNOWN_KEY_LINE.match(line)
        if match is not None and match.group(1) in KNOWN_KEYS:
            fields.append((match.group(1), [line]))
        elif fields:
            fields[-1][1].append(line)
        elif line.strip() and not line.lstrip().startswith("#"):
            return None
    data: dict[str, Any] = {}
    for key, lines in fields:
        block = "\n".join(lines).rstrip()
        try:
            parsed = yaml.safe_load(block)
        except yaml.YAMLError:
            parsed = None
        if isinstance(parsed, dict) and list(parsed) == [key]:
            data[key] = parsed[key]
            continue
        value = block.split(":", 1)[1].strip()
        # What opens a quote or list it never closes, or breaks an indented block, is broken.
        if _unclosed(value) or any(line[:1] in (" ", "\t") for line in lines[1:]):
            return None
        data[key] = value
    return data or None
