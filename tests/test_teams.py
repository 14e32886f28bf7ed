"""Teams in one process: spawning, stopping and permissions through the lead's tools."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from helpers import TIME_FACTOR, harness, main_context, wait_until
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
        assert time.monotonic() - started < 5.5 * TIME_FACTOR
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
        results.extend(str(b.dump()) for b in last.content)
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


async def test_a_teammate_idle_hook_that_exits_2_keeps_it_working(tmp_path: Path) -> None:
    marker = tmp_path / "kept"
    command = (
        f"cat > '{tmp_path}/idle.json'; if [ ! -e '{marker}' ]; then touch '{marker}'; "
        "echo 'keep going: check the docs' >&2; exit 2; fi"
    )
    hooks = {"TeammateIdle": [{"hooks": [{"type": "command", "command": command}]}]}
    prompts: list[str] = []

    def respond(request: ModelRequest) -> Turn | str:
        if _teammate(request) is None:
            return "lead"
        prompts.append(request.messages[-1].text())
        return f"turn {len(prompts)}"

    settings = json.dumps({"hooks": hooks})
    async with harness(tmp_path, FunctionModel(respond), teams=True, settings=settings) as h:
        await _call(h, "Agent", description="w", prompt="work", name="dave")
        (state,) = [s for s in h.runtime.list() if isinstance(s, TeammateTaskState)]
        await wait_until(lambda: h.runtime.get(state.id).is_idle, what="it to go idle")  # type: ignore[union-attr]
    assert len(prompts) == 2 and "keep going: check the docs" in prompts[1]
    seen = json.loads((tmp_path / "idle.json").read_text())
    assert seen["hook_event_name"] == "TeammateIdle" and seen["teammate_name"] == "dave"
    assert seen["team_name"].startswith("session-")


async def test_a_permission_request_hook_answers_for_a_headless_teammate(tmp_path: Path) -> None:
    """Under -p nobody can be asked: a PermissionRequest hook may allow; without it, denied."""
    import taskloom

    done: list[str] = []

    def respond(request: ModelRequest) -> Turn | str:
        name = _teammate(request)
        if name is None:
            return "lead"
        if len(request.messages) == 1:
            touch = {"command": f"touch {tmp_path / name}"}
            return Turn(tool_calls=(ToolCall("Bash", touch),))
        done.append(request.messages[-1].text() or str(request.messages[-1].content[0]))
        return "ok"

    allow = json.dumps(
        {"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                                "decision": {"behavior": "allow"}}}
    )  # fmt: skip
    for name, hooks in (("with-hook", True), ("without", False)):
        settings: dict[str, Any] = {"permissions": {"ask": ["Bash(touch:*)"]}}
        if hooks:
            hook = {"type": "command", "command": f"echo '{allow}'"}
            settings["hooks"] = {"PermissionRequest": [{"matcher": "Bash", "hooks": [hook]}]}
        done.clear()
        async with taskloom.Harness(
            model=FunctionModel(respond), cwd=tmp_path, teams=True, settings=json.dumps(settings)
        ) as h:
            await _call(h, "Agent", description="w", prompt="p", name=name)
            await wait_until(lambda: bool(done), what=f"{name}'s call to be answered")
        assert (tmp_path / name).exists() is hooks
    # The denial names the rule that asked (and says nobody could approve it).
    assert "Bash(touch:*)" in done[0]


async def test_a_teammate_gets_the_leads_tools_less_the_denied_and_its_own_agent_tool(
    tmp_path: Path,
) -> None:
    seen: dict[str, Any] = {}

    def respond(request: ModelRequest) -> Turn | str:
        if _teammate(request) is not None:
            seen["tools"] = {t.name: t for t in request.tools}
        return "ok"

    async with harness(
        tmp_path, FunctionModel(respond), teams=True, builtin_tools=["Read", "Agent", "SendMessage"]
    ) as h:
        await _call(h, "Agent", description="w", prompt="p", name="erin")
        await wait_until(lambda: "tools" in seen, what="the teammate's first request")
    names = set(seen["tools"])
    assert "Bash" not in names and "Edit" not in names  # the lead has none of those
    assert {"Read", "Agent", "SendMessage", "TaskList", "TaskUpdate"} <= names
    assert not names & {"TaskOutput", "TeamCreate", "TeamDelete", "EnterWorktree"}
    fields = set(seen["tools"]["Agent"].input_schema["properties"])
    assert not fields & {"name", "team_name", "mode", "run_in_background"}


async def test_task_stop_by_name_at_team_with_the_teammates_shell_alive(tmp_path: Path) -> None:
    def respond(request: ModelRequest) -> Turn | str:
        if _teammate(request) is not None and len(request.messages) == 1:
            return Turn(
                tool_calls=(ToolCall("Bash", {"command": "sleep 300", "run_in_background": True}),)
            )
        return "ok"

    async with harness(tmp_path, FunctionModel(respond), teams=True) as h:
        spawned = await _call(h, "Agent", description="w", prompt="p", name="fay")
        agent_id = spawned.content.split("agent_id: ")[1].split("\n")[0]
        rt = h.runtime
        await wait_until(
            lambda: any(
                getattr(s, "command", None) == "sleep 300" and not s.terminal for s in rt.list()
            ),
            what="the teammate's shell",
        )
        stopped = await _call(h, "TaskStop", task_id=agent_id)
        assert stopped.content.startswith("Successfully stopped task: t"), stopped.content
        assert all(s.terminal for s in rt.list() if getattr(s, "command", None) == "sleep 300")


@pytest.mark.e2e
def test_a_headless_lead_waits_for_an_idle_teammates_background_work(tmp_path: Path) -> None:
    """The teammate goes idle while its command runs; the run ends only after it reports."""
    import subprocess
    import sys

    from coordinator_scenario import texts
    from fake_servers import FakeAnthropicServer
    from fake_servers import ToolCall as WireCall
    from fake_servers import Turn as WireTurn
    from helpers import clean_env

    def respond(body: dict[str, Any]) -> WireTurn:
        messages = body["messages"]
        seen = "\n".join(t for m in messages if m["role"] == "user" for t in texts(m["content"]))
        system = body["system"] if isinstance(body["system"], str) else json.dumps(body["system"])
        if "You are gus, a member" in system:
            if len(messages) == 1:
                run = {"command": "sleep 1; echo built", "run_in_background": True}
                return WireTurn(tool_calls=(WireCall("Bash", run),))
            if "<task-notification>" in seen and "report" not in seen:
                note = {"to": "team-lead", "message": "build done", "summary": "report"}
                return WireTurn(tool_calls=(WireCall("SendMessage", note),))
            return WireTurn(text="waiting for my build")
        if len(messages) == 1:
            spawn = {"description": "g", "prompt": "Build it.", "name": "gus"}
            return WireTurn(tool_calls=(WireCall("Agent", spawn),))
        return WireTurn(text="got the build" if "build done" in seen else "waiting")

    with FakeAnthropicServer(responder=respond) as server:
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="t")
        env["TASKLOOM_HOME"] = str(tmp_path / "home")
        proc = subprocess.run(
            [sys.executable, "-m", "taskloom", "-p", "go", "--teams", "--output-format", "json",
             "--model", "claude-sonnet-4-5", "--dangerously-skip-permissions"],
            capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["result"] == "got the build"


async def test_a_plan_mode_teammate_acts_once_the_lead_approves_its_plan(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    results: list[str] = []

    def respond(request: ModelRequest) -> Turn | str:
        if _teammate(request) is None:
            return "lead"
        last = request.messages[-1]
        results.extend(str(b.dump()) for b in last.content)
        seen = "\n".join(m.text() for m in request.messages) + json.dumps(results)
        write = ToolCall("Write", {"file_path": str(target), "content": "done\n"})
        if len(request.messages) == 1:
            return Turn(tool_calls=(write,))  # refused: plan mode
        if "plan_approval_response" in seen and '"approve": true' in seen and not target.exists():
            return Turn(tool_calls=(write,))
        if "plan_approval_request" not in json.dumps([m.full() for m in request.messages]):
            plan = {"type": "plan_approval_request", "plan": "write out.txt"}
            return Turn(tool_calls=(ToolCall("SendMessage", {"to": "team-lead", "message": plan}),))
        return "waiting"

    async with harness(tmp_path, FunctionModel(respond), teams=True) as h:
        spawned = await _call(h, "Agent", description="p", prompt="p", name="hal", mode="plan")
        assert "agent_id: hal@" in spawned.content
        rt = h.runtime

        def plan_request() -> str | None:
            for letter in rt.mailbox.pending(h.session_id):
                found = re.search(r'"requestId": "(plan-[^"]+)"', letter.body)
                if found:
                    return found.group(1)
            return None

        await wait_until(lambda: plan_request() is not None, what="hal's plan")
        assert not target.exists()  # plan mode refused its write
        # Its Write was refused (plan mode), as a tool error.
        assert any("'is_error': True" in r and "plan" in r.lower() for r in results)
        request = plan_request()
        bogus = {"type": "plan_approval_response", "request_id": "plan-1@hal", "approve": True}
        wrong = await _call(h, "SendMessage", to="hal", message=bogus)
        assert wrong.is_error and "is not a plan hal sent" in wrong.content
        answer = {"type": "plan_approval_response", "request_id": request, "approve": True}
        approved = await _call(h, "SendMessage", to="hal", message=answer)
        assert "approved" in approved.content
        await wait_until(target.exists, what="hal's write after the approval")
        # Its own policy moved; the lead's is untouched, and the member records the new mode.
        assert str(h.policy.mode) == "bypassPermissions"
        team = h.agents.teams.roster.team()
        assert next(m for m in team.members if m.name == "hal").mode == "bypassPermissions"
