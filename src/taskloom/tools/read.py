"""The Read tool, and the path and read-before-write helpers that Write and Edit share.

Read shows a text file the way ``cat -n`` does and records the file's mtime in
``ctx.files.seen``; Write and Edit refuse to touch an existing file that is not recorded there
or whose mtime has moved since, so the model never overwrites changes it has not seen.
"""

from __future__ import annotations

import asyncio
import codecs
import difflib
import os
from collections.abc import Iterable
from typing import Any, BinaryIO

from pydantic import Field

from taskloom.tools.base import Tool, ToolContext, ToolInput, ToolResult, tool_error

DEFAULT_LIMIT = 2000
MAX_LINE_CHARS = 2000
LINE_TRUNCATED = " [... line truncated]"
#: How much of a file is sniffed for NUL bytes and UTF-8 validity.
SNIFF_BYTES = 8192
_CHUNK = 1 << 16


def resolve_file_path(file_path: str, ctx: ToolContext) -> str | ToolResult:
    """The normalised absolute path (see :func:`target_path`), or an error when it is empty."""
    if not file_path:
        return tool_error("file_path must not be empty.")
    return target_path(file_path, ctx)


def target_path(file_path: str, ctx: ToolContext) -> str:
    """The absolute path a file tool acts on, and the one permission rules see.

    A relative path is taken from ``ctx.cwd`` (the agent's working directory), ``~`` is the
    home directory; ``..`` and doubled slashes are normalised away, so the same file always
    has the same key in ``ctx.files`` whatever way it was named.
    """
    return os.path.normpath(os.path.join(ctx.cwd, os.path.expanduser(file_path)))


def missing_file_error(path: str, ctx: ToolContext) -> ToolResult:
    """A "does not exist" error that suggests similarly named files in the same directory."""
    message = f"File does not exist: {path}"
    parent, name = os.path.split(path)
    try:
        siblings = os.listdir(parent)
    except OSError:
        siblings = []
    stem = os.path.splitext(name)[0]
    similar = [s for s in siblings if os.path.splitext(s)[0] == stem and s != name]
    similar += [s for s in difflib.get_close_matches(name, siblings, n=3) if s not in similar]
    if similar:
        message += ". Did you mean " + " or ".join(os.path.join(parent, s) for s in similar[:3])
        message += "?"
    return tool_error(f"{message} (current working directory: {ctx.cwd})")


def check_fresh(path: str, mtime_ns: int, ctx: ToolContext, action: str) -> ToolResult | None:
    """An error unless ``path`` was read in this context and has not changed since."""
    seen = ctx.files.seen.get(path)
    if seen is None:
        return tool_error(f"File has not been read yet. Read {path} first before {action} it.")
    if seen != mtime_ns:
        return tool_error(
            f"File {path} has been modified since it was read (by the user, a formatter or "
            f"another process). Read it again before {action} it."
        )
    return None


def number_lines(lines: Iterable[str], first: int) -> str:
    """``cat -n`` style: the line number right-aligned in 6 columns, a tab, the line."""
    return "\n".join(f"{no:>6}\t{truncate_line(line)}" for no, line in enumerate(lines, first))


def truncate_line(line: str) -> str:
    """Cut a line longer than :data:`MAX_LINE_CHARS`, marking the cut."""
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + LINE_TRUNCATED


def looks_binary(head: bytes, *, partial: bool) -> bool:
    """NUL bytes, or bytes that are not UTF-8.

    Args:
        head: The start of the file.
        partial: The file goes on, so a multi-byte character cut at the end is fine.
    """
    if b"\0" in head:
        return True
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=not partial)
    except UnicodeDecodeError:
        return True
    return False


class ReadInput(ToolInput):
    """Input of :class:`Read`."""

    file_path: str = Field(description="The absolute path of the file to read.")
    offset: int | None = Field(
        default=None,
        ge=0,
        description="The 1-based line number to start reading at. Only give it for files too "
        "long to read at once.",
    )
    limit: int | None = Field(
        default=None,
        ge=1,
        description=f"How many lines to read (default {DEFAULT_LIMIT}). Only give it for files "
        "too long to read at once.",
    )


#: :class:`ReadInput`'s closed schema written out, so that offering the tool does not build
#: the model (it is built when a call is first validated); tests check it is the one
#: generated, byte for byte.
INPUT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`Read`.",
    "properties": {
        "file_path": {"description": "The absolute path of the file to read.", "type": "string"},
        "offset": {
            "minimum": 0,
            "type": "integer",
            "description": "The 1-based line number to start reading "
            "at. Only give it for files too long to read "
            "at once.",
        },
        "limit": {
            "minimum": 1,
            "type": "integer",
            "description": "How many lines to read (default 2000). Only "
            "give it for files too long to read at "
            "once.",
        },
    },
    "required": ["file_path"],
    "type": "object",
}


class Read(Tool[ReadInput]):
    """Shows a text file with line numbers and remembers that it was read."""

    name = "Read"
    description = (
        "Reads a text file from the local filesystem.\n\n"
        "Usage:\n"
        "- file_path should be an absolute path; a relative path is taken from the current "
        "working directory.\n"
        f"- By default up to {DEFAULT_LIMIT} lines are read from the start of the file. For "
        "long files give offset (1-based line number) and limit to read a part; otherwise "
        "read the whole file.\n"
        f"- Lines longer than {MAX_LINE_CHARS} characters are truncated.\n"
        "- Output is in `cat -n` format: the line number, a tab, then the line. The number and "
        "tab are not part of the file: never copy them into Edit's old_string or new_string.\n"
        "- You must Read a file before you Edit or overwrite it with Write; if it changes on "
        "disk afterwards, Read it again.\n"
        "- Only text files are supported: images, PDFs and other binary files are refused.\n"
        "- To list a directory use Glob, or `ls` via Bash; Read only reads files.\n"
        "- Reading several files you may need is best done with several Read calls in one "
        "message."
    )
    Input = ReadInput
    static_schema = (ReadInput, INPUT_SCHEMA)
    kind = "read"
    concurrency_safe = True

    def permission_target(self, params: ReadInput, ctx: ToolContext) -> str | None:
        """The absolute path of the file."""
        return target_path(params.file_path, ctx)

    async def call(self, params: ReadInput, ctx: ToolContext) -> ToolResult:
        """Read the requested lines and record the file's mtime in ``ctx.files``."""
        path = resolve_file_path(params.file_path, ctx)
        if isinstance(path, ToolResult):
            return path
        if os.path.isdir(path):
            return tool_error(
                f"{path} is a directory, not a file. Use Glob to find files in it, or run "
                "`ls` via Bash to list it."
            )
        if not os.path.exists(path):
            return missing_file_error(path, ctx)
        if not os.path.isfile(path):
            # A FIFO or device would block the read for ever.
            return tool_error(f"{path} is not a regular file (a pipe, socket or device)")
        start = max(params.offset or 1, 1)
        limit = params.limit or DEFAULT_LIMIT
        try:
            # The total line count may mean scanning a large file: keep the loop free.
            result, mtime_ns = await asyncio.to_thread(_read_text, path, start, limit)
        except OSError as exc:
            return tool_error(f"Cannot read {path}: {exc.strerror or exc}")
        if mtime_ns is not None:
            ctx.files.seen[path] = mtime_ns
        return result


def _read_text(path: str, start: int, limit: int) -> tuple[ToolResult, int | None]:
    """Lines ``start .. start+limit-1`` of ``path``; the mtime is None when nothing was shown."""
    with open(path, "rb") as f:
        # The mtime before reading: a change during the read then shows up as "modified".
        mtime_ns = os.fstat(f.fileno()).st_mtime_ns
        head = f.read(SNIFF_BYTES)
        if looks_binary(head, partial=len(head) == SNIFF_BYTES):
            return (
                tool_error(
                    f"{path} looks like a binary file; Read only shows text files. "
                    "Images and PDFs are not supported yet."
                ),
                None,
            )
        if not head:
            note = "<system-reminder>Warning: the file exists but the contents are empty."
            return ToolResult(note + "</system-reminder>"), mtime_ns
        f.seek(0)
        shown: list[str] = []
        total = 0
        for line in _iter_lines(f):
            total += 1
            if total >= start:
                # A UTF-8 byte order mark is encoding, not content.
                shown.append(line.removeprefix("\ufeff") if total == 1 else line)
                if len(shown) == limit:
                    total += _count_lines(f)
                    break
    if not shown:
        # Not recorded as read: the model has seen none of the content.
        return (
            ToolResult(
                "<system-reminder>Warning: the file exists but is shorter than the provided "
                f"offset ({start}). The file has {total} lines.</system-reminder>"
            ),
            None,
        )
    text = number_lines(shown, start)
    last = start + len(shown) - 1
    if start > 1 or last < total:
        text += (
            f"\n\n<system-reminder>Showing lines {start}-{last} of {total}. Use offset and "
            "limit to read other parts.</system-reminder>"
        )
    data = {"filePath": path, "startLine": start, "numLines": len(shown), "totalLines": total}
    return ToolResult(text, data=data), mtime_ns


def _iter_lines(f: BinaryIO) -> Iterable[str]:
    """Decoded lines without their line ending; huge lines are cut without loading them.

    Reading a bounded prefix per line keeps memory small on minified or generated files whose
    single "line" can be megabytes long.
    """
    cap = MAX_LINE_CHARS * 4 + 4  # enough bytes for MAX_LINE_CHARS characters of UTF-8
    while True:
        raw = f.readline(cap)
        if not raw:
            return
        capped = len(raw) == cap and not raw.endswith(b"\n")
        if not capped:
            yield raw.decode("utf-8", errors="replace").removesuffix("\n").removesuffix("\r")
            continue
        while (rest := f.readline(_CHUNK)) and not rest.endswith(b"\n"):
            pass  # skip the rest of the over-long line
        # "ignore": the cap may have split a multi-byte character.
        line = raw.decode("utf-8", errors="ignore")
        yield line if len(line) > MAX_LINE_CHARS else line + LINE_TRUNCATED


def _count_lines(f: BinaryIO) -> int:
    """Lines from the current position to the end, counted without decoding them."""
    count = 0
    last = b"\n"
    while chunk := f.read(_CHUNK):
        count += chunk.count(b"\n")
        last = chunk[-1:]
    return count + (last != b"\n")  # a final line without a newline counts too
