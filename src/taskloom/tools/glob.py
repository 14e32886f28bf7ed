"""The Glob tool: files matching a pattern, newest first."""

from __future__ import annotations

import asyncio
import os
import re
import time
from typing import Any

from pydantic import Field

from taskloom.tools._walk import (
    _MAGIC,
    VCS_DIRS,
    glob_to_regex,
)
from taskloom.tools.base import Tool, ToolContext, ToolInput, ToolResult, tool_error

MAX_RESULTS = 100
#: Walks stop after this long; the results found so far are returned with a note.
WALK_TIMEOUT_S = 20.0


class GlobInput(ToolInput):
    """Input of :class:`Glob`."""

    pattern: str = Field(description='The glob pattern to match files against, e.g. "**/*.py".')
    path: str | None = Field(
        default=None,
        description="The directory to search in; defaults to the current working directory. "
        "Omit it for the default rather than passing null or an empty string.",
    )


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


class Glob(Tool[GlobInput]):
    """Finds files by name pattern."""

    name = "Glob"
    description = (
        "Fast file pattern matching that works with any codebase size.\n\n"
        '- Supports glob patterns such as "**/*.js" or "src/**/*.{ts,tsx}": `*` and `?` '
        "match within one path segment, `**` matches any number of directories, `{a,b}` "
        "either alternative, `[abc]` one character.\n"
        "- The pattern is matched against paths relative to path (the current working "
        'directory by default), so "*.py" only finds top-level files; use "**/*.py" to '
        "search all subdirectories.\n"
        f"- Returns matching files as absolute paths, most recently modified first, at most "
        f"{MAX_RESULTS}. Hidden files are included; version-control directories are skipped.\n"
        "- Use it to find files by name; to search file contents use Grep.\n"
        "- Several searches that may be useful are best done as several calls in one message."
    )
    Input = GlobInput
    static_schema = (GlobInput, INPUT_SCHEMA)
    kind = "read"
    concurrency_safe = True

    def permission_target(self, params: GlobInput, ctx: ToolContext) -> str | None:
        """The directory the walk starts in (an absolute or ``../`` pattern moves it)."""
        base = os.path.normpath(os.path.join(ctx.cwd, params.path or "."))
        return _split_literal_prefix(base, params.pattern)[0]

    async def call(self, params: GlobInput, ctx: ToolContext) -> ToolResult:
        """List the files matching the pattern, newest first."""
        base = os.path.normpath(os.path.join(ctx.cwd, params.path or "."))
        if not os.path.exists(base):
            return tool_error(f"Directory does not exist: {base}")
        if not os.path.isdir(base):
            return tool_error(f"Path is not a directory: {base}. Glob searches directories.")
        if not params.pattern:
            return tool_error("pattern must not be empty.")
        start, rest = _split_literal_prefix(base, params.pattern)
        found, complete = await asyncio.to_thread(_walk_glob, start, rest)
        if not found:
            return ToolResult("No files found" + ("" if complete else _INCOMPLETE))
        if ctx.read_denied is not None:
            found = [item for item in found if not ctx.read_denied(item[1])]
            if not found:
                return ToolResult("No files found")
        found.sort(key=lambda item: (-item[0], item[1]))
        lines = [path for _, path in found[:MAX_RESULTS]]
        if len(found) > MAX_RESULTS:
            lines.append(
                f"(Results are truncated: showing the {MAX_RESULTS} most recently modified of "
                f"{len(found)} files. Consider a more specific path or pattern.)"
            )
        if not complete:
            lines.append(_INCOMPLETE.strip())
        return ToolResult("\n".join(lines), data={"numFiles": len(found)})


_INCOMPLETE = f"\n(The search stopped after {WALK_TIMEOUT_S:.0f}s; results may be incomplete.)"


def _split_literal_prefix(base: str, pattern: str) -> tuple[str, str]:
    """Move leading wildcard-free segments into the directory, so the walk starts deeper."""
    if os.path.isabs(pattern):
        base, pattern = os.sep, pattern.lstrip("/")
    segments = pattern.split("/")
    literal = 0
    while literal < len(segments) - 1 and not _MAGIC.search(segments[literal]):
        literal += 1
    start = os.path.normpath(os.path.join(base, *segments[:literal]))
    return start, "/".join(segments[literal:])


def _walk_glob(start: str, pattern: str) -> tuple[list[tuple[int, str]], bool]:
    """(mtime_ns, path) of files under ``start`` matching ``pattern``; False if timed out."""
    regex = re.compile(glob_to_regex(pattern))
    # Without "**" a match is exactly as deep as the pattern: no need to walk further.
    max_depth = None if "**" in pattern else pattern.count("/")
    deadline = time.monotonic() + WALK_TIMEOUT_S
    found: list[tuple[int, str]] = []
    stack: list[tuple[str, str, int]] = [(start, "", 0)]
    while stack:
        if time.monotonic() > deadline:
            return found, False
        directory, rel_dir, depth = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            rel = rel_dir + entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in VCS_DIRS and (max_depth is None or depth < max_depth):
                        stack.append((entry.path, rel + "/", depth + 1))
                elif entry.is_file() and regex.fullmatch(rel):
                    found.append((entry.stat().st_mtime_ns, entry.path))
            except OSError:
                continue  # vanished or unreadable meanwhile
    return found, True


#: Ignore files and their precedence (lower wins), as ripgrep ranks them.
