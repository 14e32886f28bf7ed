"""The Write tool: create a file, or replace one that was Read first and has not changed since."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from taskloom.tools import responses
from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error
from taskloom.tools.read import check_fresh, resolve_file_path, served_by, target_path

if TYPE_CHECKING:
    from taskloom.tools.backends import TextFiles
    from taskloom.tools.inputs.write import WriteInput


#: :class:`WriteInput`'s closed schema written out, so that offering the tool does not build
#: the model (it is built when a call is first validated); tests check it is the one
#: generated, byte for byte.
INPUT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`Write`.",
    "properties": {
        "file_path": {"description": "The absolute path of the file to write.", "type": "string"},
        "content": {"description": "The complete new content of the file.", "type": "string"},
    },
    "required": ["file_path", "content"],
    "type": "object",
}


class Write(Tool["WriteInput"]):
    """Creates or overwrites a whole file."""

    name = "Write"
    description = (
        "Writes a file to the local filesystem, replacing it entirely if it exists.\n\n"
        "Usage:\n"
        "- file_path should be an absolute path; a relative path is taken from the current "
        "working directory. Missing parent directories are created.\n"
        "- Overwriting an existing file requires that you Read it first in this conversation "
        "and that it has not changed since; otherwise the call fails.\n"
        "- To change part of an existing file, prefer Edit: it sends only the changed text and "
        "cannot lose the rest of the file by accident.\n"
        "- An existing file that uses CRLF line endings keeps them.\n"
        "- Do not create documentation or README files unless asked to."
    )
    input_model = "taskloom.tools.inputs.write:WriteInput"
    static_schema = (input_model, INPUT_SCHEMA)
    kind = "edit"

    def permission_target(self, params: WriteInput, ctx: ToolContext) -> str | None:
        """The absolute path of the file."""
        return target_path(params.file_path, ctx)

    async def call(self, params: WriteInput, ctx: ToolContext) -> ToolResult:
        """Write the file, insisting on a fresh Read before replacing an existing one."""
        path = resolve_file_path(params.file_path, ctx)
        if isinstance(path, ToolResult):
            return path
        if os.path.isdir(path):
            return tool_error(f"{path} is a directory; Write only writes files.")
        served = await served_by(ctx, path)
        if served is not None:
            return await _write_served(served, path, params, ctx)
        content = params.content
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            stat = None
        except OSError as exc:
            return tool_error(f"Cannot write {path}: {exc.strerror or exc}")
        original: str | None = None
        try:
            if stat is None:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                # "x": a file that appears between the check and now was not read by us.
                mtime_ns = _write(path, content, "xb", None)
            else:
                stale = check_fresh(path, stat.st_mtime_ns, ctx, "writing to")
                if stale is not None:
                    return stale
                if ctx.hook_response:  # only a hook reads it (see _earlier)
                    original = _earlier(path, stat.st_size)
                if _uses_crlf(path) and "\r\n" not in content:
                    # The model saw the file without its \r (Read strips them): keep the
                    # file's convention rather than silently converting it to LF.
                    content = content.replace("\n", "\r\n")
                mtime_ns = _write(path, content, "wb", stat)
        except FileExistsError:
            return tool_error(f"{path} was created by someone else just now. Read it first.")
        except OSError as exc:
            return tool_error(f"Cannot write {path}: {exc.strerror or exc}")
        ctx.files.seen[path] = mtime_ns
        return _written(path, params, ctx, original, created=stat is None)


async def _write_served(
    files: TextFiles, path: str, params: WriteInput, ctx: ToolContext
) -> ToolResult:
    """Write a file the editor holds: the same checks and result as on the disk."""
    from taskloom.tools.backends import text_version  # only an editor's files need it

    try:
        current = await files.read(path)
    except OSError as exc:
        return tool_error(f"Cannot write {path}: {exc.strerror or exc}")
    content = params.content
    original: str | None = None
    if current is not None:
        stale = check_fresh(path, text_version(current), ctx, "writing to")
        if stale is not None:
            return stale
        if ctx.hook_response and len(current) <= responses.MAX_ORIGINAL_CHARS:
            original = current
        if _crlf_head(current[:8192].encode("utf-8", "replace")) and "\r\n" not in content:
            content = content.replace("\n", "\r\n")  # as on the disk: see Write.call
    try:
        await files.write(path, content)
    except OSError as exc:
        return tool_error(f"Cannot write {path}: {exc.strerror or exc}")
    ctx.files.seen[path] = text_version(content)
    return _written(path, params, ctx, original, created=current is None)


def _written(
    path: str, params: WriteInput, ctx: ToolContext, original: str | None, *, created: bool
) -> ToolResult:
    """What the model (and a PostToolUse hook) is told of a file written."""
    response = None
    if ctx.hook_response:
        response = responses.write(path, params.content, original=original, created=created)
    if created:
        return ToolResult(
            f"File created successfully at: {path}",
            data={"type": "create", "filePath": path},
            response=response,
        )
    return ToolResult(
        f"The file {path} has been updated successfully.",
        data={"type": "update", "filePath": path},
        response=response,
    )


def _earlier(path: str, size: int) -> str | None:
    """The file as text, for the hooks' ``originalFile`` (undecodable bytes replaced).

    None, unread, when its ``size`` in bytes is over what a response carries
    (:data:`~taskloom.tools.responses.MAX_ORIGINAL_CHARS`; UTF-8 takes a byte or more a
    character): a hook is not worth reading a huge file whole.
    """
    if size > responses.MAX_ORIGINAL_CHARS:
        return None
    with open(path, "rb") as f:
        return f.read().decode("utf-8", errors="replace")


def _write(path: str, content: str, mode: str, before: os.stat_result | None) -> int:
    """Write ``content`` as UTF-8 in place (keeping the file's inode and mode); its new mtime."""
    with open(path, mode) as f:
        f.write(content.encode("utf-8"))
        f.flush()
        return settled_mtime(f.fileno(), before)


def settled_mtime(fd: int, before: os.stat_result | None) -> int:
    """The mtime (ns) of a file just rewritten in place, moved on a second when it must be.

    Python's bytecode cache (and other build tools) judge a source unchanged by its mtime in
    whole seconds and its size. An agent edits and runs the tests well within a second: a
    rewrite of the same size in the same second as the old mtime would leave the old ``.pyc``
    in force, and the tests would run the old code. Such a rewrite gets the next second.

    Args:
        fd: The rewritten file, open.
        before: Its stat before the rewrite (None: it was just created).
    """
    after = os.fstat(fd)
    second = 10**9
    if (
        before is not None
        and after.st_size == before.st_size
        and after.st_mtime_ns // second <= before.st_mtime_ns // second
    ):
        moved = (before.st_mtime_ns // second + 1) * second
        os.utime(fd, ns=(after.st_atime_ns, moved))
        return moved
    return after.st_mtime_ns


def _uses_crlf(path: str) -> bool:
    """Whether the file's first line ends in CRLF (how editors decide a file's convention)."""
    with open(path, "rb") as f:
        return _crlf_head(f.read(8192))


def _crlf_head(head: bytes) -> bool:
    """Whether the first line of ``head`` ends in CRLF."""
    newline = head.find(b"\n")
    return newline > 0 and head[newline - 1 : newline] == b"\r"
