"""The client's file system as Read, Write and Edit see it, over the real ACP library.

An editor (tests/acp_editor.py) keeps buffers whose text differs from the disk; a session built
with :func:`taskloom.acp.client_fs.backends` reads and changes the buffers, never the disk,
with read-before-write still enforced, and its results are those of a local read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from acp.schema import ClientCapabilities, FileSystemCapabilities

import taskloom
from acp_editor import BufferEditor, connected
from helpers import needs
from taskloom.acp.client_fs import ClientTextFiles, backends
from taskloom.models.base import ModelRequest
from taskloom.testing import FunctionModel, ScriptedModel, ToolCall, Turn
from taskloom.tools.base import ToolContext, ToolResult
from taskloom.tools.edit import Edit
from taskloom.tools.read import Read
from taskloom.tools.write import Write

pytestmark = needs("acp")

SESSION = "acp-session-1"
EVERYTHING = ClientCapabilities(
    fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True
)


async def _run(model: Any, cwd: Path, backends_: Any, prompt: str = "go") -> list[ToolResult]:
    """Run one prompt of a session with ``backends_``; the tool results, in order."""
    options = backends_.apply(taskloom.Options(model=model, cwd=cwd, skip_permissions=True))
    async with taskloom.Harness(options) as h:
        events = [e async for e in h.run(prompt)]
        await h.end()
    return [e.result for e in events if isinstance(e, taskloom.ToolDone)]


async def test_read_sees_the_buffer_and_edit_and_write_change_it_not_the_disk(
    tmp_path: Path,
) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("saved line\n")
    new = tmp_path / "sub" / "new.txt"
    editor = BufferEditor({str(path): "unsaved one\nunsaved two\n"})
    model = ScriptedModel(
        [
            Turn(tool_calls=[ToolCall("Read", {"file_path": str(path)})]),
            Turn(
                tool_calls=[
                    ToolCall(
                        "Edit",
                        {"file_path": str(path), "old_string": "two", "new_string": "2"},
                    )
                ]
            ),
            Turn(tool_calls=[ToolCall("Read", {"file_path": "notes.txt", "offset": 2})]),
            Turn(tool_calls=[ToolCall("Write", {"file_path": str(new), "content": "fresh\n"})]),
            Turn(text="done"),
        ]
    )
    async with connected(editor) as conn:
        read, edit, again, write = await _run(model, tmp_path, backends(conn, EVERYTHING, SESSION))
    assert read.content == "     1\tunsaved one\n     2\tunsaved two"
    assert not edit.is_error, edit.content
    assert edit.content.startswith(f"The file {path} has been updated.")
    assert "     2\tunsaved 2" in edit.content
    assert editor.buffers[str(path)] == "unsaved one\nunsaved 2\n"
    # A relative path is made absolute before the editor is asked (ACP wants absolute paths).
    assert again.content.startswith("     2\tunsaved 2")
    assert write.content == f"File created successfully at: {new}"
    assert editor.buffers[str(new)] == "fresh\n"
    # The editor owns saving: the disk holds what it held.
    assert path.read_text() == "saved line\n"
    assert not new.exists()
    assert all(Path(p).is_absolute() for _, p in editor.fs_calls)
    assert ("write", str(path)) in editor.fs_calls


async def test_read_before_write_holds_for_the_editors_buffers(tmp_path: Path) -> None:
    path = tmp_path / "a.py"
    path.write_text("x = 1\n")
    editor = BufferEditor({str(path): "x = 2\n"})
    calls = [
        ToolCall("Edit", {"file_path": str(path), "old_string": "2", "new_string": "3"}),
        ToolCall("Write", {"file_path": str(path), "content": "gone\n"}),
        ToolCall("Read", {"file_path": str(path)}),
        # The user types into the buffer before the next call.
        ToolCall("Edit", {"file_path": str(path), "old_string": "2", "new_string": "3"}),
        ToolCall("Read", {"file_path": str(path)}),
        ToolCall("Edit", {"file_path": str(path), "old_string": "2", "new_string": "3"}),
    ]

    def answer(request: ModelRequest) -> Turn:
        n = len(model.requests)
        if n == 4:
            editor.buffers[str(path)] = "x = 2  # typed\n"
        return Turn(tool_calls=[calls[n - 1]]) if n <= len(calls) else Turn(text="ok")

    model = FunctionModel(answer)
    async with connected(editor) as conn:
        results = await _run(model, tmp_path, backends(conn, EVERYTHING, SESSION))
    unread_edit, unread_write, _, stale, _, edited = results
    assert unread_edit.is_error and "File has not been read yet" in unread_edit.content
    assert unread_write.is_error and "File has not been read yet" in unread_write.content
    assert stale.is_error and "has been modified since it was read" in stale.content
    assert not edited.is_error, edited.content
    assert editor.buffers[str(path)] == "x = 3  # typed\n"
    assert path.read_text() == "x = 1\n"


async def test_a_file_from_the_editor_reads_as_it_would_from_the_disk(
    ctx: ToolContext, tmp_path: Path
) -> None:
    path = ctx.cwd / "long.txt"
    text = "".join(f"line {i} " + "y" * (i % 50) + "\n" for i in range(1, 3001))
    path.write_text(text)
    crlf = ctx.cwd / "crlf.txt"
    crlf.write_bytes(b"one\r\ntwo\r\n")
    editor = BufferEditor()  # no buffers: the editor shows the disk's text
    reads = [{}, {"offset": 2990}, {"offset": 10, "limit": 5}, {"offset": 5000}]
    async with connected(editor) as conn:
        served = ToolContext(
            runtime=ctx.runtime, owner="main", cwd=ctx.cwd,
            text_files=ClientTextFiles(conn, SESSION),
        )  # fmt: skip
        for extra in reads:
            params = Read.Input.model_validate({"file_path": str(path), **extra})
            local, remote = await Read().call(params, ctx), await Read().call(params, served)
            assert (remote.content, remote.data) == (local.content, local.data)
        huge = ctx.cwd / "huge.txt"
        huge.write_text("z" * 300_000)
        params = Read.Input.model_validate({"file_path": str(huge)})
        local, remote = await Read().call(params, ctx), await Read().call(params, served)
        assert remote.is_error and remote.content == local.content
        missing = Read.Input.model_validate({"file_path": str(ctx.cwd / "nope.txt")})
        assert (await Read().call(missing, served)).content == (
            await Read().call(missing, ctx)
        ).content
        # A CRLF file keeps its endings when written whole (the model writes LF).
        read = Read.Input.model_validate({"file_path": str(crlf)})
        await Read().call(read, served)
        write = Write.Input.model_validate({"file_path": str(crlf), "content": "three\n"})
        assert not (await Write().call(write, served)).is_error
        assert editor.buffers[str(crlf)] == "three\r\n"
        edit = Edit.Input.model_validate(
            {"file_path": str(crlf), "old_string": "three\n", "new_string": "four\nfive\n"}
        )
        assert not (await Edit().call(edit, served)).is_error
        assert editor.buffers[str(crlf)] == "four\r\nfive\r\n"
    assert crlf.read_bytes() == b"one\r\ntwo\r\n"


async def test_images_and_notebooks_are_read_from_the_disk(ctx: ToolContext) -> None:
    png = ctx.cwd / "dot.png"
    png.write_bytes(bytes.fromhex("89504e470d0a1a0a") + b"\0" * 64)
    notebook = ctx.cwd / "n.ipynb"
    notebook.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    editor = BufferEditor({str(notebook): "not json at all"})
    async with connected(editor) as conn:
        served = ToolContext(
            runtime=ctx.runtime, owner="main", cwd=ctx.cwd,
            text_files=ClientTextFiles(conn, SESSION),
        )  # fmt: skip
        for path in (png, notebook):
            params = Read.Input.model_validate({"file_path": str(path)})
            local, remote = await Read().call(params, ctx), await Read().call(params, served)
            assert (remote.content, remote.is_error) == (local.content, local.is_error)
    assert editor.fs_calls == []


@pytest.mark.parametrize(
    "caps",
    [
        None,
        ClientCapabilities(),
        # Reading one side and writing the other would make every write look stale.
        ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True)),
    ],
)
async def test_a_client_without_the_fs_capabilities_leaves_files_on_the_disk(
    tmp_path: Path, caps: ClientCapabilities | None
) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("saved\n")
    editor = BufferEditor({str(path): "unsaved\n"})
    model = ScriptedModel(
        [
            Turn(tool_calls=[ToolCall("Read", {"file_path": str(path)})]),
            Turn(tool_calls=[ToolCall("Write", {"file_path": str(path), "content": "new\n"})]),
            Turn(tool_calls=[ToolCall("Bash", {"command": "cat notes.txt"})]),
            Turn(text="done"),
        ]
    )
    async with connected(editor) as conn:
        chosen = backends(conn, caps, SESSION)
        assert chosen.text_files is None and chosen.commands is None
        read, write, bash = await _run(model, tmp_path, chosen)
    assert read.content == "     1\tsaved"
    assert not write.is_error
    assert path.read_text() == "new\n"
    assert bash.content == "new"
    assert editor.fs_calls == [] and editor.terminals == {}
