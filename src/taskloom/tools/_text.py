"""Text files for Read: ``cat -n`` lines, within the size and output bounds.

Two bounds, as the Read models were trained on has them:

- a file over :data:`MAX_FILE_BYTES` is not read whole: without ``offset`` or ``limit`` it is
  refused, naming its size and how to page;
- a result holds at most ``readMaxTokens`` tokens (default 25,000), estimated as one token
  every :data:`CHARS_PER_TOKEN` characters. It ends at a line boundary, with a note naming the
  ``offset`` to read on from. Lines are shown whole; only a single line longer than the whole
  cap is cut (the cut is said).
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO

from taskloom.settings import whole_number
from taskloom.tools import responses
from taskloom.tools.base import ToolResult, tool_error

DEFAULT_LIMIT = 2000
#: Largest text file read without offset or limit.
MAX_FILE_BYTES = 256 * 1024
DEFAULT_READ_MAX_TOKENS = 25_000
READ_MAX_TOKENS_ENV = "CLAUDE_CODE_FILE_READ_MAX_OUTPUT_TOKENS"
READ_MAX_TOKENS_SETTING = "readMaxTokens"
#: The token estimate: characters divided by this (English text and code average about 4).
CHARS_PER_TOKEN = 4
#: Characters of the budget kept for the note at the end of a result.
NOTE_ROOM = 400
#: How much of a file is sniffed for NUL bytes and UTF-8 validity.
SNIFF_BYTES = 8192
# Read's bounds for PDFs and images (:mod:`~taskloom.tools._pdf`, :mod:`~taskloom.tools._media`)
# are here, with the text bounds, so that describing Read loads neither reader.
#: Most pages of a PDF read in one call.
MAX_PAGES_PER_CALL = 20
#: A PDF of more pages than this must be read by pages.
MAX_PAGES_WITHOUT_RANGE = 10
#: The Messages API refuses images with a side longer than this, in pixels.
MAX_IMAGE_SIDE = 8000
_CHUNK = 1 << 16


def read_max_tokens(settings: Mapping[str, Any]) -> int | str:
    """The cap on a Read result in tokens: the environment, else the setting, else 25,000.

    Returns:
        The cap, or what is wrong with the value given (naming where it came from).
    """
    # Below this the note at the end would not fit.
    low = 2 * NOTE_ROOM // CHARS_PER_TOKEN
    value = whole_number(
        settings, READ_MAX_TOKENS_ENV, READ_MAX_TOKENS_SETTING, unit="tokens", low=low
    )
    return DEFAULT_READ_MAX_TOKENS if value is None else value


def budget_chars(max_tokens: int) -> int:
    """The characters of file content a result of ``max_tokens`` tokens can hold."""
    return max_tokens * CHARS_PER_TOKEN - NOTE_ROOM


def format_size(size: int) -> str:
    """``300KB``, ``256KB``, ``1.5KB``: the form of the "exceeds maximum" message."""
    return f"{size / 1024:.1f}".removesuffix(".0") + "KB"


def number_lines(lines: Iterator[str] | list[str], first: int) -> str:
    """``cat -n`` style: the line number right-aligned in 6 columns, a tab, the line."""
    return "\n".join(f"{no:>6}\t{line}" for no, line in enumerate(lines, first))


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


def too_large(path: str, size: int) -> ToolResult:
    """The refusal of a file over :data:`MAX_FILE_BYTES` read without offset or limit."""
    return tool_error(
        f"File content ({format_size(size)}) exceeds maximum allowed size "
        f"({format_size(MAX_FILE_BYTES)}). Please use offset and limit parameters to read "
        "specific portions of the file, or use the Grep tool to search for specific content."
    )


def read_text(
    path: str, start: int, limit: int, max_tokens: int, *, whole: bool
) -> tuple[ToolResult, int | None]:
    """Lines ``start .. start+limit-1`` of ``path`` within the output cap.

    Args:
        path: An absolute path.
        start: The first line (1-based).
        limit: How many lines at most.
        max_tokens: The output cap in (estimated) tokens.
        whole: Neither offset nor limit was given: a file over the size bound is refused.

    Returns:
        The result, and the file's mtime; None when nothing of the file was shown.
    """
    with open(path, "rb") as f:
        # The mtime before reading: a change during the read then shows up as "modified".
        stat = os.fstat(f.fileno())
        return page_text(path, f, stat.st_size, stat.st_mtime_ns, start, limit, max_tokens, whole)


def page_text(
    path: str,
    f: BinaryIO,
    size: int,
    version: int,
    start: int,
    limit: int,
    max_tokens: int,
    whole: bool,
) -> tuple[ToolResult, int | None]:
    """:func:`read_text` of the bytes of ``f`` (``size`` of them), whatever holds them.

    Args:
        path: The file's absolute path (for the messages).
        f: Its content, at its start.
        size: Its size in bytes.
        version: What read-before-write records once it is shown (its mtime, or the digest
            of an editor's text).
        start: The first line (1-based).
        limit: How many lines at most.
        max_tokens: The output cap in (estimated) tokens.
        whole: Neither offset nor limit was given: a file over the size bound is refused.

    Returns:
        The result, and ``version``; None when nothing of the file was shown.
    """
    head = f.read(SNIFF_BYTES)
    if looks_binary(head, partial=len(head) == SNIFF_BYTES):
        return (
            tool_error(
                f"{path} looks like a binary file; Read shows text files, images (PNG, "
                "JPEG, GIF, WebP) and PDFs only."
            ),
            None,
        )
    if not head:
        note = "<system-reminder>Warning: the file exists but the contents are empty."
        empty = responses.read_text(path, "", start_line=1, num_lines=0, total_lines=0)
        return ToolResult(note + "</system-reminder>", response=empty), version
    if whole and size > MAX_FILE_BYTES:
        return too_large(path, size), None
    f.seek(0)
    page = _Page(start, limit, budget_chars(max_tokens))
    page.take(f)
    if not page.shown:
        # Not recorded as read: the model has seen none of the content.
        return (
            ToolResult(
                "<system-reminder>Warning: the file exists but is shorter than the provided "
                f"offset ({start}). The file has {page.total} lines.</system-reminder>"
            ),
            None,
        )
    text = number_lines(page.shown, start) + page.note(max_tokens)
    data = {
        "filePath": path,
        "startLine": start,
        "numLines": len(page.shown),
        "totalLines": page.total,
    }
    if page.capped:
        data["nextOffset"] = page.last + 1
    response = responses.read_text(
        path,
        "\n".join(page.shown),
        start_line=start,
        num_lines=len(page.shown),
        total_lines=page.total,
    )
    return ToolResult(text, data=data, response=response), version


class _Page:
    """The lines one read shows: from ``start``, at most ``limit``, within ``budget`` chars."""

    def __init__(self, start: int, limit: int, budget: int) -> None:
        self.start = start
        self.limit = limit
        self.budget = budget
        self.shown: list[str] = []
        self.total = 0
        #: Stopped by the output cap (before line ``last + 1``).
        self.capped = False
        #: (line number, its length said) of a line longer than the whole cap, shown cut.
        self.cut: tuple[int, str] | None = None

    @property
    def last(self) -> int:
        """The number of the last line shown."""
        return self.start + len(self.shown) - 1

    def take(self, f: BinaryIO) -> None:
        """Read the lines to show from ``f``, then count the rest."""
        used = 0
        for line, cut_size in _iter_lines(f, self.budget):
            self.total += 1
            if self.total < self.start:
                continue
            if self.total == 1:
                line = line.removeprefix("\ufeff")  # a byte order mark is encoding
            cost = len(f"{self.total:>6}\t") + len(line) + 1
            if used + cost > self.budget:
                self.capped = True
                if self.shown:
                    # The line is not shown: the rest of the file is counted from after it.
                    self.total += _count_lines(f)
                    return
                # A single line longer than the whole cap: the one case that is cut.
                keep = max(self.budget - cost + len(line), 0)
                size = f"{len(line):,} characters" if cut_size is None else f"{cut_size:,} bytes"
                self.cut = (self.total, size)
                line = line[:keep]
            self.shown.append(line)
            used += cost
            if len(self.shown) == self.limit or self.capped:
                self.total += _count_lines(f)
                return

    def note(self, max_tokens: int) -> str:
        """The reminder that ends the result ("" when the whole file was shown)."""
        first, last, total = self.start, self.last, self.total
        if not self.capped and first == 1 and last == total:
            return ""
        if not self.capped:
            said = f"Showing lines {first}-{last} of {total}. "
            said += "Use offset and limit to read other parts."
        else:
            said = (
                f"Showing lines {first}-{last} of {total}: the output is capped at about "
                f"{max_tokens:,} tokens."
            )
            if self.cut is not None:
                said += (
                    f" Line {self.cut[0]} ({self.cut[1]}) is longer than the cap by itself and "
                    "is cut; use Grep, or Bash (e.g. `cut -c`), to see the rest of it."
                )
            if last < total:
                said += f" To read on, call Read with offset={last + 1}."
        return f"\n\n<system-reminder>{said}</system-reminder>"


def _iter_lines(f: BinaryIO, budget: int) -> Iterator[tuple[str, int | None]]:
    """Decoded lines without their line ending, each with its size in bytes if it was cut.

    A line is read up to the bytes that can hold ``budget`` characters; a longer one (which
    cannot fit the output anyway) yields that prefix and the rest is skipped, so memory stays
    bounded on minified or generated files whose one "line" can be megabytes long.
    """
    cap = budget * 4 + 4  # enough bytes for budget characters of UTF-8
    while True:
        raw = f.readline(cap)
        if not raw:
            return
        if len(raw) < cap or raw.endswith(b"\n"):
            yield raw.decode("utf-8", errors="replace").removesuffix("\n").removesuffix("\r"), None
            continue
        size = len(raw)
        while rest := f.readline(_CHUNK):  # skip the rest of the over-long line
            size += len(rest.removesuffix(b"\n").removesuffix(b"\r"))
            if rest.endswith(b"\n"):
                break
        # "ignore": the cap may have split a multi-byte character.
        yield raw.decode("utf-8", errors="ignore"), size


def _count_lines(f: BinaryIO) -> int:
    """Lines from the current position to the end, counted without decoding them."""
    count = 0
    last = b"\n"
    while chunk := f.read(_CHUNK):
        count += chunk.count(b"\n")
        last = chunk[-1:]
    return count + (last != b"\n")  # a final line without a newline counts too
