"""``taskloom acp`` with a client that offers its file system and terminals, in process.

The agent (:class:`taskloom.acp.server.TaskloomAgent`) and the editor of tests/acp_editor.py
talk over the library's in-memory transport: the editor's ``initialize`` offers
``fs.readTextFile``, ``fs.writeTextFile`` and ``terminal``, and a prompt's Read, Edit and Bash
go through them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import acp
import psutil
from acp.schema import ClientCapabilities, FileSystemCapabilities

from acp_editor import BufferEditor, agent_connected
from helpers import TIME_FACTOR, needs, run_processes, wait_until
from taskloom.options import Options
from taskloom.testing import ScriptedModel, ToolCall, Turn

pytestmark = needs("acp")

TIMEOUT = 30 * TIME_FACTOR
EVERYTHING = ClientCapabilities(
    fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True
)
LONG = "sleep 4324"


async def _session(client: Any, cwd: Path) -> str:
    await asyncio.wait_for(
        client.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=EVERYTHING),
        TIMEOUT,
    )
    session = await asyncio.wait_for(client.new_session(cwd=str(cwd), mcp_servers=[]), TIMEOUT)
    session_id: str = session.session_id
    return session_id


def _prompt(client: Any, session_id: str, text: str) -> Any:
    return asyncio.wait_for(
        client.prompt(session_id=session_id, prompt=[acp.text_block(text)]), TIMEOUT
    )


def _ends(editor: BufferEditor, call_id: str) -> list[Any]:
    return [
        u
        for u in editor.updates
        if u.session_update == "tool_call_update"
        and u.tool_call_id == call_id
        and u.status in ("completed", "failed")
    ]


async def test_read_edit_and_bash_go_through_the_editor(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("saved\n")
    editor = BufferEditor({str(notes): "unsaved draft\n"})
    model = ScriptedModel(
        [
            Turn(tool_calls=(ToolCall("Read", {"file_path": str(notes)}, id="read"),)),
            Turn(
                tool_calls=(
                    ToolCall(
                        "Edit",
                        {"file_path": str(notes), "old_string": "draft", "new_string": "final"},
                        id="edit",
                    ),
                )
            ),
            Turn(tool_calls=(ToolCall("Bash", {"command": "cat notes.txt"}, id="bash"),)),
            Turn(text="done"),
        ]
    )
    options = Options(model=model, cwd=tmp_path, permission_mode="bypassPermissions")
    async with agent_connected(options, editor) as client:
        session_id = await _session(client, tmp_path)
        said = await _prompt(client, session_id, "go")
        assert said.stop_reason == "end_turn"
        await wait_until(lambda: bool(_ends(editor, "bash")), TIMEOUT, "the Bash call's end")
    assert editor.buffers[str(notes)] == "unsaved final\n"
    assert notes.read_text() == "saved\n"  # the editor saves, not the agent
    (read_end,) = _ends(editor, "read")
    assert "unsaved draft" in read_end.raw_output
    assert ("read", str(notes)) in editor.fs_calls and ("write", str(notes)) in editor.fs_calls
    # Bash ran in the editor's terminal (which sees the disk), shown in the call to its end.
    (term,) = editor.terminals.values()
    assert term.released and term.output.decode() == "saved\n"
    (bash_end,) = _ends(editor, "bash")
    assert [(c.type, c.terminal_id) for c in bash_end.content] == [("terminal", "term-1")]
    assert bash_end.raw_output == "saved"


def _long() -> list[psutil.Process]:
    """The long command itself, not the shell whose script names it (see test_acp_fs_terminal)."""
    return run_processes(lambda p: p.info.get("cmdline") == LONG.split())


async def test_cancel_kills_the_command_in_the_editors_terminal(tmp_path: Path) -> None:
    model = ScriptedModel(
        [Turn(tool_calls=(ToolCall("Bash", {"command": LONG}, id="long"),)), Turn(text="after")]
    )
    editor = BufferEditor()
    options = Options(model=model, cwd=tmp_path, permission_mode="bypassPermissions")
    async with agent_connected(options, editor) as client:
        session_id = await _session(client, tmp_path)
        running = asyncio.ensure_future(_prompt(client, session_id, "run it"))
        await wait_until(lambda: bool(_long()), TIMEOUT, "the long command to start")
        await client.cancel(session_id=session_id)
        said = await running
        assert said.stop_reason == "cancelled"
        (term,) = editor.terminals.values()
        await wait_until(lambda: term.killed and term.released, TIMEOUT, "kill and release")
        assert not _long()
        said = await _prompt(client, session_id, "go on")
        assert said.stop_reason == "end_turn"
