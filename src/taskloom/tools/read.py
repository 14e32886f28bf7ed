"""The Read tool, and the path and read-before-write helpers that Write and Edit share.

Read shows a text file the way ``cat -n`` does (within the bounds of :mod:`._text`), an image
as an image block (:mod:`._media`), a PDF's pages as text (:mod:`._pdf`) and a notebook's cells
(:mod:`._notebook`), and records the file's mtime in ``ctx.files.seen``; Write, Edit and
NotebookEdit refuse to touch an existing file that is not recorded there or whose mtime has
moved since, so the model never overwrites changes it has not seen.
"""

from __future__ import annotations

import asyncio
import io
import os
from typing import TYPE_CHECKING, Any, ClassVar

from taskloom.tools._text import (
    CHARS_PER_TOKEN,
    DEFAULT_LIMIT,
    DEFAULT_READ_MAX_TOKENS,
    MAX_FILE_BYTES,
    MAX_IMAGE_SIDE,
    MAX_PAGES_PER_CALL,
    MAX_PAGES_WITHOUT_RANGE,
    SNIFF_BYTES,
    looks_binary,
    page_text,
    read_max_tokens,
    read_text,
)
from taskloom.tools._text import number_lines as number_lines  # Edit's snippets use it
from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.tools.backends import TextFiles
    from taskloom.tools.inputs.read import ReadInput


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
    import difflib  # only a missing file's error suggests names

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


#: Grep cuts the lines it shows at this many characters (Read shows lines whole, within its
#: output cap).
MAX_LINE_CHARS = 2000
LINE_TRUNCATED = " [... line truncated]"


def truncate_line(line: str) -> str:
    """Cut a line longer than :data:`MAX_LINE_CHARS`, marking the cut."""
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + LINE_TRUNCATED


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
        "pages": {
            "type": "string",
            "description": 'PDF files only: the pages to read, e.g. "3", "1-5" or "2,4-6" '
            "(1-based; at most 20 a call). Required for a PDF of more than 10 pages.",
        },
    },
    "required": ["file_path"],
    "type": "object",
}


class Read(Tool["ReadInput"]):
    """Shows a text file with line numbers, an image, or a PDF's text; remembers the read."""

    name = "Read"
    description = (
        "Reads a file from the local filesystem: text files, images, PDFs and Jupyter "
        "notebooks.\n\n"
        "Usage:\n"
        "- file_path should be an absolute path; a relative path is taken from the current "
        "working directory.\n"
        f"- By default up to {DEFAULT_LIMIT} lines are read from the start of the file. For "
        "long files give offset (1-based line number) and limit to read a part; otherwise "
        "read the whole file.\n"
        f"- A file over {MAX_FILE_BYTES // 1024} KB cannot be read whole: give offset and "
        "limit, or search it with Grep.\n"
        f"- A result is capped at about {DEFAULT_READ_MAX_TOKENS:,} tokens: a longer read stops "
        "at the end of a line and its last line says the offset to read on from. Lines are "
        "shown whole (only a line longer than the whole cap is cut).\n"
        "- Output is in `cat -n` format: the line number, a tab, then the line. The number and "
        "tab are not part of the file: never copy them into Edit's old_string or new_string.\n"
        "- Jupyter notebooks (.ipynb) are shown whole: every cell with its outputs (text and "
        "images).\n"
        "- Images (PNG, JPEG, GIF, WebP) are shown to you as images, up to 5 MB in base64 and "
        f"{MAX_IMAGE_SIDE} pixels a side.\n"
        '- PDFs are read as text, page by page: give pages ("3", "1-5", "2,4-6"; at most '
        f"{MAX_PAGES_PER_CALL} a call). A PDF of more than {MAX_PAGES_WITHOUT_RANGE} pages "
        "must be read by pages. A page without a text layer (a scan) is said to have no text.\n"
        "- You must Read a file before you Edit or overwrite it with Write; if it changes on "
        "disk afterwards, Read it again.\n"
        "- Other binary files are refused.\n"
        "- To list a directory use Glob, or `ls` via Bash; Read only reads files.\n"
        "- Reading several files you may need is best done with several Read calls in one "
        "message."
    )
    input_model = "taskloom.tools.inputs.read:ReadInput"
    static_schema = (input_model, INPUT_SCHEMA)
    kind = "read"
    concurrency_safe = True
    #: Bounded by its own token cap (a setting may raise it): never saved to a file.
    max_result_chars: ClassVar[int | None] = None

    def permission_target(self, params: ReadInput, ctx: ToolContext) -> str | None:
        """The absolute path of the file."""
        return target_path(params.file_path, ctx)

    async def call(self, params: ReadInput, ctx: ToolContext) -> ToolResult:
        """Read the file (text, image or PDF) and record its mtime in ``ctx.files``."""
        path = resolve_file_path(params.file_path, ctx)
        if isinstance(path, ToolResult):
            return path
        if os.path.isdir(path):
            return tool_error(
                f"{path} is a directory, not a file. Use Glob to find files in it, or run "
                "`ls` via Bash to list it."
            )
        served = await served_by(ctx, path) if params.pages is None else None
        if served is not None:
            return await _read_served(served, path, params, ctx)
        if not os.path.exists(path):
            return missing_file_error(path, ctx)
        if not os.path.isfile(path):
            # A FIFO or device would block the read for ever.
            return tool_error(f"{path} is not a regular file (a pipe, socket or device)")
        max_tokens = read_max_tokens(ctx.settings)
        if isinstance(max_tokens, str):
            return tool_error(max_tokens)
        try:
            # Scanning a large file, encoding an image or parsing a PDF: keep the loop free.
            result, mtime_ns = await asyncio.to_thread(_read, path, params, max_tokens)
        except OSError as exc:
            return tool_error(f"Cannot read {path}: {exc.strerror or exc}")
        if mtime_ns is not None:
            ctx.files.seen[path] = mtime_ns
        return result


async def served_by(ctx: ToolContext, path: str) -> TextFiles | None:
    """Who holds the text of ``path`` when not the local disk (None: the disk).

    An editor, when the session has one (:mod:`taskloom.tools.backends`). Read, Write and
    Edit ask alike, so a file is always read and written on the same side.
    """
    served = ctx.text_files
    if served is None or not served.serves(path):
        return None
    return None if await asyncio.to_thread(_kept_local, path) else served


def _kept_local(path: str) -> bool:
    """Whether a file served by an editor is still read from the disk (the editor holds text).

    Notebooks, images, PDFs and other binary files are shown from the disk as they always
    are; so is what is not a regular file, which Read refuses.
    """
    from taskloom.tools._media import sniff_image
    from taskloom.tools._notebook import is_notebook
    from taskloom.tools._pdf import is_pdf

    if is_notebook(path):
        return True
    if not os.path.lexists(path):
        return False  # a new buffer the editor has not saved yet
    if not os.path.isfile(path):
        return True  # opening a FIFO would block
    try:
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError:
        return True  # the disk's error is the one to tell
    binary = looks_binary(head, partial=len(head) == SNIFF_BYTES)
    return sniff_image(head) is not None or binary or is_pdf(path, head, binary=binary)


async def _read_served(
    files: TextFiles, path: str, params: ReadInput, ctx: ToolContext
) -> ToolResult:
    """Read a text file the editor holds: the same lines, bounds and result as from the disk."""
    from taskloom.tools.backends import text_version  # only an editor's files need it

    try:
        text = await files.read(path)
    except OSError as exc:
        return tool_error(f"Cannot read {path}: {exc.strerror or exc}")
    if text is None:
        return missing_file_error(path, ctx)
    max_tokens = read_max_tokens(ctx.settings)
    if isinstance(max_tokens, str):
        return tool_error(max_tokens)
    data = text.encode("utf-8", "replace")
    start = max(params.offset or 1, 1)
    limit = params.limit or DEFAULT_LIMIT
    whole = params.offset is None and params.limit is None
    result, version = await asyncio.to_thread(
        page_text, path, io.BytesIO(data), len(data), text_version(text), start, limit,
        max_tokens, whole,
    )  # fmt: skip
    if version is not None:
        ctx.files.seen[path] = version
    return result


def _read(path: str, params: ReadInput, max_tokens: int) -> tuple[ToolResult, int | None]:
    """The file as text, an image or a PDF's pages, by what its first bytes say it is."""
    # The image, PDF and notebook readers are loaded at the first Read, not when it is offered.
    from taskloom.tools._media import image_extension, read_image, sniff_image
    from taskloom.tools._notebook import is_notebook, read_notebook
    from taskloom.tools._pdf import is_pdf, read_pdf

    with open(path, "rb") as f:
        head = f.read(SNIFF_BYTES)
    image = sniff_image(head)
    binary = looks_binary(head, partial=len(head) == SNIFF_BYTES)
    pdf = image is None and is_pdf(path, head, binary=binary)
    if params.pages is not None and not pdf:
        return tool_error("pages is for PDF files only; use offset and limit for text."), None
    if image is not None:
        return read_image(path, image)
    if not pdf and is_notebook(path):
        # The whole notebook, cell by cell (offset and limit do not apply, as in Claude Code).
        return read_notebook(path, max_tokens * CHARS_PER_TOKEN)
    if pdf:
        if params.offset is not None or params.limit is not None:
            return tool_error("offset and limit are for text files; give pages for a PDF."), None
        return read_pdf(path, params.pages, max_tokens)
    named = image_extension(path)
    if named is not None and binary:
        return (
            tool_error(
                f"{path} is named like a {named} image but is not one of the images Read "
                "shows (PNG, JPEG, GIF or WebP, recognised by their first bytes)."
            ),
            None,
        )
    start = max(params.offset or 1, 1)
    limit = params.limit or DEFAULT_LIMIT
    whole = params.offset is None and params.limit is None
    return read_text(path, start, limit, max_tokens, whole=whole)
