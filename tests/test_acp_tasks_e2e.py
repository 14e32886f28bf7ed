"""``taskloom acp`` shows a background agent as a child session to the npm ACP client.

``tests/ts/acp_subagents.mjs`` is an editor on the official TypeScript SDK that offers
subagent sessions: it starts ``taskloom acp`` against the fake model server, prompts a session
whose model starts an agent in the background, sees the child session announced and its tool
call (a long command), and on the test's word cancels the child. The agent and its command
are gone, the child goes idle (``cancelled``) and the model is told of the stop once, in a turn
of its own.
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

SCRIPT = Path(__file__).resolve().parent / "ts" / "acp_subagents.mjs"
TIMEOUT = 60 * TIME_FACTOR
#: The child's command: a sleep of a length no other process here has.
SLEEP = "sleep 3117"
NOTIFICATION = "<task-notification>"


def _text(message: dict[str, Any]) -> str:
    content = message["content"]
    return content if isinstance(content, str) else json.dumps(content)


def respond(body: dict[str, Any]) -> Turn | str:
    """Main thread: start the agent, then answer; the agent: a long command in the foreground."""
    messages = body["messages"]
    if "child job" in _text(messages[0]):
        if len(messages) == 1:
            return Turn(text="working on it", tool_calls=(ToolCall("Bash", {"command": SLEEP}),))
        return "the child is done"
    last = _text(messages[-1])
    if NOTIFICATION in last:
        return "the child was stopped"
    if "tool_result" in last:
        return "spawned it"
    spawn = {"description": "long child", "prompt": "child job", "run_in_background": True}
    return Turn(tool_calls=(ToolCall("Agent", spawn),))


class Editor:
    """The node program: its lines as they come, and the test's commands to it."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[dict[str, Any]] = []

    async def until(self, kind: str) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            raw = await asyncio.wait_for(self.proc.stdout.readline(), TIMEOUT)
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

    def updates(self, session_id: str, kind: str) -> list[dict[str, Any]]:
        return [
            line["update"]
            for line in self.lines
            if line["kind"] == "update"
            and line["sessionId"] == session_id
            and line["update"]["sessionUpdate"] == kind
        ]


def sleepers(root: int) -> list[int]:
    """The child's command among the processes under ``root``."""
    try:
        under = psutil.Process(root).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for proc in under:
        try:
            if SLEEP in " ".join(proc.cmdline()):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


async def test_the_npm_client_sees_a_child_session_and_cancels_it(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with FakeAnthropicServer(respond) as server:
        env = {
            **clean_env(),
            "ANTHROPIC_BASE_URL": server.url,
            "ANTHROPIC_API_KEY": "test",
            "TASKLOOM_HOME": str(tmp_path / "home"),
        }
        config = {
            "nodeModules": str(node_modules()),
            "command": sys.executable,
            "args": [
                "-m",
                "taskloom",
                "acp",
                "--model",
                "claude-sonnet-4-5",
                "--dangerously-skip-permissions",
            ],
            "cwd": str(work),
            "env": env,
            "prompt": "start the child",
            "timeoutMs": int(30_000 * TIME_FACTOR),
        }
        proc = await asyncio.create_subprocess_exec(
            "node", str(SCRIPT), json.dumps(config),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        editor = Editor(proc)
        try:
            assert (await editor.until("stop"))["stopReason"] == "end_turn"
            child = (await editor.until("child"))["sessionId"]
            await wait_until(lambda: sleepers(proc.pid), what="the child's command")
            pids = sleepers(proc.pid)
            await editor.say("cancel")
            idle = await editor.until("idle")
            await wait_until(lambda: not any(alive(p) for p in pids), what="its command gone")
            await editor.until("woke")
            done = await editor.until("done")
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
        requests = [r.body for r in server.requests]
    assert idle["state"] == {"state": "idle", "stopReason": "cancelled"}
    assert done["code"] == 0
    (session,) = {line["sessionId"] for line in editor.lines if line["kind"] == "update"} - {child}
    hello, *rest = editor.updates(session, "subagent_update")
    assert hello["sessionId"] == child and hello["title"] == "long child"
    assert hello["capabilities"] == {"cancel": {}} and hello["state"] == {"state": "running"}
    task_id = hello["_meta"]["taskloom"]["taskId"]
    assert [u["state"]["state"] for u in rest if "state" in u] == ["idle"]
    # The child's own updates, under its id: its text and its command.
    said = "".join(u["content"]["text"] for u in editor.updates(child, "agent_message_chunk"))
    assert said == "working on it"
    (call,) = editor.updates(child, "tool_call")
    assert call["kind"] == "execute" and call["rawInput"] == {"command": SLEEP}
    # The model was told of the stop once, as of any stop, in a turn of its own.
    told = [
        b for b in requests if "child job" not in _text(b["messages"][0])
        and NOTIFICATION in _text(b["messages"][-1])
    ]  # fmt: skip
    assert len(told) == 1
    note = _text(told[0]["messages"][-1])
    assert f"<task-id>{task_id}</task-id>" in note and "<status>killed</status>" in note
