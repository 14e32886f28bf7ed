"""The Glob tool: files matching a pattern (ripgrep glob semantics), newest last."""

from __future__ import annotations

import asyncio
import heapq
import os
import re
import time
from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING, Any

from taskloom._dataclass import dataclass
from taskloom.tools import responses
from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.tools.inputs.glob import GlobInput

MAX_RESULTS = 100
#: Walks stop after this long; the results found so far are returned with a note.
WALK_TIMEOUT_S = 20.0


#: :class:`GlobInput`'s closed schema written out, so that offering the tool does not build
#: the model (it is built when a call is first validated); tests check it is the one
#: generated, byte for byte.
INPUT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`Glob`.",
    "properties": {
        "pattern": {
            "description": 'The glob pattern to match files against, e.g. "**/*.py".',
            "type": "string",
        },
        "path": {
            "type": "string",
            "description": "The directory to search in; defaults to the "
            "current working directory. Omit it for the "
            "default rather than passing null or an empty "
            "string.",
        },
    },
    "required": ["pattern"],
    "type": "object",
}


class Glob(Tool["GlobInput"]):
    """Finds files by name pattern."""

    name = "Glob"
    description = (
        "Fast file pattern matching that works with any codebase size.\n\n"
        '- Supports glob patterns such as "**/*.js" or "src/**/*.{ts,tsx}": `*` and `?` '
        "match within one path segment, `**` matches any number of directories, `{a,b}` "
        "either alternative, `[abc]` one character.\n"
        '- As in ripgrep, a pattern without "/" matches file names at any depth ("*.py" '
        'finds every Python file below path); a pattern with "/" is matched from path '
        '(the current working directory by default): "src/*.py" finds only files directly '
        "in src.\n"
        "- Returns matching files as absolute paths sorted by modification time, the most "
        f"recently modified last; at most {MAX_RESULTS} (the most recently modified), with "
        "a note when there are more. Hidden files are included; files that .gitignore "
        "(or .ignore) leaves out, symlinks and version-control directories are not.\n"
        "- Use it to find files by name; to search file contents use Grep.\n"
        "- Several searches that may be useful are best done as several calls in one message."
    )
    input_model = "taskloom.tools.inputs.glob:GlobInput"
    static_schema = (input_model, INPUT_SCHEMA)
    kind = "read"
    concurrency_safe = True

    def permission_target(self, params: GlobInput, ctx: ToolContext) -> str | None:
        """The directory the walk starts in (an absolute or ``../`` pattern moves it)."""
        base = os.path.normpath(os.path.join(ctx.cwd, params.path or "."))
        return _split_literal_prefix(base, params.pattern)[0]

    async def call(self, params: GlobInput, ctx: ToolContext) -> ToolResult:
        """List the files matching the pattern, oldest first, newest last."""
        base = os.path.normpath(os.path.join(ctx.cwd, params.path or "."))
        if not os.path.exists(base):
            return tool_error(f"Directory does not exist: {base}")
        if not os.path.isdir(base):
            return tool_error(f"Path is not a directory: {base}. Glob searches directories.")
        if not params.pattern:
            return tool_error("pattern must not be empty.")
        began = time.monotonic()
        start, regex, max_depth = compile_pattern(base, params.pattern)
        walk = await asyncio.to_thread(
            _walk_glob, start, regex, max_depth, ctx.read_denied or _nothing_denied
        )
        # Shown the way ripgrep's --sort=modified does: oldest first, the newest file last.
        lines = [path for _, path in sorted(walk.newest)]
        truncated = walk.total > MAX_RESULTS
        response = responses.glob(
            lines,
            cwd=str(ctx.cwd),
            total=walk.total,
            truncated=truncated,
            duration_ms=round((time.monotonic() - began) * 1000),
        )
        if not walk.newest:
            text = "No files found" + ("" if walk.complete else _INCOMPLETE)
            return ToolResult(text, response=response)
        if truncated:
            lines.append(TRUNCATED_NOTE)
        if not walk.complete:
            lines.append(_INCOMPLETE.strip())
        data = {"numFiles": walk.total, "truncated": truncated}
        return ToolResult("\n".join(lines), data=data, response=response)


#: What Claude Code appends when it leaves files out.
TRUNCATED_NOTE = "(Results are truncated. Consider using a more specific path or pattern.)"
_INCOMPLETE = f"\n(The search stopped after {WALK_TIMEOUT_S:.0f}s; results may be incomplete.)"


def compile_pattern(base: str, pattern: str) -> tuple[str, re.Pattern[str], int | None]:
    """Where to walk from, the regex a file's path relative to it must match, how deep to go.

    ripgrep's glob semantics: a pattern with no ``/`` (a trailing one aside) matches the file
    name at any depth; with one, it is anchored at ``base``. Leading wildcard-free segments
    become part of the start directory, so the walk starts deeper; an anchored pattern without
    ``**`` matches files exactly as deep as it is, so the walk goes no deeper.
    """
    from taskloom.tools._walk import glob_to_regex  # the walk's module: loaded at first use

    anchored = "/" in pattern.rstrip("/")
    start, rest = _split_literal_prefix(base, pattern)
    max_depth = rest.count("/") if anchored and "**" not in rest else None
    return start, re.compile(glob_to_regex(rest if anchored else "**/" + rest)), max_depth


def _split_literal_prefix(base: str, pattern: str) -> tuple[str, str]:
    """Move leading wildcard-free segments into the directory, so the walk starts deeper."""
    from taskloom.tools._walk import _MAGIC

    if os.path.isabs(pattern):
        base, pattern = os.sep, pattern.lstrip("/")
    segments = pattern.split("/")
    literal = 0
    while literal < len(segments) - 1 and not _MAGIC.search(segments[literal]):
        literal += 1
    start = os.path.normpath(os.path.join(base, *segments[:literal]))
    return start, "/".join(segments[literal:])


@dataclass(slots=True)
class _Walk:
    """What a walk found: the newest files (``(mtime_ns, path)``), how many, whether all."""

    newest: list[tuple[int, str]] = field(default_factory=list)
    total: int = 0
    complete: bool = True


def _nothing_denied(path: str) -> bool:
    return False


def _walk_glob(
    start: str, regex: re.Pattern[str], max_depth: int | None, denied: Callable[[str], bool]
) -> _Walk:
    """The newest matching files under ``start``, and how many match.

    A file matches when ``regex`` matches its path relative to ``start`` and ``denied``
    does not cover it; the :data:`MAX_RESULTS` newest are kept.

    The walk is Grep's (and ripgrep's): ignore files honoured, hidden files included,
    symlinks and version-control directories skipped. Only the newest are kept, in a heap:
    a pattern matching a million files costs no more memory than one matching a hundred.
    """
    from taskloom.tools._walk import VCS_DIRS, iter_search_files

    walk = _Walk()
    if not os.path.isdir(start):
        return walk  # the pattern's literal directories do not exist
    deadline = time.monotonic() + WALK_TIMEOUT_S
    prefix = os.path.join(start, "")
    for path in iter_search_files(start, (), None, VCS_DIRS, max_depth):
        if time.monotonic() > deadline:
            walk.complete = False
            return walk
        if not regex.fullmatch(path.removeprefix(prefix)) or denied(path):
            continue
        try:
            item = (os.stat(path).st_mtime_ns, path)
        except OSError:
            continue  # vanished meanwhile
        walk.total += 1
        if len(walk.newest) < MAX_RESULTS:
            heapq.heappush(walk.newest, item)
        else:
            heapq.heappushpop(walk.newest, item)
    return walk
