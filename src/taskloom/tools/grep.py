"""The Grep tool: ripgrep when it is installed, else a pure-Python search with the same output.

Both back ends produce the same raw lines (``path``, ``path:count``, or ripgrep's
``path:line:text`` / ``path-line-text`` with ``--`` between context groups); one formatter turns
them into the model's result. The Python search (:mod:`taskloom.tools.glob` walks the files)
mirrors ripgrep's choices, so switching back end never changes an answer.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from taskloom._aio import finish_despite_cancel
from taskloom.tools._walk import VCS_DIRS, is_binary_file, iter_search_files
from taskloom.tools.base import Tool, ToolContext, ToolInput, ToolResult, tool_error
from taskloom.tools.read import truncate_line

Mode = Literal["content", "files_with_matches", "count"]
TIMEOUT_S = 30.0
#: ripgrep output past this is not read (the process is stopped): memory stays bounded.
MAX_RG_OUTPUT = 8 << 20
MAX_OUTPUT_CHARS = 30_000


class GrepInput(ToolInput):
    """Input of :class:`Grep`."""

    pattern: str = Field(description="The regular expression to search file contents for.")
    path: str | None = Field(
        default=None,
        description="File or directory to search (default: current working directory).",
    )
    glob: str | None = Field(
        default=None,
        description='Only search files matching this glob, e.g. "*.js" or "src/**/*.{ts,tsx}"; '
        'several separated by spaces; "!pattern" excludes.',
    )
    type: str | None = Field(
        default=None, description='File type to search, e.g. "py", "js", "rust", "go", "md".'
    )
    output_mode: Mode = Field(
        default="files_with_matches",
        description='"files_with_matches" (default) lists matching files, newest first; '
        '"content" shows matching lines; "count" shows matches per file.',
    )
    case_insensitive: bool = Field(default=False, alias="-i", description="Ignore case.")
    line_numbers: bool = Field(
        default=True, alias="-n", description="Show line numbers (content mode only; default true)."
    )
    after: int | None = Field(
        default=None, alias="-A", ge=0, description="Lines to show after each match (content mode)."
    )
    before: int | None = Field(
        default=None,
        alias="-B",
        ge=0,
        description="Lines to show before each match (content mode).",
    )
    context: int | None = Field(
        default=None,
        alias="-C",
        ge=0,
        description="Lines to show around each match (content mode).",
    )
    multiline: bool = Field(
        default=False,
        description="Let a match span lines: . matches newlines and the pattern may contain "
        "\\n. Default false: each line is matched on its own.",
    )
    head_limit: int | None = Field(
        default=None,
        ge=1,
        description="Show only the first N lines / files / counts (like | head -N).",
    )
    offset: int = Field(default=0, ge=0, description="Skip the first N lines / files / counts.")


@dataclass(frozen=True, slots=True)
class Query:
    """A search, normalised; both back ends take exactly this."""

    pattern: str
    root: str
    mode: Mode
    globs: tuple[str, ...] = ()
    file_type: str | None = None
    ignore_case: bool = False
    line_numbers: bool = True
    before: int = 0
    after: int = 0
    multiline: bool = False


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
            "description": "Lines to show around each match (content mode).",
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
            "minimum": 1,
            "type": "integer",
            "description": "Show only the first N lines / files / counts (like | head -N).",
        },
        "offset": {
            "default": 0,
            "description": "Skip the first N lines / files / counts.",
            "minimum": 0,
            "type": "integer",
        },
    },
    "required": ["pattern"],
    "type": "object",
}


class Grep(Tool[GrepInput]):
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
        'first; "content" shows matching lines (with -n line numbers, -A/-B/-C context); '
        '"count" shows the number of matches per file.\n'
        "- By default each line is matched separately; set multiline for patterns that span "
        "lines.\n"
        "- Hidden files are searched; .gitignore'd files, binary files and symlinks are not.\n"
        "- Use head_limit and offset to page through long results.\n"
        "- For open-ended searches that may take several rounds, use the Agent tool instead."
    )
    Input = GrepInput
    static_schema = (GrepInput, INPUT_SCHEMA)
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
        root = os.path.normpath(os.path.join(ctx.cwd, params.path or "."))
        if not os.path.exists(root):
            return tool_error(f"Path does not exist: {root}")
        if os.path.isfile(root) and is_binary_file(root):
            return ToolResult(f"No matches found ({root} is a binary file; Grep skips those)")
        context = params.context or 0
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
        )
        rg = ripgrep() if self.use_ripgrep else None
        lines = await (run_ripgrep(query, rg) if rg else run_python(query))
        if isinstance(lines, ToolResult):
            return lines
        if ctx.read_denied is not None:
            lines = without_denied(lines, ctx.read_denied)
        return format_result(query, lines, params.head_limit, params.offset)


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


async def run_ripgrep(q: Query, rg: str) -> list[str] | ToolResult:
    """Raw output lines of ``rg`` for ``q``."""
    argv = [rg, "--no-config", "--color=never", "--hidden", "--sort=path"]
    # Overrides: the last matching glob wins, so the VCS exclusions come last.
    for glob in (*q.globs, *(f"!{d}" for d in VCS_DIRS)):
        argv.append(f"--glob={glob}")
    if q.ignore_case:
        argv.append("--ignore-case")
    if q.multiline:
        argv += ["--multiline", "--multiline-dotall"]
    if q.file_type:
        argv.append(f"--type={q.file_type}")
    if q.mode == "files_with_matches":
        argv.append("--files-with-matches")
    elif q.mode == "count":
        argv += ["--count-matches", "--with-filename"]
    else:
        argv += ["--no-heading", "--with-filename"]
        argv.append("--line-number" if q.line_numbers else "--no-line-number")
        argv += [f"--before-context={q.before}", f"--after-context={q.after}"]
    argv += ["--regexp", q.pattern, "--", q.root]
    # Run from the search root: ripgrep matches --glob patterns relative to its cwd.
    cwd = q.root if os.path.isdir(q.root) else os.path.dirname(q.root)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        async with asyncio.timeout(TIMEOUT_S):
            (out, full), (err, _) = await asyncio.gather(
                _read_capped(proc.stdout, MAX_RG_OUTPUT, proc), _read_capped(proc.stderr, 1 << 16)
            )
            code = await proc.wait()
    except TimeoutError:
        return tool_error(f"Grep timed out after {TIMEOUT_S:.0f}s; narrow the path or pattern.")
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await finish_despite_cancel(proc.wait())
    if code == 2 and not out:
        message = err.decode("utf-8", "replace").strip() or "ripgrep failed"
        return tool_error(f"Grep failed: {message}")
    lines = out.decode("utf-8", "replace").split("\n")
    if full or not lines[-1]:
        lines.pop()  # the empty string after the final newline, or a cut-off last line
    return lines


async def _read_capped(
    stream: asyncio.StreamReader, cap: int, proc: asyncio.subprocess.Process | None = None
) -> tuple[bytes, bool]:
    """Read to EOF keeping ``cap`` bytes; True if more came (then ``proc``, if given, is killed)."""
    chunks: list[bytes] = []
    size = 0
    while chunk := await stream.read(1 << 16):
        if size < cap:
            chunks.append(chunk)
        size += len(chunk)
        if size > cap and proc is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
    return b"".join(chunks)[:cap], size > cap


async def run_python(q: Query) -> list[str] | ToolResult:
    """Raw output lines of the pure-Python search for ``q`` (run in a thread, bounded)."""
    stop = threading.Event()
    try:
        return await asyncio.to_thread(_python_search, q, time.monotonic() + TIMEOUT_S, stop)
    except asyncio.CancelledError:
        stop.set()  # the thread cannot be killed: tell it to give up
        raise


class _Stopped(Exception):
    """The Python search ran out of time or was cancelled."""


def _python_search(q: Query, deadline: float, stop: threading.Event) -> list[str] | ToolResult:
    flags = re.MULTILINE | (re.IGNORECASE if q.ignore_case else 0)
    try:
        regex = re.compile(q.pattern, flags | (re.DOTALL if q.multiline else 0))
    except re.error as exc:
        return tool_error(f"Grep failed: invalid regular expression: {exc}")
    out: list[str] = []
    try:
        for path in iter_search_files(q.root, q.globs, q.file_type, VCS_DIRS):
            if stop.is_set() or time.monotonic() > deadline:
                raise _Stopped
            _search_file(q, regex, path, out)
    except _Stopped:
        return tool_error(f"Grep timed out after {TIMEOUT_S:.0f}s; narrow the path or pattern.")
    except ValueError as exc:  # an unknown file type
        return tool_error(f"Grep failed: {exc}")
    return out


def _search_file(q: Query, regex: re.Pattern[str], path: str, out: list[str]) -> None:
    """Append ``path``'s output lines to ``out``."""
    if not os.path.isfile(path):
        return  # a FIFO or device named directly would block the search
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return
    if b"\0" in data:
        return  # binary: skipped, as ripgrep skips it
    text = data.removeprefix(b"\xef\xbb\xbf").decode("utf-8", "replace")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if q.multiline:
        starts = [0] + [m.end() for m in re.finditer("\n", text)]
        hits: set[int] = set()
        count = 0
        for m in regex.finditer(text):
            first = bisect.bisect_right(starts, m.start()) - 1
            if first >= len(lines):
                continue  # an empty match after the final newline: no line there
            last = bisect.bisect_right(starts, max(m.end() - 1, m.start())) - 1
            hits.update(range(first, min(last, len(lines) - 1) + 1))
            count += 1
    else:
        per_line = [sum(1 for _ in regex.finditer(line)) for line in lines]
        hits = {i for i, n in enumerate(per_line) if n}
        count = sum(per_line)
    if not hits:
        return
    if q.mode == "files_with_matches":
        out.append(path)
    elif q.mode == "count":
        out.append(f"{path}:{count}")
    else:
        out.extend(_context_lines(q, path, lines, hits, separate=bool(out)))


def _context_lines(
    q: Query, path: str, lines: list[str], hits: set[int], separate: bool
) -> Iterable[str]:
    """The ``--no-heading`` lines ripgrep prints for one file (``--`` between groups)."""
    shown: set[int] = set()
    for i in hits:
        shown.update(range(max(i - q.before, 0), min(i + q.after, len(lines) - 1) + 1))
    previous = None
    grouped = bool(q.before or q.after)
    for i in sorted(shown):
        # ripgrep separates groups only when context is on, also between files.
        gap = separate if previous is None else i > previous + 1
        if grouped and gap:
            yield "--"
        sep = ":" if i in hits else "-"
        number = f"{i + 1}{sep}" if q.line_numbers else ""
        yield f"{path}{sep}{number}{lines[i]}"
        previous = i


def ripgrep() -> str | None:
    """The ``rg`` executable: on ``PATH``, else beside this Python (the ``ripgrep`` wheel)."""
    found = shutil.which("rg")
    if found is None:
        beside = Path(sys.executable).with_name("rg")
        found = str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None
    return found


def format_result(q: Query, lines: list[str], head_limit: int | None, offset: int) -> ToolResult:
    """The model's view of raw output lines: summary, paging, length cap."""
    if not lines:
        return ToolResult("No matches found")
    footer = ""
    if q.mode == "files_with_matches":
        entries = _newest_first(lines)
        header = f"Found {len(entries)} file{'s' if len(entries) != 1 else ''}\n"
    else:
        entries = [truncate_line(line.removesuffix("\r")) for line in lines]
        header = ""
        if q.mode == "count":
            total = sum(int(e.rsplit(":", 1)[1]) for e in entries)
            footer = f"\n\nFound {total} total occurrences across {len(entries)} files."
    page = entries[offset : offset + head_limit if head_limit else None]
    if offset or len(page) < len(entries) - offset:
        first, last = offset + 1, offset + len(page)
        footer += (
            f"\n\n(Showing entries {first}-{last} of {len(entries)}; "
            "use offset and head_limit to see others.)"
        )
    body = "\n".join(page)
    if len(body) > MAX_OUTPUT_CHARS:
        cut = body.rfind("\n", 0, MAX_OUTPUT_CHARS)
        body = body[: cut if cut > 0 else MAX_OUTPUT_CHARS]
        footer += (
            f"\n\n(Output cut at {MAX_OUTPUT_CHARS} characters: use head_limit/offset, a "
            "narrower path or a glob to see the rest.)"
        )
    return ToolResult(header + body + footer, data={"mode": q.mode, "numEntries": len(entries)})


def _newest_first(paths: list[str]) -> list[str]:
    def mtime(path: str) -> int:
        try:
            return os.stat(path).st_mtime_ns
        except OSError:
            return 0

    return sorted(paths, key=lambda p: (-mtime(p), p))
