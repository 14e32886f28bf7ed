"""The Grep tool: the model's view of a search by ripgrep or the pure-Python fallback.

:mod:`taskloom.tools.grep_search` runs the search and returns raw lines; here they are filtered
(Read deny rules), made relative to the working directory, paged (250 entries unless
``head_limit`` says otherwise) and summarised the way Claude Code shows them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from taskloom.tools import responses
from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error
from taskloom.tools.read import truncate_line

if TYPE_CHECKING:
    from taskloom.tools.grep_search import Found, Query
    from taskloom.tools.inputs.grep import GrepInput

#: Entries shown when the call gives no ``head_limit`` (Claude Code's default).
DEFAULT_HEAD_LIMIT = 250


#: :class:`GrepInput`'s closed schema written out, so that offering the tool does not build
#: the model (it is built when a call is first validated); tests check it is the one
#: generated, byte for byte.
INPUT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`Grep`.",
    "properties": {
        "pattern": {
            "description": "The regular expression to search file contents for.",
            "type": "string",
        },
        "path": {
            "type": "string",
            "description": "File or directory to search (default: current working directory).",
        },
        "glob": {
            "type": "string",
            "description": "Only search files matching this glob, e.g. "
            '"*.js" or "src/**/*.{ts,tsx}"; several '
            'separated by spaces; "!pattern" excludes.',
        },
        "type": {
            "type": "string",
            "description": 'File type to search, e.g. "py", "js", "rust", "go", "md".',
        },
        "output_mode": {
            "default": "files_with_matches",
            "description": '"files_with_matches" (default) lists '
            "matching files, newest first; "
            '"content" shows matching lines; '
            '"count" shows matches per file.',
            "enum": ["content", "files_with_matches", "count"],
            "type": "string",
        },
        "-i": {"default": False, "description": "Ignore case.", "type": "boolean"},
        "-n": {
            "default": True,
            "description": "Show line numbers (content mode only; default true).",
            "type": "boolean",
        },
        "-A": {
            "minimum": 0,
            "type": "integer",
            "description": "Lines to show after each match (content mode).",
        },
        "-B": {
            "minimum": 0,
            "type": "integer",
            "description": "Lines to show before each match (content mode).",
        },
        "-C": {
            "minimum": 0,
            "type": "integer",
            "description": "Lines to show before and after each match (content mode); "
            "same as context.",
        },
        "context": {
            "minimum": 0,
            "type": "integer",
            "description": "Lines to show before and after each match (content mode); same as -C.",
        },
        "-o": {
            "default": False,
            "description": "Show only the matched part of each matching line, "
            "one per output line (content mode).",
            "type": "boolean",
        },
        "multiline": {
            "default": False,
            "description": "Let a match span lines: . matches "
            "newlines and the pattern may contain "
            "\\n. Default false: each line is matched "
            "on its own.",
            "type": "boolean",
        },
        "head_limit": {
            "minimum": 0,
            "type": "integer",
            "description": "Show at most N lines / files / counts "
            "(like | head -N). Default 250; 0 for no limit.",
        },
        "offset": {
            "default": 0,
            "description": "Skip the first N lines / files / counts, to page with head_limit.",
            "minimum": 0,
            "type": "integer",
        },
    },
    "required": ["pattern"],
    "type": "object",
}


class Grep(Tool["GrepInput"]):
    """Searches file contents with a regular expression."""

    name = "Grep"
    description = (
        "A powerful search tool built on ripgrep.\n\n"
        "Usage:\n"
        "- ALWAYS use Grep for content searches instead of running grep or rg via Bash.\n"
        '- pattern is a regular expression (e.g. "log.*Error", "def\\s+\\w+"). Escape '
        'literal braces and other specials: "interface\\{\\}" finds "interface{}".\n'
        '- Narrow the search with path, glob ("*.py", "**/*.{ts,tsx}") or type ("py", '
        '"js", "rust"): type is faster than glob for standard file types.\n'
        '- output_mode: "files_with_matches" (default) lists files, most recently modified '
        'first; "content" shows matching lines as path:line:text (-n line numbers, on by '
        "default; -A/-B/-C or context for lines around each match; -o only the matched "
        'part); "count" shows path:matches for each file.\n'
        "- Paths are relative to the current working directory (absolute outside it).\n"
        f"- Results stop at {DEFAULT_HEAD_LIMIT} lines / files / counts, with a note saying "
        "so: head_limit sets another limit (0: no limit) and offset skips entries, to page.\n"
        "- By default each line is matched separately; set multiline for patterns that span "
        "lines.\n"
        "- Hidden files are searched; .gitignore'd files, binary files and symlinks are not.\n"
        "- For open-ended searches that may take several rounds, use the Agent tool instead."
    )
    input_model = "taskloom.tools.inputs.grep:GrepInput"
    static_schema = (input_model, INPUT_SCHEMA)
    kind = "read"
    concurrency_safe = True

    def __init__(self, *, use_ripgrep: bool = True) -> None:
        """Create the tool.

        Args:
            use_ripgrep: Use ``rg`` when it is on PATH; False forces the Python search.
        """
        self.use_ripgrep = use_ripgrep

    def permission_target(self, params: GrepInput, ctx: ToolContext) -> str | None:
        """The file or directory searched."""
        return os.path.normpath(os.path.join(ctx.cwd, params.path or "."))

    async def call(self, params: GrepInput, ctx: ToolContext) -> ToolResult:
        """Search, then format and page the result."""
        # The search (and the process runner under it) is loaded at the first search, not
        # when the tool is offered: off the start-up path.
        from taskloom.tools._walk import is_binary_file
        from taskloom.tools.grep_search import Found, Query, ripgrep, run_python, run_ripgrep

        root = os.path.normpath(os.path.join(ctx.cwd, params.path or "."))
        if not os.path.exists(root):
            return tool_error(f"Path does not exist: {root}")
        if params.around is not None and params.context not in (None, params.around):
            return tool_error(
                f"-C ({params.around}) and context ({params.context}) are the same option "
                "with different values: give one of them."
            )
        if os.path.isfile(root) and is_binary_file(root):
            empty = "No files found" if params.output_mode == "files_with_matches" else None
            return ToolResult(
                f"{empty or 'No matches found'} ({root} is a binary file; Grep skips those)"
            )
        context = params.around if params.around is not None else params.context or 0
        query = Query(
            pattern=params.pattern,
            root=root,
            mode=params.output_mode,
            globs=tuple((params.glob or "").split()),
            file_type=params.type,
            ignore_case=params.case_insensitive,
            line_numbers=params.line_numbers,
            before=params.before if params.before is not None else context,
            after=params.after if params.after is not None else context,
            multiline=params.multiline,
            only_matching=params.only_matching,
        )
        rg = ripgrep() if self.use_ripgrep else None
        found = await (run_ripgrep(query, rg) if rg else run_python(query))
        if isinstance(found, ToolResult):
            return found
        if ctx.read_denied is not None:
            found = Found(without_denied(found.lines, ctx.read_denied), found.complete)
        return format_result(query, found, params.head_limit, params.offset, cwd=str(ctx.cwd))


def without_denied(lines: list[str], denied: Callable[[str], bool]) -> list[str]:
    """Drop output lines about files a Read deny rule covers.

    A line starts with the file's path, followed by ``:`` or ``-`` and a line number (or the
    end of the line): the path is the longest such prefix that names a file.
    """
    verdicts: dict[str, bool] = {}
    kept = []
    for line in lines:
        path = _line_path(line)
        if path is None:
            kept.append(line)
            continue
        if path not in verdicts:
            verdicts[path] = denied(path)
        if not verdicts[path]:
            kept.append(line)
    return kept


def _line_path(line: str) -> str | None:
    if os.path.isfile(line):
        return line
    for match in reversed(list(re.finditer(r"[:-](?=\d|$)", line))):
        head = line[: match.start()]
        if os.path.isfile(head):
            return head
    return None


def format_result(
    q: Query, found: Found, head_limit: int | None, offset: int, cwd: str | None = None
) -> ToolResult:
    """The model's view of raw output lines: relative paths, a page, a summary, notes.

    Args:
        q: The search.
        found: What the back end collected.
        head_limit: Entries to show; None for :data:`DEFAULT_HEAD_LIMIT`, 0 for all.
        offset: Entries to skip first.
        cwd: Paths under it are shown relative to it; None keeps them as searched.
    """
    incomplete = "" if found.complete else _incomplete()
    if not found.lines:
        empty = "No files found" if q.mode == "files_with_matches" else "No matches found"
        return ToolResult(empty + incomplete, response=responses.grep(q.mode, [], total=0))
    if q.mode == "files_with_matches":
        entries = _relative(_newest_first(found.lines), q.root, cwd)
    else:
        relative = _relative(found.lines, q.root, cwd)
        entries = [truncate_line(line.removesuffix("\r")) for line in relative]
    limit = DEFAULT_HEAD_LIMIT if head_limit is None else head_limit
    page = entries[offset : offset + limit if limit else None]
    unit = "lines" if q.mode == "content" else "files"
    data: dict[str, Any] = {"mode": q.mode, "numEntries": len(entries)}
    if not page:
        text = f"No {unit} at offset {offset}: there are {len(entries)} in all."
        response = responses.grep(q.mode, [], total=len(entries), applied_offset=offset)
        return ToolResult(text + incomplete, data=data, response=response)
    body = "\n".join(page)
    if q.mode == "files_with_matches":
        body = f"Found {_plural(len(page), 'file')}\n{body}"
    elif q.mode == "count":
        total = sum(int(entry.rsplit(":", 1)[1]) for entry in page)
        files = _plural(len(page), "file")
        body += f"\n\nFound {_plural(total, 'total occurrence')} across {files}."
    cut = len(entries) - offset > len(page)
    if cut or offset:
        body += "\n\n" + _pagination_note(limit, offset, len(page), len(entries), unit)
        data.update(appliedLimit=limit if cut else None, appliedOffset=offset or None)
    response = responses.grep(
        q.mode,
        page,
        total=len(entries),
        applied_limit=data.get("appliedLimit"),
        applied_offset=data.get("appliedOffset"),
    )
    return ToolResult(body + incomplete, data=data, response=response)


def _incomplete() -> str:
    from taskloom.tools.grep_search import MAX_COLLECT

    return (
        f"\n\n(The search stopped collecting after {MAX_COLLECT >> 20} MiB of output: results "
        "are incomplete. Narrow the path, glob or pattern.)"
    )


def _pagination_note(limit: int, offset: int, shown: int, total: int, unit: str) -> str:
    """Claude Code's pagination line, plus what is left and how to get it."""
    window = f"limit: {limit}, offset: {offset}" if limit else f"offset: {offset}"
    rest = total - offset - shown
    more = (
        f", {rest} more: offset: {offset + shown} shows the next page, head_limit: 0 all of them"
        if rest > 0
        else ""
    )
    return f"[Showing results with pagination = {window}; {total} {unit} in all{more}]"


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _relative(lines: list[str], root: str, cwd: str | None) -> list[str]:
    """Lines with paths relative to ``cwd``, when the searched ``root`` is under it.

    Every line but ``--`` starts with ``root`` (both back ends print paths as given), so the
    cwd prefix is cut from the start of each line: no path needs parsing out of the text.
    """
    if cwd is None:
        return lines
    prefix = os.path.join(os.path.normpath(cwd), "")
    if not os.path.join(root, "").startswith(prefix):
        return lines
    return [line.removeprefix(prefix) for line in lines]


def _newest_first(paths: list[str]) -> list[str]:
    def mtime(path: str) -> int:
        try:
            return os.stat(path).st_mtime_ns
        except OSError:
            return 0

    return sorted(paths, key=lambda p: (-mtime(p), p))
