"""The watchdog for agents: a stalled agent's owner is told at the first limit, and the agent
is stopped at the second."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from helpers import TIME_FACTOR, harness, main_context
from taskloom.agents.service import SpawnRequest
from taskloom.agents.watch import agent_watch_settings
from taskloom.models.base import ModelRequest
from taskloom.models.scripted import FunctionModel, ToolCall, Turn
from taskloom.tasks.types import AgentTaskState, TaskStatus


async def test_a_stalled_agent_is_told_of_then_stopped(tmp_path: Path) -> None:
    stalled = asyncio.Event()

    async def respond(request: ModelRequest) -> Turn | str:
        if "stall please" not in str(request.messages[0].content):
            return "main"
        if len(request.messages) == 1:
            return Turn(tool_calls=(ToolCall("Bash", {"command": "echo working"}),))
        stalled.set()
        await asyncio.sleep(120)  # a model that never answers: the watchdog's to end
        return "too late"

    watch = {"agents": {"notifyAfterMs": 1000, "stopAfterMs": 3000, "checkEveryMs": 100}}
    settings = json.dumps({"watchdog": watch})
    async with harness(tmp_path, FunctionModel(respond), settings=settings) as h:
        launched = await h.agents.spawn(
            SpawnRequest(description="staller", prompt="stall please", run_in_background=True),
            main_context(h),
        )
        await asyncio.wait_for(stalled.wait(), 10)
        began, stalled_at = time.monotonic(), time.time()
        state = await h.runtime.wait(launched.agent_id, timeout=20)
        took = time.monotonic() - began
        notes = h.runtime.notifications.pending(h.session_id)
    assert state.status == TaskStatus.KILLED
    assert isinstance(state, AgentTaskState) and state.stopped_reason is not None
    assert "no progress" in state.stopped_reason and "3 s" in state.stopped_reason
    assert 2.0 <= took <= 10.0 * TIME_FACTOR, took
    stall = [n for n in notes if n.kind == "stall"]
    assert len(stall) == 1 and stall[0].priority == "next"
    assert "has made no progress for 1 s" in stall[0].text
    assert "it is stopped after 3 s" in stall[0].text
    # At the first limit, not the stop.
    assert 0.5 <= stall[0].created_at - stalled_at <= 1.0 + 1.5 * TIME_FACTOR
    ended = [n for n in notes if n.kind == "terminal"]
    assert len(ended) == 1 and "was stopped: it made no progress" in ended[0].text


def test_the_agent_watchdog_is_off_unless_set_and_reads_the_shell_watchdog_s_shape() -> None:
    assert agent_watch_settings({}) is None
    assert agent_watch_settings({"watchdog": {"agents": {}}}) is None
    assert agent_watch_settings({"watchdog": {"agents": {"notifyAfterMs": 2000}}}) == (
        2.0,
        None,
        5.0,
    )
    # A stop before the notice stops at the notice; nonsense is ignored.
    assert agent_watch_settings(
        {"watchdog": {"agents": {"notifyAfterMs": 5000, "stopAfterMs": 1000, "checkEveryMs": True}}}
    ) == (5.0, 5.0, 5.0)


async def test_a_parent_waiting_on_a_working_child_is_not_stalled(tmp_path: Path) -> None:
    async def respond(request: ModelRequest) -> Turn | str:
        first = str(request.messages[0].content)
        turns = sum(1 for m in request.messages if m.role == "assistant")
        if "parent job" in first:
            if turns == 0:  # the child, in the foreground: the parent waits on it
                return Turn(tool_calls=(ToolCall("Agent", {"description": "child",
                                                           "prompt": "child job"}),))  # fmt: skip
            return "parent done"
        if turns < 12:  # the child works on, a step every 0.25 s, for about 3 s
            return Turn(tool_calls=(ToolCall("Bash", {"command": "sleep 0.25"}),))
        return "child done"

    watch = {"agents": {"notifyAfterMs": 1500, "stopAfterMs": 2000, "checkEveryMs": 100}}
    settings = json.dumps({"watchdog": watch, "allowNestedAgents": True})
    async with harness(tmp_path, FunctionModel(respond), settings=settings) as h:
        launched = await h.agents.spawn(
            SpawnRequest(description="parent", prompt="parent job", run_in_background=True),
            main_context(h),
        )
        state = await h.runtime.wait(launched.agent_id, timeout=30)
        notes = h.runtime.notifications.pending(h.session_id)
    assert state.status == TaskStatus.COMPLETED, getattr(state, "stopped_reason", None)
    assert [n for n in notes if n.kind == "stall"] == []


async def test_an_agent_whose_long_command_prints_is_not_stalled(tmp_path: Path) -> None:
    def respond(request: ModelRequest) -> Turn | str:
        if "print on" not in str(request.messages[0].content):
            return "main"
        if len(request.messages) == 1:  # about 3 s in the foreground, a line every 0.2 s
            loop = "for i in $(seq 15); do echo step $i; sleep 0.2; done"
            return Turn(tool_calls=(ToolCall("Bash", {"command": loop}),))
        return "printed it all"

    watch = {"agents": {"notifyAfterMs": 1000, "stopAfterMs": 2000, "checkEveryMs": 100}}
    settings = json.dumps({"watchdog": watch})
    async with harness(tmp_path, FunctionModel(respond), settings=settings) as h:
        launched = await h.agents.spawn(
            SpawnRequest(description="printer", prompt="print on", run_in_background=True),
            main_context(h),
        )
        state = await h.runtime.wait(launched.agent_id, timeout=20)
        notes = h.runtime.notifications.pending(h.session_id)
    assert state.status == TaskStatus.COMPLETED, state
    assert isinstance(state, AgentTaskState) and state.result == "printed it all"
    assert not [n for n in notes if n.kind == "stall"]
