"""A foreground Bash in the client's terminal, over the real ACP library.

The editor (tests/acp_editor.py) runs each ``terminal/create`` as a real subprocess and streams
its output; the model sees what a local command would give it, the editor sees the terminal
embedded in the tool call, the timeout and a cancel kill through ``terminal/kill``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psutil
import pytest
from acp.schema import ClientCapabilities

import taskloom
from acp_editor import BufferEditor, connected
from helpers import needs, run_processes, wait_until
from taskloom.acp.client_fs import backends
from taskloom.acp.terminal import ClientTerminal
from taskloom.testing import ScriptedModel, ToolCall, Turn
from taskloom.tools._exit_meaning import stderr_shown
from taskloom.tools.backends import CommandRequest
from taskloom.tools.base import ToolResult

pytestmark = needs("acp")

SESSION = "acp-session-1"
TERMINAL = ClientCapabilities(terminal=True)
LONG = "sleep 4321"
#: Other tests' long commands (tests may run at the same time).
LONGER = "sleep 4322"
LONGEST = "sleep 4323"


def _bash(command: str, **extra: object) -> Turn:
    return Turn(tool_calls=[ToolCall("Bash", {"command": command, **extra})])


async def _run(editor: BufferEditor, cwd: Path, turns: list[Turn]) -> list[tuple[str, ToolResult]]:
    """Run ``turns`` in a session using ``editor``'s terminals: (call id, result) per call."""
    model = ScriptedModel([*turns, Turn(text="done")])
    async with connected(editor) as conn:
        options = backends(conn, TERMINAL, SESSION).apply(
            taskloom.Options(model=model, cwd=cwd, skip_permissions=True)
        )
        async with taskloom.Harness(options) as h:
            events = [e async for e in h.run("go")]
            await h.end()
    return [(e.call.id, e.result) for e in events if isinstance(e, taskloom.ToolDone)]


def _long_commands(command: str = LONG) -> list[psutil.Process]:
    """The processes of ``command`` itself (not the shell whose script names it).

    A test that kills waits for the command to run: a shell with an EXIT trap catches SIGTERM,
    and one killed while it forks leaves the command it was starting outside the kill.
    """
    return run_processes(lambda p: p.info.get("cmdline") == command.split())


async def test_bash_runs_in_the_editors_terminal_with_a_local_commands_result(
    tmp_path: Path,
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "notes.txt").write_text("alpha\n")
    editor = BufferEditor()
    results = await _run(
        editor,
        tmp_path,
        [
            _bash("cd sub && echo hello && echo oops >&2; exit 3"),
            _bash("pwd"),
            _bash("grep nothing-here ../notes.txt"),
            _bash("kill -KILL $$"),
            _bash("seq 1 20000"),
            _bash("sleep 0.1", run_in_background=True),
            Turn(text="waiting"),  # then the notification of its end: "done"
        ],
    )
    (failed_id, failed), (_, pwd), (_, grep), (_, killed), (_, long), (_, background) = results
    assert failed.is_error and failed.content == "hello\noops\nExit code 3"
    # The cd held for the next call, as a local shell's does.
    assert pwd.content == str((tmp_path / "sub").resolve())
    assert not grep.is_error and grep.content == "No matches found"
    assert killed.is_error and killed.content == "Exit code 137"
    assert long.content.startswith("<persisted-output>\nOutput too large (")
    saved = Path(long.content.split("Full output saved to: ")[1].split("\n")[0])
    assert saved.read_text().split() == [str(i) for i in range(1, 20001)]
    assert "Command running in background with ID: b" in background.content
    # Five terminals for five foreground calls; the background command stayed a local task.
    assert len(editor.terminals) == 5
    first = editor.terminals["term-1"]
    assert first.command[:2] == ["bash", "-c"]
    assert first.command[2].endswith("; cd sub && echo hello && echo oops >&2; exit 3")
    assert first.cwd == str(tmp_path)
    assert all(t.released for t in editor.terminals.values())
    embedded = [
        u
        for u in editor.updates
        if u.session_update == "tool_call_update" and u.tool_call_id == failed_id
    ]
    assert [(c.type, c.terminal_id) for u in embedded for c in u.content or []] == [
        ("terminal", "term-1")
    ]


async def test_the_timeout_kills_through_the_terminal(tmp_path: Path) -> None:
    editor = BufferEditor()
    ((_, result),) = await _run(editor, tmp_path, [_bash(f"echo started; {LONG}", timeout=1000)])
    assert result.is_error
    assert result.content == "started\nCommand timed out after 1s\nExit code 143"
    (term,) = editor.terminals.values()
    assert term.killed and term.released
    assert not psutil.pid_exists(term.process.pid)
    assert _long_commands() == []


async def test_a_cancelled_call_kills_and_releases_its_terminal(tmp_path: Path) -> None:
    editor = BufferEditor()
    async with connected(editor) as conn:
        runner = ClientTerminal(conn, SESSION)
        request = CommandRequest(
            script=LONGER, command=LONGER, cwd=tmp_path, env={}, timeout=600.0,
            tool_use_id="toolu_1", output_limit=1000,
        )  # fmt: skip
        call = asyncio.get_running_loop().create_task(runner.run(request))
        await wait_until(lambda: len(_long_commands(LONGER)) == 1, what="the command to start")
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        (term,) = editor.terminals.values()
        assert term.killed and term.released
    assert _long_commands(LONGER) == []


async def test_a_call_cancelled_while_its_terminal_starts_still_stops_it(
    tmp_path: Path,
) -> None:
    editor = BufferEditor()
    started = editor.create_terminal
    creating = asyncio.Event()
    go_on = asyncio.Event()

    async def slow_create(*args: Any, **kwargs: Any) -> Any:
        creating.set()
        await go_on.wait()  # the agent is cancelled before the client answers
        return await started(*args, **kwargs)

    editor.create_terminal = slow_create  # type: ignore[method-assign]
    async with connected(editor) as conn:
        runner = ClientTerminal(conn, SESSION)
        request = CommandRequest(
            script=LONGEST, command=LONGEST, cwd=tmp_path, env={}, timeout=600.0,
            tool_use_id="toolu_2", output_limit=1000,
        )  # fmt: skip
        call = asyncio.get_running_loop().create_task(runner.run(request))
        await asyncio.wait_for(creating.wait(), 10)
        call.cancel()  # delivered before the client's answer, which is let go after it
        go_on.set()
        with pytest.raises(asyncio.CancelledError):
            await call
        (term,) = editor.terminals.values()
        assert term.killed and term.released
    assert _long_commands(LONGEST) == []


async def test_output_over_the_limit_keeps_its_end_and_says_it_was_cut(tmp_path: Path) -> None:
    editor = BufferEditor()
    async with connected(editor) as conn:
        runner = ClientTerminal(conn, SESSION)
        request = CommandRequest(
            script="seq 1 1000", command="seq 1 1000", cwd=tmp_path, env={}, timeout=60.0,
            tool_use_id="toolu_3", output_limit=100,
        )  # fmt: skip
        end = await runner.run(request)
        # Sent straight to the client (no queue given): the terminal embedded in its call.
        await wait_until(lambda: bool(editor.updates), what="the tool call's update")
    assert end.cut and end.exit_code == 0 and end.terminal_id == "term-1"
    assert end.output.endswith("999\n1000\n") and len(end.output) <= 100
    (update,) = editor.updates
    assert update.tool_call_id == "toolu_3" and update.content[0].terminal_id == "term-1"


def test_a_complaint_in_merged_output_keeps_an_answer_an_error() -> None:
    assert stderr_shown("grep x f.txt", "grep: f.txt: No such file or directory\n")
    assert stderr_shown("[ 1 -lt ]", "bash: [: 1: unary operator expected\n")
    assert not stderr_shown("grep x f.txt", "")
    assert not stderr_shown("diff a b", "1c1\n< a\n---\n> b\n")
