"""``taskloom acp`` driven by an editor on the npm client library, with buffers and terminals.

``tests/ts/acp_editor.mjs`` is an editor on the official TypeScript SDK that offers
``fs.readTextFile``, ``fs.writeTextFile`` and ``terminal``: it keeps a buffer map that differs
from the disk, runs terminals as real child processes and answers permission requests from a
list. It starts ``taskloom acp`` against the fake Anthropic server (the real wire format) and,
as this test tells it, opens a session,
prompts a Read, an Edit and a Bash; prompts three identical Bash calls whose permission it
answers reject, then allow-always (the third is not asked); prompts a long command and cancels
it; and, on a new agent process, loads the finished session. Everything is asserted here from
what the script prints.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from fake_servers import FakeAnthropicServer, ToolCall, Turn
from helpers import TIME_FACTOR, alive, clean_env, needs, node_modules, wait_until

pytestmark = [pytest.mark.e2e, needs("acp")]

SCRIPT = Path(__file__).resolve().parent / "ts" / "acp_editor.mjs"
TIMEOUT = 60 * TIME_FACTOR
#: The long command: a sleep of a length no other test uses.
LONG = "sleep 4339"
ECHO = {"command": "echo hello-acp"}


def _call(name: str, call_id: str, **tool_input: Any) -> Turn:
    return Turn(tool_calls=(ToolCall(name, tool_input, id=call_id),))


def _turns(notes: Path) -> list[Turn]:
    """The model's turns over the three prompts (the last one's answer is never asked for)."""
    return [
        _call("Read", "read", file_path=str(notes)),
        _call("Edit", "edit", file_path=str(notes), old_string="draft", new_string="final"),
        _call("Bash", "cat", command="cat notes.txt"),
        Turn(text="Edited."),
        _call("Bash", "b1", **ECHO),
        _call("Bash", "b2", **ECHO),
        _call("Bash", "b3", **ECHO),
        Turn(text="Asked twice."),
        _call("Bash", "long", command=LONG),
        Turn(text="after"),
    ]


def _sleepers(root: int) -> list[int]:
    """The long command itself among the processes under the terminal's shell."""
    try:
        under = psutil.Process(root).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for proc in under:
        try:
            if proc.cmdline() == LONG.split():
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


class Editor:
    """The node program: its lines as they come, and the test's commands to it."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[dict[str, Any]] = []

    async def until(self, kind: str) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            try:
                raw = await asyncio.wait_for(self.proc.stdout.readline(), TIMEOUT)
            except TimeoutError:
                raise AssertionError(f"no {kind!r} from the editor: {self.lines[-5:]}") from None
            assert raw, f"the editor ended before {kind!r}: {self.lines[-3:]}"
            line = json.loads(raw)
            self.lines.append(line)
            assert line["kind"] != "error", line["message"]
            if line["kind"] == kind:
                return line

    async def say(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")
        await self.proc.stdin.drain()

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line["kind"] == kind]

    def updates(self, kind: str, lines: list[dict[str, Any]] | None = None) -> list[Any]:
        return [
            line["update"]
            for line in (self.lines if lines is None else lines)
            if line["kind"] == "update" and line["update"]["sessionUpdate"] == kind
        ]

    def ends(self, lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Each tool call's final update in ``lines``, by id."""
        return {
            u["toolCallId"]: u
            for u in self.updates("tool_call_update", lines)
            if u.get("status") in ("completed", "failed")
        }


async def test_the_npm_editor_reads_edits_runs_asks_cancels_and_loads(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / ".git").mkdir(parents=True)  # the project root: where "always" saves its rule
    notes = work / "notes.txt"
    notes.write_text("saved\n")
    server = FakeAnthropicServer()
    server.start()
    for turn in _turns(notes):
        server.add(turn)
    env = {
        **clean_env(),
        "TASKLOOM_HOME": str(tmp_path / "home"),
        "ANTHROPIC_BASE_URL": server.url,
        "ANTHROPIC_API_KEY": "test",
    }
    config = {
        "nodeModules": str(node_modules()),
        "command": sys.executable,
        "args": ["-m", "taskloom", "acp", "--model", "sonnet"],
        "cwd": str(work),
        "env": env,
        "buffers": {str(notes): "unsaved draft\n"},
        "permissions": ["allow_once", "allow_once", "reject_once", "allow_always", "allow_once"],
        "steps": [
            {"op": "new"},
            {"op": "prompt", "text": "edit the notes"},
            {"op": "prompt", "text": "echo thrice"},
            {"op": "cancel", "text": "run the long one"},
            {"op": "restart"},
            {"op": "load"},
        ],
        "timeoutMs": int(30_000 * TIME_FACTOR),
    }
    proc = await asyncio.create_subprocess_exec(
        "node", str(SCRIPT), json.dumps(config), env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    editor = Editor(proc)
    try:
        first = await editor.until("stop")
        second = await editor.until("stop")
        long = None
        while long is None or LONG not in long["argv"][-1]:
            long = await editor.until("terminal")
        await wait_until(lambda: bool(_sleepers(long["pid"])), TIMEOUT, "the long command")
        pids = [long["pid"], *_sleepers(long["pid"])]
        await editor.say("cancel")
        third = await editor.until("stop")
        await wait_until(lambda: not any(map(alive, pids)), TIMEOUT, "the long command gone")
        await editor.until("exit")
        before_load = len(editor.lines)
        await editor.until("loaded")
        replay = editor.lines[before_load:]
        buffers = (await editor.until("buffers"))["buffers"]
        await editor.until("done")
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        server.close()
    assert len(server.requests) == 9  # every answer asked for, the last one's never
    assert (first["stopReason"], second["stopReason"], third["stopReason"]) == (
        "end_turn", "end_turn", "cancelled",
    )  # fmt: skip
    ends = editor.ends(editor.lines[:before_load])  # the live calls, not the replay's
    # Read saw the buffer; Edit changed the buffer through fs/write_text_file, not the disk.
    assert "unsaved draft" in ends["read"]["rawOutput"]
    assert buffers[str(notes)] == "unsaved final\n"
    assert notes.read_text() == "saved\n"
    fs = [(line["op"], line["path"]) for line in editor.of("fs")]
    assert fs == [("read", str(notes)), ("read", str(notes)), ("write", str(notes))]
    (diff,) = editor.updates("tool_call")[1]["content"]
    assert (diff["type"], diff["oldText"], diff["newText"]) == ("diff", "draft", "final")
    # Bash ran in the editor's terminal (which sees the disk), its output the call's result.
    assert ends["cat"]["status"] == "completed" and ends["cat"]["rawOutput"] == "saved"
    assert ends["cat"]["content"] == [{"type": "terminal", "terminalId": "term-1"}]
    # Asked: the edit and the cat once each; b1 rejected, b2 allowed always, b3 not asked.
    asked = [(line["toolCall"]["toolCallId"], line["answer"]) for line in editor.of("asked")]
    assert asked == [
        ("edit", "allow_once"), ("cat", "allow_once"), ("b1", "reject_once"),
        ("b2", "allow_always"), ("long", "allow_once"),
    ]  # fmt: skip
    assert ends["b1"]["status"] == "failed" and "denied" in ends["b1"]["rawOutput"]
    assert [ends[c]["rawOutput"] for c in ("b2", "b3")] == ["hello-acp", "hello-acp"]
    assert "Bash(echo:*)" in (work / ".taskloom" / "settings.local.json").read_text()
    # The cancelled command's terminal was killed and released; the call did not complete.
    assert {line["terminalId"] for line in editor.of("killed")} == {long["terminalId"]}
    assert long["terminalId"] in {line["terminalId"] for line in editor.of("released")}
    assert ends.get("long", {}).get("status") != "completed"
    # The load on a new agent process replayed the three prompts and their calls.
    said = [u["content"]["text"] for u in editor.updates("user_message_chunk", replay)]
    interrupted = "[Request interrupted by user for tool use]"  # what the cancel left in it
    assert said == ["edit the notes", "echo thrice", "run the long one", interrupted]
    calls = [u["toolCallId"] for u in editor.updates("tool_call", replay)]
    assert calls == ["read", "edit", "cat", "b1", "b2", "b3", "long"]
    replied = "".join(u["content"]["text"] for u in editor.updates("agent_message_chunk", replay))
    assert replied == "Edited.Asked twice."
