"""The Edit tool: exact string replacement in a file that was Read first."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from taskloom.tools import responses
from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error
from taskloom.tools.read import (
    check_fresh,
    missing_file_error,
    number_lines,
    resolve_file_path,
    served_by,
    target_path,
)
from taskloom.tools.write import settled_mtime

if TYPE_CHECKING:
    from taskloom.tools.backends import TextFiles
    from taskloom.tools.inputs.edit import EditInput

#: Lines of context shown around the edited region.
SNIPPET_CONTEXT = 4
#: Longest edited region shown in full in the result.
SNIPPET_MAX_LINES = 30
_LINE_NUMBER_PREFIX = re.compile(r"^\s*\d+\t", re.MULTILINE)


#: :class:`EditInput`'s closed schema written out, so that offering the tool does not build
#: the model (it is built when a call is first validated); tests check it is the one
#: generated, byte for byte.
INPUT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`Edit`.",
    "properties": {
        "file_path": {"description": "The absolute path of the file to modify.", "type": "string"},
        "old_string": {"description": "The exact text to replace.", "type": "string"},
        "new_string": {
            "description": "The text to put in its place (must differ).",
            "type": "string",
        },
        "replace_all": {
            "default": False,
            "description": "Replace every occurrence of old_string (default false).",
            "type": "boolean",
        },
    },
    "required": ["file_path", "old_string", "new_string"],
    "type": "object",
}


class Edit(Tool["EditInput"]):
    """Replaces an exact piece of text in a file."""

    name = "Edit"
    description = (
        "Performs an exact string replacement in a file.\n\n"
        "Usage:\n"
        "- You must Read the file in this conversation before editing it, and Read it again "
        "if it changed since; otherwise the edit fails.\n"
        "- old_string must match the file exactly, including whitespace and indentation. When "
        "copying from Read output, leave out the line-number prefix (spaces, number, tab): "
        "only what follows the tab is file content.\n"
        "- The edit fails if old_string is not found, or is found more than once. Then add "
        "surrounding lines to old_string until it is unique, or set replace_all to replace "
        "every occurrence (useful for renaming a variable).\n"
        "- new_string must differ from old_string.\n"
        "- An empty old_string creates the file with new_string as content when it does not "
        "exist yet.\n"
        "- Line endings are preserved: write \\n, a CRLF file stays CRLF.\n"
        "- Prefer editing existing files to creating new ones."
    )
    input_model = "taskloom.tools.inputs.edit:EditInput"
    static_schema = (input_model, INPUT_SCHEMA)
    kind = "edit"

    def permission_target(self, params: EditInput, ctx: ToolContext) -> str | None:
        """The absolute path of the file."""
        return target_path(params.file_path, ctx)

    async def call(self, params: EditInput, ctx: ToolContext) -> ToolResult:
        """Apply the replacement, or explain precisely why it cannot be applied."""
        path = resolve_file_path(params.file_path, ctx)
        if isinstance(path, ToolResult):
            return path
        if params.old_string == params.new_string:
            return tool_error("No changes to make: old_string and new_string are exactly the same.")
        if os.path.isdir(path):
            return tool_error(f"{path} is a directory; Edit only edits files.")
        served = await served_by(ctx, path)
        if served is not None:
            return await _edit_served(served, path, params, ctx)
        try:
            return _edit(path, params, ctx)
        except FileExistsError:
            return tool_error(f"{path} was created by someone else just now. Read it first.")
        except OSError as exc:
            return tool_error(f"Cannot edit {path}: {exc.strerror or exc}")


def _edit(path: str, params: EditInput, ctx: ToolContext) -> ToolResult:
    try:
        f = open(path, "r+b")  # noqa: SIM115 - held open across check, read and write
    except FileNotFoundError:
        if params.old_string:
            return missing_file_error(path, ctx)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "xb") as created:
            created.write(params.new_string.encode("utf-8"))
            created.flush()
            ctx.files.seen[path] = os.fstat(created.fileno()).st_mtime_ns
        return _created(path, params, ctx)
    with f:
        before = os.fstat(f.fileno())
        stale = check_fresh(path, before.st_mtime_ns, ctx, "editing")
        if stale is not None:
            return stale
        try:
            text = f.read().decode("utf-8")
        except UnicodeDecodeError:
            return tool_error(f"{path} is not UTF-8 text; Edit cannot change it safely.")
        edited = _edited(path, text, params, ctx)
        if isinstance(edited, ToolResult):
            return edited
        new_text, result = edited
        f.seek(0)
        f.write(new_text.encode("utf-8"))
        f.truncate()
        f.flush()
        ctx.files.seen[path] = settled_mtime(f.fileno(), before)
    return result


async def _edit_served(
    files: TextFiles, path: str, params: EditInput, ctx: ToolContext
) -> ToolResult:
    """Edit a file the editor holds: the same checks and result as on the disk."""
    from taskloom.tools.backends import text_version  # only an editor's files need it

    try:
        text = await files.read(path)
    except OSError as exc:
        return tool_error(f"Cannot edit {path}: {exc.strerror or exc}")
    if text is None:
        if params.old_string:
            return missing_file_error(path, ctx)
        new_text, result = params.new_string, _created(path, params, ctx)
    else:
        stale = check_fresh(path, text_version(text), ctx, "editing")
        if stale is not None:
            return stale
        edited = _edited(path, text, params, ctx)
        if isinstance(edited, ToolResult):
            return edited
        new_text, result = edited
    try:
        await files.write(path, new_text)
    except OSError as exc:
        return tool_error(f"Cannot edit {path}: {exc.strerror or exc}")
    ctx.files.seen[path] = text_version(new_text)
    return result


def _created(path: str, params: EditInput, ctx: ToolContext) -> ToolResult:
    """What the model (and a PostToolUse hook) is told of a file an empty old_string made."""
    response = None
    if ctx.hook_response:  # the shape only a hook reads
        response = responses.edit(
            path,
            "",
            params.new_string,
            original=None,
            updated=params.new_string,
            replace_all=params.replace_all,
        )
    return ToolResult(
        f"File created successfully at: {path}",
        data={"type": "create", "filePath": path},
        response=response,
    )


def _edited(
    path: str, text: str, params: EditInput, ctx: ToolContext
) -> tuple[str, ToolResult] | ToolResult:
    """The file's new text and what the model is told of it, or why it cannot be edited."""
    replaced = _replace(text, params, path)
    if isinstance(replaced, ToolResult):
        return replaced
    new_text, first, new, count = replaced
    start_line = new_text.count("\n", 0, first) + 1
    snippet = _snippet(new_text, start_line, start_line + new.count("\n"))
    what = f" All {count} occurrences were replaced." if params.replace_all else ""
    return new_text, ToolResult(
        f"The file {path} has been updated.{what} Here's the result of running `cat -n` on a "
        f"snippet of the edited file:\n{snippet}",
        data={"type": "update", "filePath": path},
        # The shape only a hook reads: its diff is not worth making for no one.
        response=responses.edit(
            path,
            params.old_string,
            params.new_string,
            original=text,
            updated=new_text,
            replace_all=bool(params.replace_all),
        )
        if ctx.hook_response
        else None,
    )


def _candidates(text: str, params: EditInput) -> list[tuple[str, str]]:
    """(old, new) pairs to try, the file's own line endings first.

    The model writes LF line endings (it saw the file through Read, which hides the CR), so
    on a CRLF file both strings are converted to CRLF. The raw strings are the fallback for
    files that mix endings.
    """
    old, new = params.old_string, params.new_string
    crlf = text.count("\r\n")
    pairs = []
    if crlf and crlf >= text.count("\n") - crlf:
        pairs.append(
            (
                old.replace("\r\n", "\n").replace("\n", "\r\n"),
                new.replace("\r\n", "\n").replace("\n", "\r\n"),
            )
        )
    pairs.append((old, new))
    return [p for p in pairs if p[0] and text.count(p[0])]


def _replace(text: str, params: EditInput, path: str) -> tuple[str, int, str, int] | ToolResult:
    """(new text, offset of the first replacement, replacement, count replaced) or an error."""
    if not params.old_string:
        if text.strip():
            return tool_error(
                f"Cannot create {path}: the file already exists. To change it, put the exact "
                "text to replace in old_string."
            )
        return params.new_string, 0, params.new_string, 1
    found = _candidates(text, params)
    if not found:
        hint = ""
        if _LINE_NUMBER_PREFIX.search(params.old_string):
            hint = (
                " old_string seems to contain line-number prefixes from Read's output; "
                "leave them out."
            )
        return tool_error(
            f"String to replace not found in {path}. It must match the file exactly, "
            f"including whitespace and indentation.{hint}\nString: {params.old_string}"
        )
    old, new = found[0]
    count = text.count(old)
    if count > 1 and not params.replace_all:
        return tool_error(
            f"Found {count} matches of the string to replace, but replace_all is false. To "
            "replace every occurrence set replace_all to true; to replace only one, add more "
            f"surrounding context to old_string so that it is unique.\nString: "
            f"{params.old_string}"
        )
    first = text.index(old)
    return text.replace(old, new, -1 if params.replace_all else 1), first, new, count


def _snippet(text: str, first: int, last: int) -> str:
    """Lines ``first .. last`` (1-based) with some context, in ``cat -n`` style."""
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    last = min(last, first + SNIPPET_MAX_LINES - 1)
    start = max(first - SNIPPET_CONTEXT, 1)
    end = min(last + SNIPPET_CONTEXT, len(lines))
    return number_lines(lines[start - 1 : end], start)
