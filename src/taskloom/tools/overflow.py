"""One rule for tool results too large to show inline: saved to a file, previewed.

A result over its tool's inline limit is written to
``$TASKLOOM_HOME/sessions/<session>/tool-results/<tool_use_id>.txt`` (directory 0700, file
0600, created exclusively without following links) and the model gets, in the form the CLI
that inspired us shows it, where the whole of it is, its size and its first 2 KB::

    <persisted-output>
    Output too large (97.7KB). Full output saved to: /…/tool-results/toolu_01.txt

    Preview (first 2KB):
    …
    ...
    Read the rest with Read (offset and limit) or search it with Grep on that file.
    </persisted-output>

The Bash tool saves its output file by copying it (never read whole into memory); the engine
saves any other tool's text. Errors are not saved: their middle is cut
bounds them.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import stat
from pathlib import Path

from taskloom.settings import ensure_private_dir, session_dir

#: Inline limit (characters) of a tool that sets none of its own: MCP tools, library tools,
#: TaskOutput… — no result is unbounded.
DEFAULT_MAX_RESULT_CHARS = 100_000
#: How much of a saved result the model sees (bytes of UTF-8).
PREVIEW_BYTES = 2000
#: What a preview ends with: how to read on.
READ_ON = "Read the rest with Read (offset and limit) or search it with Grep on that file."

_SAFE_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def format_size(n: int) -> str:
    """A byte count as the CLI that inspired us writes it: ``512 bytes``, ``97.7KB``, ``2MB``."""
    if n < 1024:
        return f"{n} bytes"
    value = float(n)
    for unit in ("KB", "MB", "GB"):
        value /= 1024
        if value < 1024 or unit == "GB":
            break
    return f"{value:.1f}".removesuffix(".0") + unit


def preview(data: bytes, limit: int = PREVIEW_BYTES) -> tuple[str, bool]:
    """The first ``limit`` bytes of ``data`` as text, cut at a line end when one is past half.

    Returns:
        The preview and whether anything was left out.
    """
    if len(data) <= limit:
        return data.decode("utf-8", "replace").rstrip("\n"), False
    head = data[:limit]
    newline = head.rfind(b"\n")
    if newline > limit // 2:
        head = head[:newline]
    # A cut inside a multi-byte character drops that character, not the whole preview.
    return head.decode("utf-8", "ignore"), True


def persisted_message(path: Path, size: int, shown: str, more: bool) -> str:
    """What the model gets instead of a saved result."""
    return (
        "<persisted-output>\n"
        f"Output too large ({format_size(size)}). Full output saved to: {path}\n\n"
        f"Preview (first {format_size(PREVIEW_BYTES)}):\n"
        f"{shown}{chr(10) + '...' if more else ''}\n"
        f"{READ_ON}\n"
        "</persisted-output>"
    )


def results_dir(session_id: str, home: Path | None = None) -> Path:
    """Where a session's saved tool results go."""
    return session_dir(session_id, home) / "tool-results"


def _file_name(tool_use_id: str, n: int) -> str:
    # Ids come from the model: one that is not a plain name is replaced by its digest.
    base = tool_use_id if _SAFE_ID.fullmatch(tool_use_id) else _digest(tool_use_id)
    return f"{base}.txt" if n == 0 else f"{base}-{n}.txt"


def _digest(text: str) -> str:
    return "id-" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def _create(directory: Path, tool_use_id: str) -> tuple[Path, int]:
    """Create the result's file exclusively (another agent may have used the same id)."""
    ensure_private_dir(directory)
    for n in range(100):
        path = directory / _file_name(tool_use_id, n)
        try:
            return path, os.open(path, _OPEN_FLAGS, 0o600)
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, "too many results saved under this id", str(directory))


def save_text(text: str, directory: Path, tool_use_id: str) -> str:
    """Save ``text`` under ``directory`` and return the model's view of it.

    Raises:
        OSError: The file could not be written.
    """
    data = text.encode("utf-8", "replace")
    path, fd = _create(directory, tool_use_id)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    shown, more = preview(data)
    return persisted_message(path, len(data), shown, more)


def keep_text(text: str, directory: Path, tool_use_id: str) -> Path:
    """Save ``text`` under ``directory`` once, and return the file that holds it.

    A file saved earlier for ``tool_use_id`` with exactly this text is reused, not written
    again: what clears old results from a conversation may see the same result more than once.

    Raises:
        OSError: The file could not be written.
    """
    data = text.encode("utf-8", "replace")
    ensure_private_dir(directory)
    for n in range(100):
        path = directory / _file_name(tool_use_id, n)
        if _holds(path, data):
            return path
        try:
            fd = os.open(path, _OPEN_FLAGS, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        return path
    raise OSError(errno.EEXIST, "too many results saved under this id", str(directory))


def _holds(path: Path, data: bytes) -> bool:
    """Whether ``path`` is a regular file (not a link) holding exactly ``data``."""
    try:
        # Non-blocking: a FIFO planted there must not hang the caller.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as file:
        st = os.fstat(file.fileno())
        return stat.S_ISREG(st.st_mode) and st.st_size == len(data) and file.read() == data


def save_file(source: Path | str, directory: Path, tool_use_id: str) -> str:
    """Copy ``source`` (streaming) under ``directory`` and return the model's view of it.

    Raises:
        OSError: The file could not be read or written.
    """
    path, fd = _create(directory, tool_use_id)
    with open(source, "rb") as src, os.fdopen(fd, "wb") as out:
        head = src.read(PREVIEW_BYTES + 1)
        out.write(head)
        shutil.copyfileobj(src, out)
        size = out.tell()
    shown, more = preview(head)
    return persisted_message(path, size, shown, more or size > len(head))


def bounded(text: str, limit: int, directory: Path, tool_use_id: str) -> str:
    """``text`` if within ``limit`` characters, else saved and previewed.

    When it cannot be saved (a full disk), its first ``limit`` characters and a note: never
    the whole of it.
    """
    if len(text) <= limit:
        return text
    try:
        return save_text(text, directory, tool_use_id)
    except OSError as exc:
        return (
            f"{text[:limit]}\n\n[Output too large ({len(text):,} characters) and it could not "
            f"be saved ({exc.strerror or exc}): cut at {limit:,} characters]"
        )


__all__ = [
    "DEFAULT_MAX_RESULT_CHARS",
    "PREVIEW_BYTES",
    "bounded",
    "format_size",
    "keep_text",
    "persisted_message",
    "preview",
    "results_dir",
    "save_file",
    "save_text",
]
