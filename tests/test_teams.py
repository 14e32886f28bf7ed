"""Teams in one process: spawning, stopping and permissions through the lead's tools."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

import psutil

from helpers import harness, main_context, wait_until
from taskloom.models.base import ModelRequest
from taskloom.tasks.teammate import TeammateTaskState
from taskloom.testing import FunctionModel, ToolCall, Turn


def _tool(h: Any, name: str) -> Any:
    return next(t for t in h.tools if t.name == name)


async def _call(h: Any, tool_name: str, /, **params: Any) -> Any:
    tool = _tool(h, tool_name)
    return await tool.call(tool.validate(params), main_context(h))


def _teammate(request: ModelRequest) -> str | None:
    member = request.metadata.get("teammate")
    return str(member).split("@")[0] if member else None


async def test_task_stop_kills_a_teammate_whose_model_hangs_within_5_s(tmp_path: Path) -> None:
    never = asyncio.Event()

    async def respond(request: ModelRequest) -> Turn | str:
        if _teammate(request) == "stuck":
            await never.wait()
        return "lead"

    async with harness(tmp_path, FunctionModel(respond), teams=True) as h:
        spawned = await _call(h, "Agent", description="s", prompt="p", name="stuck")
        assert "agent_id: stuck@" in spawned.content
        started = time.monotonic()
        stopped = await _call(h, "TaskStop", task_id="stuck")
        assert time.monotonic() - started < 5.5
        assert stopped.content.startswith("Successfully stopped task: t")
        (state,) = [s for s in h.runtime.list() if isinstance(s, TeammateTaskState)]
        assert state.status.value == "killed"
        team = h.agents.teams.roster.team()
        assert not next(m for m in team.members if m.name == "stuck").is_active


async def test_an_approved_shutdown_leaves_no_process_of_the_teammate(tmp_path: Path) -> None:
    def respond(request: ModelRequest) -> Turn | str:
        name = _teammate(request)
        if name is None:
            return "lead"
        seen = "\n".join(m.text() for m in request.messages)
        found = re.search(r'"requestId": "(shutdown-[^"]+)"', seen)
        if found:
            rid = found.group(1)
            answer = {"type": "shutdown_response", "request_id": rid, "approve": True}
            return Turn(
                tool_calls=(ToolCall("SendMessage", {"to": "team-lead", "message": answer}),)
            )
        if len(request.messages) == 1:
            bg = {"command": "sleep 300", "run_in_background": True}
            return Turn(tool_calls=(ToolCall("Bash", bg),))
        return "started it"

    async with harness(tmp_path, FunctionModel(respond), teams=True) as h:
        await _call(h, "Agent", description="w", prompt="p", name="worker1")
        rt = h.runtime

        def sleeping() -> list[int]:
            return [
                s.pid  # type: ignore[attr-defined]
                for s in rt.list()
                if getattr(s, "command", None) == "sleep 300" and not s.terminal
            ]

        await wait_until(lambda: bool(sleeping()), what="the teammate's sleep")
        pid = sleeping()[0]
        (state,) = [s for s in rt.list() if isinstance(s, TeammateTaskState)]
        await wait_until(lambda: rt.get(state.id).is_idle, what="it to go idle")  # type: ignore[union-attr]
        asked = await _call(
            h, "SendMessage", to="worker1", message={"type": "shutdown_request", "reason": "done"}
        )
        assert json.loads(asked.content)["request_id"].startswith("shutdown-")
        await wait_until(lambda: rt.get(state.id).terminal, what="its end")  # type: ignore[union-attr]
        assert rt.get(state.id).status.value == "completed"  # type: ignore[union-attr]
        await wait_until(lambda: not psutil.pid_exists(pid), what="its sleep to be gone")
        shown = [b.body for b in rt.mailbox.pending(h.session_id)]
        assert any('"type": "shutdown_approved"' in b for b in shown)
        # Its transcript ends with the approving call answered (not cut off before).
        from taskloom.teams.teammate import sidechain_path

        last = json.loads(sidechain_path(rt, state.id).read_text().splitlines()[-1])
        assert "Shutdown approved" in json.dumps(last)
        assert rt.get(state.id).tool_uses == 2  # type: ignore[union-attr]


async def test_a_teammates_call_the_leads_rules_deny_is_denied_naming_the_rule(
    tmp_path: Path,
) -> None:
    results: list[str] = []

    def respond(request: ModelRequest) -> Turn | str:
        if _teammate(request) is None:
            return "lead"
        if len(request.messages) == 1:
            return Turn(tool_calls=(ToolCall("Bash", {"command": "rm -rf build"}),))
        last = request.messages[-1]
        results.extend(str(b.model_dump()) for b in last.content)
        return "denied, as expected"

    async with harness(
        tmp_path, FunctionModel(respond), teams=True, disallowed_tools=["Bash(rm:*)"]
    ) as h:
        await _call(h, "Agent", description="w", prompt="p", name="carol")
        await wait_until(lambda: bool(results), what="the teammate's denied call")
    assert "Bash(rm:*)" in results[0] and "is_error" in results[0]


def test_eight_processes_append_8000_messages_to_one_mailbox_none_twice(tmp_path: Path) -> None:
    """Writers in other processes (teammates of a tmux team will be): all rows, each once."""
    import subprocess
    import sys

    from helpers import clean_env
    from taskloom.settings import db_path
    from taskloom.store import Store
    from taskloom.tasks.mailbox import Mailbox

    home = tmp_path / "home"
    writer = (
        "import sys\n"
        "from taskloom.settings import db_path\n"
        "from taskloom.store import Store\n"
        "from taskloom.tasks.mailbox import Mailbox\n"
        "store = Store(db_path())\n"
        "box = Mailbox(store, 'sess')\n"
        "for i in range(1000):\n"
        "    me = sys.argv[1]\n"
        "    box.post(recipient='lead', sender=me, kind='message', body=f'{me}-{i}')\n"
        "    if i % 100 == 99:\n"
        "        store.flush()\n"
        "store.flush()\n"
        "store.close()\n"
    )
    env = clean_env(TASKLOOM_HOME=str(home))
    procs = [subprocess.Popen([sys.executable, "-c", writer, f"w{n}"], env=env) for n in range(8)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 8
    store = Store(db_path(home))
    try:
        box = Mailbox(store, "sess")
        box.replay()
        taken = box.take("lead")
        bodies = [letter.body for letter in taken]
        assert len(bodies) == 8000 and len(set(bodies)) == 8000
        box.ack(letter.id for letter in taken)
        assert Mailbox(store, "sess").replay() == []  # acknowledged: never handed out twice
    finally:
        store.close()
