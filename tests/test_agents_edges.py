"""Subagent edge cases: permission escalation, hand-off races, kills, late messages."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import clean_env, harness, main_context, scripted_argv, wait_until
from taskloom import Harness
from taskloom.agents.service import SpawnRequest
from taskloom.errors import ToolError
from taskloom.messages import TextBlock, ToolResultBlock
from taskloom.models.base import ModelRequest
from taskloom.tasks.types import AgentTaskState, TaskStatus
from taskloom.testing import FunctionModel, ToolCall, Turn
from taskloom.tools.base import ToolContext


def harness_for(tmp_path: Path, respond: Any, **options: Any) -> Harness:
    return harness(tmp_path, FunctionModel(respond), **options)  # type: ignore[no-any-return]


def valid_conversation(request: ModelRequest) -> None:
    roles = [m.role for m in request.messages]
    assert all(a != b for a, b in itertools.pairwise(roles)), roles
    for i, message in enumerate(request.messages):
        calls = {c.id for c in message.tool_uses()}
        if calls:
            answered = {
                b.tool_use_id
                for b in request.messages[i + 1].content
                if isinstance(b, ToolResultBlock)
            }
            assert calls <= answered


@pytest.mark.e2e
def test_the_model_cannot_loosen_a_subagents_permissions(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        yaml.safe_dump(
            {
                "turns": [
                    {
                        "tool_calls": [
                            {
                                "name": "Agent",
                                "input": {
                                    "description": "sneaky",
                                    "prompt": "x",
                                    "mode": "bypassPermissions",
                                },
                            }
                        ]
                    },
                    {"text": "ok"},
                ],
                "subagents": {
                    "general-purpose": [
                        {"tool_calls": [{"name": "Bash", "input": {"command": "touch escalated"}}]},
                        {"text": "tried"},
                    ]
                },
            }
        )
    )
    env = clean_env()
    proc = subprocess.run(
        scripted_argv(tmp_path / "s.yaml"),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "escalated").exists()
    assert json.loads(proc.stdout.splitlines()[-1])["subtype"] == "success"


async def test_background_from_outside_hands_off_with_one_notification(tmp_path: Path) -> None:
    release = asyncio.Event()

    async def respond(request: ModelRequest) -> str:
        await release.wait()
        return "answer"

    async with harness_for(tmp_path, respond) as h:
        service, rt, ctx = h.agents, h.runtime, main_context(h)
        spawn = asyncio.create_task(service.spawn(SpawnRequest(description="d", prompt="p"), ctx))
        await wait_until(lambda: bool(service.runs), what="agent registered")
        agent_id = next(iter(service.runs))
        assert rt.background(agent_id)
        result = await asyncio.wait_for(spawn, 10)
        assert result.status == "async_launched"
        release.set()
        state = await rt.wait(agent_id, timeout=10)
        assert state.status == TaskStatus.COMPLETED
        notes = rt.drain()
        assert [n.task_id for n in notes] == [agent_id]


async def test_killing_a_foreground_agent_is_an_error_for_the_parent_not_a_crash(
    tmp_path: Path,
) -> None:
    def respond(request: ModelRequest) -> Turn | str:
        return Turn(tool_calls=(ToolCall("Bash", {"command": "sleep 30"}),))

    async with harness_for(tmp_path, respond) as h:
        service, rt, ctx = h.agents, h.runtime, main_context(h)
        spawn = asyncio.create_task(service.spawn(SpawnRequest(description="d", prompt="p"), ctx))
        await wait_until(
            lambda: any(s.type == "local_bash" and s.status == "running" for s in rt.list()),
            what="the agent's command",
        )
        agent_id = next(iter(service.runs))
        await rt.kill(agent_id)
        try:
            await asyncio.wait_for(spawn, 10)
            raised = None
        except ToolError as exc:
            raised = exc
        assert raised is not None and "killed" in str(raised)
        assert rt.get(agent_id).status == TaskStatus.KILLED  # type: ignore[union-attr]


async def killed_background_agent(h: Harness) -> tuple[ToolContext, str]:
    """A background agent killed while its first command runs; its notification delivered."""
    rt, ctx = h.runtime, main_context(h)
    launched = await h.agents.spawn(
        SpawnRequest(description="d", prompt="p", run_in_background=True), ctx
    )
    await wait_until(
        lambda: any(s.type == "local_bash" and s.status == "running" for s in rt.list()),
        what="the agent's command",
    )
    await rt.kill(launched.agent_id)
    rt.ack(rt.drain())
    return ctx, launched.agent_id


async def test_a_killed_agent_resumes_with_a_valid_conversation(tmp_path: Path) -> None:
    def respond(request: ModelRequest) -> Turn | str:
        valid_conversation(request)
        if len(request.messages) == 1:
            return Turn(tool_calls=(ToolCall("Bash", {"command": "sleep 30"}),))
        return "resumed fine"

    async with harness_for(tmp_path, respond) as h:
        rt, service = h.runtime, h.agents
        ctx, agent_id = await killed_background_agent(h)
        await service.send(agent_id, "carry on", ctx)
        await wait_until(lambda: rt.get(agent_id).terminal, what="resumed run")  # type: ignore[union-attr]
        state = rt.get(agent_id)
        assert isinstance(state, AgentTaskState) and state.result == "resumed fine", state


async def test_a_message_sent_while_stop_hooks_run_is_not_lost(tmp_path: Path) -> None:
    marker = tmp_path / "hook-running"
    hooks = {
        "hooks": {
            "SubagentStop": [
                {"hooks": [{"type": "command", "command": f"touch {marker}; sleep 0.5"}]}
            ]
        }
    }

    def respond(request: ModelRequest) -> str:
        last = request.messages[-1]
        text = " ".join(b.text for b in last.content if isinstance(b, TextBlock))
        return "saw the late message" if "late message" in text else "first answer"

    async with harness_for(tmp_path, respond, settings=json.dumps(hooks)) as h:
        service, rt, ctx = h.agents, h.runtime, main_context(h)
        launched = await service.spawn(
            SpawnRequest(description="d", prompt="p", run_in_background=True), ctx
        )
        await wait_until(marker.exists, what="the stop hook to start")
        reply = await service.send(launched.agent_id, "a late message", ctx)
        assert "queued" in reply
        state = await rt.wait(launched.agent_id, timeout=20)
        assert isinstance(state, AgentTaskState) and state.result == "saw the late message"


async def test_two_messages_at_once_to_a_stopped_agent_resume_it_once(tmp_path: Path) -> None:
    seen: list[list[str]] = []

    def respond(request: ModelRequest) -> Turn | str:
        valid_conversation(request)
        if len(request.messages) == 1:
            return Turn(tool_calls=(ToolCall("Bash", {"command": "sleep 30"}),))
        texts = [
            b.text
            for m in request.messages
            if m.role == "user"
            for b in m.content
            if isinstance(b, TextBlock)
        ]
        seen.append(texts)
        return "done with both"

    async with harness_for(tmp_path, respond) as h:
        rt, service = h.runtime, h.agents
        ctx, agent_id = await killed_background_agent(h)
        replies = await asyncio.gather(
            service.send(agent_id, "first message", ctx),
            service.send(agent_id, "second message", ctx),
        )
        await wait_until(lambda: rt.get(agent_id).terminal, what="resumed run")  # type: ignore[union-attr]
    assert sum("was resumed" in r for r in replies) == 1, replies
    assert sum("queued" in r for r in replies) == 1, replies
    # Each message reached the agent once, whichever request it arrived in.
    everything = [t for texts in seen[-1:] for t in texts]
    # The one that found it running came framed ("... sent a message while you were working").
    assert sum(t.count("first message") for t in everything) == 1
    assert sum(t.count("second message") for t in everything) == 1
