"""Coordinator mode: end to end through ``taskloom -p --coordinator``, and its switches."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from coordinator_scenario import (
    FAST_RESULT,
    FINAL,
    FOLLOW_UP,
    FOLLOW_UP_RESULT,
    SLOW_COMMAND,
    CoordinatorScript,
    coordinator_argv,
    parse_events,
    texts,
)
from fake_servers import FakeAnthropicServer
from helpers import clean_env, harness, main_context, run_processes, wait_until
from taskloom.agents.coordinator import (
    WORKER_TYPE,
    coordinator_catalog,
    coordinator_enabled,
    worker_context,
)
from taskloom.agents.loader import load_agents
from taskloom.agents.service import SpawnRequest
from taskloom.cli.print_mode import init_event
from taskloom.testing import FunctionModel, ScriptedModel


def _notes(events: list[dict[str, Any]]) -> list[str]:
    """The main thread's notification texts, as the stream showed its user messages."""
    found = []
    for event in events:
        if event.get("type") == "user" and not event.get("parent_tool_use_id"):
            found += [t for t in texts(event["message"]["content"]) if "<task-notification>" in t]
    return found


@pytest.mark.e2e
def test_coordinator_end_to_end_through_print_mode(tmp_path: Path) -> None:
    script = CoordinatorScript()
    with FakeAnthropicServer(responder=script) as server:
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="test")
        env["TASKLOOM_HOME"] = str(tmp_path / "home")
        proc = subprocess.run(
            [sys.executable, "-m", "taskloom", *coordinator_argv()],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env=env,
        )
    assert proc.returncode == 0, proc.stderr
    events = parse_events(proc.stdout)
    assert events[-1]["type"] == "result" and events[-1]["result"] == FINAL

    # The first request offers exactly the three tools, and the worker type.
    first = script.coordinator_requests[0]
    tools = {t["name"]: t for t in first["tools"]}
    assert sorted(tools) == ["Agent", "SendMessage", "TaskStop"]
    assert f"- {WORKER_TYPE}:" in tools["Agent"]["description"]
    assert "run_in_background" not in tools["Agent"]["input_schema"]["properties"]
    assert "Workers have access to: " in json.dumps(first["system"])

    # Both workers ran in the background: the Agent results are launches.
    launches = [
        t
        for e in events
        if e.get("type") == "user" and not e.get("parent_tool_use_id")
        for t in texts(e["message"]["content"])
        if "Async agent launched successfully" in t
    ]
    assert len(launches) == 2
    fast_id, slow_id = (line.split()[1] for t in launches for line in t.splitlines()[1:2])

    notes = _notes(events)
    fast_notes = [n for n in notes if f"<task-id>{fast_id}</task-id>" in n]
    assert len(fast_notes) == 2  # the first run, then the run the follow-up resumed
    assert f"<result>{FAST_RESULT}</result>" in fast_notes[0]
    assert "<usage><total_tokens>" in fast_notes[0] and "<tool_uses>0</tool_uses>" in fast_notes[0]
    assert f"<result>{FOLLOW_UP_RESULT}</result>" in fast_notes[1]
    # The resumed worker was given the follow-up itself.
    resumed = [b for b in script.worker_requests if FOLLOW_UP in json.dumps(b["messages"])]
    assert resumed and FAST_RESULT in json.dumps(resumed[0]["messages"])

    stopped = [
        t
        for e in events
        if e.get("type") == "user"
        for t in texts(e["message"]["content"])
        if t.startswith("Successfully stopped task:")
    ]
    assert stopped == [f"Successfully stopped task: {slow_id} (slow job)"]
    assert script.alive_before_stop  # the slow worker's command was running ...
    assert script.left_after_stop == []  # ... and was gone before TaskStop answered
    sends = [
        t
        for e in events
        if e.get("type") == "user" and not e.get("parent_tool_use_id")
        for t in texts(e["message"]["content"])
        if "it was resumed in the background with your message" in t
    ]
    assert sends == [
        f"Agent {fast_id} had completed; it was resumed in the background with your message. "
        "You will be notified when it finishes."
    ]
    slow_notes = [n for n in notes if f"<task-id>{slow_id}</task-id>" in n]
    assert len(slow_notes) == 1 and "<status>killed</status>" in slow_notes[0]
    assert "<result>" not in slow_notes[0] and "<usage>" not in slow_notes[0]
    assert 'Agent "slow job" was stopped' in slow_notes[0]
    # Of this run (its mark): another run of the scenario at the same time is not ours.
    assert run_processes(lambda p: p.info["cmdline"] == SLOW_COMMAND.split()) == []


def test_the_switches_of_coordinator_mode() -> None:
    assert coordinator_enabled(True, {}) and not coordinator_enabled(
        False, {"coordinatorMode": True}
    )
    assert coordinator_enabled(None, {"coordinatorMode": True}, env={})
    assert not coordinator_enabled(None, {}, env={})
    assert coordinator_enabled(None, {}, env={"TASKLOOM_COORDINATOR_MODE": "1"})
    assert coordinator_enabled(None, {}, env={"CLAUDE_CODE_COORDINATOR_MODE": "true"})
    assert not coordinator_enabled(None, {}, env={"CLAUDE_CODE_COORDINATOR_MODE": "0"})


def test_the_coordinators_agent_types(tmp_path: Path) -> None:
    agents = tmp_path / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "reviewer.md").write_text("---\nname: reviewer\ndescription: Reviews.\n---\nReview.")
    catalog = coordinator_catalog(load_agents(tmp_path))
    assert catalog.names() == [
        "Explore",
        "Plan",
        "reviewer",
        "taskloom-guide",
        "verification",
        "worker",
    ]
    assert worker_context(["Bash", "Read"], []) == "Workers have access to: Bash, Read"
    assert "MCP servers available to workers: docs" in worker_context(["Bash"], ["docs"])


async def test_a_coordinator_session_offers_three_tools_and_spawns_workers(tmp_path: Path) -> None:
    seen: list[Any] = []

    def respond(request: Any) -> str:
        seen.append(request)
        return "worked"

    async with harness(tmp_path, FunctionModel(respond), coordinator=True) as h:
        assert [t.name for t in h.tools] == ["Agent", "SendMessage", "TaskStop"]
        assert init_event(h)["tools"] == ["Agent", "SendMessage", "TaskStop"]
        assert "worker" in init_event(h)["agents"] and "general-purpose" not in h.agents.catalog
        # No type named: a worker, in the background, whatever run_in_background says.
        result = await h.agents.spawn(
            SpawnRequest(description="d", prompt="p", run_in_background=False), main_context(h)
        )
        agent_tool = next(t for t in h.tools if t.name == "Agent")
        params = agent_tool.validate(
            {"description": "d2", "prompt": "p2", "run_in_background": False}
        )
        raw = await agent_tool.call(params, main_context(h))  # type: ignore[arg-type]
        assert "Async agent launched successfully" in raw.content
        await h.runtime.wait(raw.data["agentId"], 10)
        state = await h.runtime.wait(result.agent_id, 10)
        assert state.agent_type == WORKER_TYPE  # type: ignore[attr-defined]
        worker_tools = {t.name for t in seen[0].tools}
        assert {"Bash", "Read", "Edit", "Write"} <= worker_tools
        assert "You are a worker agent" in seen[0].system


@pytest.mark.parametrize("how", ["setting", "env"])
async def test_coordinator_mode_from_a_setting_or_the_environment(
    tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = {}
    if how == "setting":
        settings["settings"] = json.dumps({"coordinatorMode": True})
    else:
        monkeypatch.setenv("CLAUDE_CODE_COORDINATOR_MODE", "1")
    async with harness(tmp_path, ScriptedModel(["ok"]), **settings) as h:
        assert h.coordinator and [t.name for t in h.tools] == ["Agent", "SendMessage", "TaskStop"]


async def test_task_stop_ends_the_whole_subtree_and_the_childs_notice_reaches_its_owner(
    tmp_path: Path,
) -> None:
    """A parent agent whose child runs a background ``sleep 300``: TaskStop on the parent."""
    parent_requests: list[Any] = []

    def respond(request: Any) -> Any:
        from taskloom.testing import ToolCall, Turn

        description = request.metadata.get("description")
        if description == "parent":
            parent_requests.append(request)
            if len(request.messages) == 1:
                child = {"description": "child", "prompt": "c", "run_in_background": True}
                return Turn(tool_calls=(ToolCall("Agent", child),))
            if len(parent_requests) == 2:
                return Turn(tool_calls=(ToolCall("Bash", {"command": "sleep 302"}),))
            return "parent resumed"
        if description == "child":
            if len(request.messages) == 1:
                bg = {"command": "sleep 300", "run_in_background": True}
                return Turn(tool_calls=(ToolCall("Bash", bg),))
            return Turn(tool_calls=(ToolCall("Bash", {"command": "sleep 301"}),))
        return "main"

    settings = json.dumps({"allowNestedAgents": True})
    async with harness(tmp_path, FunctionModel(respond), settings=settings) as h:
        rt, ctx = h.runtime, main_context(h)
        parent = await h.agents.spawn(
            SpawnRequest(description="parent", prompt="p", run_in_background=True), ctx
        )

        def running(command: str) -> bool:
            return any(
                getattr(s, "command", None) == command and s.status.value == "running"
                for s in rt.list()
            )

        for command in ("sleep 300", "sleep 301", "sleep 302"):
            await wait_until(lambda c=command: running(c), what=command)  # type: ignore[misc]
        tree = rt.subtree(parent.agent_id)
        pids = [s.pid for s in tree if getattr(s, "pid", None)]  # type: ignore[attr-defined]
        assert len(pids) == 3
        stop = next(t for t in h.tools if t.name == "TaskStop")
        answer = await stop.call(stop.validate({"task_id": parent.agent_id}), ctx)  # type: ignore[arg-type]
        assert answer.content == f"Successfully stopped task: {parent.agent_id} (parent)"
        # Verified before the answer: every process of the subtree is gone already.
        assert [
            p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
        ] == []
        assert all(s.terminal for s in rt.subtree(parent.agent_id))
        child = next(s for s in tree if s.description == "child")
        # The child's notice waits in its owner's (the stopped parent's) mailbox ...
        kept = rt.mailbox.parked(parent.agent_id)
        assert not rt.mailbox.has_pending(parent.agent_id)  # set aside: no scan sees it
        assert child.id in [n.sender for n in kept]
        # ... and reaches it when the parent goes on.
        reply = await h.agents.send(parent.agent_id, "go on", ctx)
        assert "resumed" in reply
        await rt.wait(parent.agent_id, 10)
        await wait_until(lambda: rt.get(parent.agent_id).terminal, what="the resumed parent")  # type: ignore[union-attr]
        seen = json.dumps([m.full() for m in parent_requests[-1].messages])
        assert f"<task-id>{child.id}</task-id>" in seen and "<status>killed</status>" in seen


async def test_hooks_see_workers_and_their_tool_calls(tmp_path: Path) -> None:
    from taskloom.testing import ToolCall, Turn

    log = tmp_path / "hooks.jsonl"
    record = {"hooks": [{"type": "command", "command": f"cat >> '{log}'; echo >> '{log}'"}]}
    hooks = {event: [record] for event in ("PreToolUse", "SubagentStart", "SubagentStop")}

    def respond(request: Any) -> Any:
        if request.agent_id is not None and len(request.messages) == 1:
            return Turn(tool_calls=(ToolCall("Bash", {"command": "echo from-worker"}),))
        return "ok"

    settings = json.dumps({"hooks": hooks})
    async with harness(tmp_path, FunctionModel(respond), coordinator=True, settings=settings) as h:
        launched = await h.agents.spawn(SpawnRequest(description="w", prompt="p"), main_context(h))
        await h.runtime.wait(launched.agent_id, 20)
    seen = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    by_event = {e["hook_event_name"]: e for e in seen}
    assert set(by_event) == {"PreToolUse", "SubagentStart", "SubagentStop"}
    pre = by_event["PreToolUse"]
    assert pre["tool_name"] == "Bash" and pre["agent_id"] == launched.agent_id
    assert pre["agent_type"] == WORKER_TYPE
    assert (
        by_event["SubagentStart"]["agent_type"]
        == by_event["SubagentStop"]["agent_type"]
        == WORKER_TYPE
    )


async def test_a_deny_rule_on_workers_holds_when_the_type_is_left_out(tmp_path: Path) -> None:
    from taskloom.testing import ToolCall, Turn

    spawn = ToolCall("Agent", {"description": "d", "prompt": "p"})  # no subagent_type
    model = ScriptedModel([Turn(tool_calls=(spawn,)), "refused"])
    async with harness(tmp_path, model, coordinator=True, disallowed_tools=["Agent(worker)"]) as h:
        events = [e async for e in h.run("go")]
        assert [s for s in h.runtime.list() if s.type.value == "local_agent"] == []
    shown = json.dumps([str(e) for e in events])
    assert "Agent type 'worker' has been denied by permission rule" in shown
