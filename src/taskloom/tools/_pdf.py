"""PDFs for Read: the text of chosen pages, through pypdf (imported only when a PDF is read).

Pages are asked for as ``"3"``, ``"1-5"`` or ``"2,4-6"`` (1-based), at most
:data:`MAX_PAGES_PER_CALL` a call; a PDF longer than :data:`MAX_PAGES_WITHOUT_RANGE` pages must
be asked for by pages. The text is bounded like a text file's: pages are shown whole while
they fit the output cap, and the note at the end names the pages to read on with.
"""

from __future__ import annotations

import os
import re
from typing import Any

from taskloom.tools import responses
from taskloom.tools._text import MAX_PAGES_PER_CALL as MAX_PAGES_PER_CALL
from taskloom.tools._text import MAX_PAGES_WITHOUT_RANGE as MAX_PAGES_WITHOUT_RANGE
from taskloom.tools._text import budget_chars
from taskloom.tools.base import ToolResult, tool_error

_RANGE = re.compile(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?")


def is_pdf(path: str, head: bytes, *, binary: bool) -> bool:
    """A file with a PDF header (which may follow some junk), or a binary ``.pdf`` file.

    Args:
        path: Its path.
        head: Its first bytes.
        binary: Whether ``head`` is not text: a ``.pdf`` file that is text is read as text.
    """
    return b"%PDF-" in head[:1024] or (binary and path.lower().endswith(".pdf"))


def parse_pages(spec: str) -> list[int] | str:
    """The 1-based page numbers ``spec`` names, in order and once each; or what is wrong."""
    pages: list[int] = []
    for part in spec.split(","):
        found = _RANGE.fullmatch(part)
        if found is None:
            example = '"3", "1-5" or "2,4-6"'
            return f"pages must be page numbers and ranges like {example}, got {spec!r}"
        first = int(found.group(1))
        last = int(found.group(2) or first)
        if first < 1 or last < first:
            return f"pages: {part.strip()!r} is not a range of pages (they count from 1)"
        if last - first >= MAX_PAGES_PER_CALL:
            last = first + MAX_PAGES_PER_CALL  # more than allowed anyway; refused below
        pages.extend(p for p in range(first, last + 1) if p not in pages)
        if len(pages) > MAX_PAGES_PER_CALL:
            return (
                f"pages {spec!r} asks for more than {MAX_PAGES_PER_CALL} pages; Read takes at "
                f"most {MAX_PAGES_PER_CALL} a call"
            )
    return pages


def page_spec(pages: list[int]) -> str:
    """``[1, 2, 3, 7]`` as ``"1-3,7"``."""
    parts: list[str] = []
    start = prev = pages[0]
    for page in [*pages[1:], None]:
        if page is not None and page == prev + 1:
            prev = page
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if page is not None:
            start = prev = page
    return ",".join(parts)


def read_pdf(path: str, spec: str | None, max_tokens: int) -> tuple[ToolResult, int | None]:
    """The text of the pages ``spec`` names within the output cap; the file's mtime.

    Args:
        path: An absolute path.
        spec: The ``pages`` asked for; None for every page of a PDF that is short enough.
        max_tokens: The output cap in (estimated) tokens.

    Returns:
        The result, and the file's mtime; None when nothing of the file was shown.
    """
    wanted = parse_pages(spec) if spec is not None else None
    if isinstance(wanted, str):
        return tool_error(wanted), None
    try:
        import pypdf
    except ImportError:
        return tool_error("Reading PDFs needs the pypdf package (pip install pypdf)."), None
    with open(path, "rb") as f:
        mtime_ns = os.fstat(f.fileno()).st_mtime_ns
        try:
            reader = pypdf.PdfReader(f)
            if reader.is_encrypted and not reader.decrypt(""):
                return tool_error(f"{path} is an encrypted PDF; Read cannot open it."), None
            count = len(reader.pages)
        except (pypdf.errors.PyPdfError, ValueError, KeyError, OSError) as exc:
            return tool_error(f"{path} is not a PDF Read can open: {exc}"), None
        if wanted is None:
            if count > MAX_PAGES_WITHOUT_RANGE:
                return (
                    tool_error(
                        f"This PDF has {count} pages, too many to read at once (at most "
                        f"{MAX_PAGES_WITHOUT_RANGE} without pages). Give pages to read some of "
                        f'them, e.g. pages="1-5"; at most {MAX_PAGES_PER_CALL} pages a call.'
                    ),
                    None,
                )
            wanted = list(range(1, count + 1))
        past = [p for p in wanted if p > count]
        if past:
            return tool_error(f"pages: page {past[0]} is past the end; the PDF has {count}."), None
        if not wanted:
            note = f"<system-reminder>{path} is a PDF with no pages.</system-reminder>"
            return ToolResult(note), None
        return _pages_text(path, reader, wanted, count, max_tokens), mtime_ns


def _page_text(reader: Any, page: int) -> str:
    try:
        text: str = reader.pages[page - 1].extract_text() or ""
    except Exception as exc:  # pypdf raises many kinds on a damaged page: say it, go on
        return f"(page {page} could not be read: {type(exc).__name__}: {exc})"
    if not text.strip():
        return f"(page {page} has no text; it may be a scanned image)"
    return text.strip("\n")


def _pages_text(
    path: str, reader: Any, wanted: list[int], count: int, max_tokens: int
) -> ToolResult:
    budget = budget_chars(max_tokens)
    chunks: list[str] = []
    used = 0
    shown: list[int] = []
    note = ""
    for page in wanted:
        chunk = f"--- Page {page} of {count} ---\n{_page_text(reader, page)}"
        cost = len(chunk) + 2
        if used + cost > budget:
            rest = wanted[len(shown) :]
            if not shown:  # one page longer than the whole cap: the one case that is cut
                chunk = chunk[: max(budget - 2, 0)]
                shown.append(page)
                chunks.append(chunk)
                note = (
                    f"Page {page}'s text is longer than the output cap and was cut after "
                    f"{len(chunk):,} characters."
                )
                rest = rest[1:]
            if rest:
                note += (
                    f" The output is capped at about {max_tokens:,} tokens: to read on, call "
                    f'Read with pages="{page_spec(rest)}".'
                )
            break
        chunks.append(chunk)
        shown.append(page)
        used += cost
    text = "\n\n".join(chunks)
    if note:
        text += f"\n\n<system-reminder>{note.strip()}</system-reminder>"
    data = {"type": "pdf", "filePath": path, "numPages": count, "pages": shown}
    size = os.path.getsize(path)
    response = responses.read_pdf(path, original_size=size, pages=shown, text="\n\n".join(chunks))
    return ToolResult(text, data=data, response=response)
