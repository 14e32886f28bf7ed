"""Workflows (``local_workflow``): many subagents as one task, in process.

The acceptance runs through ``taskloom -p`` are in ``test_workflow_e2e.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from helpers import TIME_FACTOR, harness, main_context
from taskloom.agents.inputs.workflow_tool import WorkflowInput
from taskloom.agents.workflow_tool import WorkflowTool, plan, render_prompts
from taskloom.errors import ToolError
from taskloom.models.base import ModelRequest
from taskloom.tasks.kinds import kind_of
from taskloom.tasks.types import AgentTaskState, TaskStatus, TaskType
from taskloom.tasks.workflow import WorkflowTaskState
from taskloom.testing import FunctionModel, ScriptedModel, Turn
from taskloom.tools.base import ToolResult


def _tool(h: Any) -> WorkflowTool:
    return next(t for t in h.tools if t.name == "Workflow")


async def _launch(h: Any, **params: Any) -> ToolResult:
    tool = _tool(h)
    parsed = tool.validate(params)
    assert isinstance(parsed, WorkflowInput), parsed
    return await tool.call(parsed, main_context(h))


def _echo(request: ModelRequest) -> Turn:
    """Each agent answers with the last line of its prompt; the item ``fail`` fails."""
    prompt = request.messages[0].text() if request.messages else ""
    line = prompt.strip().splitlines()[-1]
    if "fail" in line:
        raise RuntimeError("this item fails")
    return Turn(text=f"answer to {line}")


async def test_a_workflow_runs_every_item_and_notifies_once(tmp_path: Path) -> None:
    async with harness(tmp_path, FunctionModel(lambda r: _echo(r))) as h:
        result = await _launch(
            h,
            description="echo items",
            items=["a", {"name": "b"}, 3],
            prompt="Item {index} of {total}:\n{item}",
            concurrency=2,
        )
        assert not result.is_error, result.content
        task_id = result.data["taskId"]
        assert task_id.startswith("w")
        state = await h.runtime.wait(task_id, 30 * TIME_FACTOR)
        assert state.status == TaskStatus.COMPLETED
        assert kind_of(state).status_note(state) == " 3/3"
        text = kind_of(state).result(state) or ""
        assert "3 of 3 items ran, 3 completed, 0 failed" in text
        assert 'answer to {"name": "b"}' in text and "answer to 3" in text
        # Its agents were its own tasks, and where each one's output is is said.
        agents = [s for s in h.runtime.list(include_evicted=True) if s.owner == task_id]
        assert len(agents) == 3
        for agent in agents:
            assert f"{agent.id}: answer to" in text
            assert f"{Path(agent.output_file).parent}/ID.output, ID its agent id below" in text
        # One notification, to the caller; none left for the workflow itself.
        notes = h.runtime.drain()
        assert [n.task_id for n in notes] == [task_id]
        assert "<status>completed</status>" in notes[0].text
        lines = Path(state.output_file).read_text().splitlines()
        outcomes = [json.loads(line) for line in lines if line.startswith("{")]
        assert sorted(o["index"] for o in outcomes) == [0, 1, 2]
        await h.end()


async def test_failures_are_collected_not_fatal(tmp_path: Path) -> None:
    async with harness(tmp_path, FunctionModel(lambda r: _echo(r))) as h:
        result = await _launch(
            h, description="some fail", items=["ok 1", "fail 2", "ok 3"], prompt="{item}"
        )
        state = await h.runtime.wait(result.data["taskId"], 30 * TIME_FACTOR)
        assert state.status == TaskStatus.COMPLETED
        text = kind_of(state).result(state) or ""
        assert "2 completed, 1 failed" in text
        assert "answer to ok 1" in text and "answer to ok 3" in text
        assert "(3/3 done, 1 failed)" in kind_of(state).summary(state)
        await h.end()


async def test_a_reduce_agent_is_given_every_result(tmp_path: Path) -> None:
    seen: list[str] = []

    def respond(request: ModelRequest) -> Turn:
        prompt = request.messages[0].text()
        if prompt.startswith("Combine"):
            seen.append(prompt)
            return Turn(text="combined: all good")
        return _echo(request)

    async with harness(tmp_path, FunctionModel(respond)) as h:
        result = await _launch(
            h, description="map reduce", items=["x", "y"], prompt="{item}", reduce="Combine them."
        )
        assert result.data["agents"] == 3
        state = await h.runtime.wait(result.data["taskId"], 30 * TIME_FACTOR)
        assert state.status == TaskStatus.COMPLETED
        assert len(seen) == 1 and "answer to x" in seen[0] and "answer to y" in seen[0]
        assert "combined: all good" in (kind_of(state).result(state) or "")
        await h.end()


def test_limits_and_templates_are_checked_before_anything_starts() -> None:
    big = WorkflowInput(description="d", items=list(range(2000)), prompt="{item}")
    with pytest.raises(ToolError, match=r"2000 agents.*1000 one workflow.*workflowMaxAgents"):
        plan(big, {})
    assert plan(big, {"workflowMaxAgents": 2000}).total == 2000
    fast = WorkflowInput(description="d", items=[1], prompt="{item}", concurrency=17)
    with pytest.raises(ToolError, match=r"concurrency 17 .* 16 .*workflowMaxConcurrency"):
        plan(fast, {})
    assert plan(fast, {"workflowMaxConcurrency": 256}).concurrency == 17
    with pytest.raises(ToolError, match=r"workflowMaxConcurrency must be a whole number"):
        plan(fast, {"workflowMaxConcurrency": 257})
    assert plan(WorkflowInput(description="d", items=[1], prompt="x"), {}).concurrency == 16
    with pytest.raises(ToolError, match=r"item 2 \(\{\"a\": 1\}\): KeyError: 'b'"):
        render_prompts("{item[b]}", [{"b": 0}, {"a": 1}])
    with pytest.raises(ToolError, match="does not fit item 1"):
        render_prompts("{nope}", ["x"])
    assert render_prompts("{{literal}} {item}", ["x"]) == ("{literal} x",)
    # No attribute is followed into Python objects, directly or after an index.
    for reading in ("{item.__init__.__globals__}", "{item[a].__class__}"):
        with pytest.raises(ToolError, match="reads an attribute"):
            render_prompts(reading, [{"a": "x"}])
    with pytest.raises(ToolError, match="malformed"):
        render_prompts("{item", ["x"])
    assert render_prompts("{item[a.b]}", [{"a.b": 1}]) == ("1",)


async def test_a_refused_workflow_starts_nothing(tmp_path: Path) -> None:
    async with harness(tmp_path, ScriptedModel([])) as h:
        result = await _launch(h, description="d", items=list(range(2000)), prompt="{item}")
        assert result.is_error and "workflowMaxAgents" in result.content
        result = await _launch(h, description="d", items=[1], prompt="{item}", subagent_type="nope")
        assert result.is_error and "nope" in result.content
        assert h.runtime.list(types=[TaskType.LOCAL_WORKFLOW]) == []
        await h.end()


async def test_the_session_limit_on_agents_makes_the_workflow_wait_not_fail(
    tmp_path: Path,
) -> None:
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps({"maxConcurrentAgents": 2}))
    model = FunctionModel(lambda r: Turn(text="done", delay=0.02))
    async with harness(tmp_path, model) as h:
        result = await _launch(
            h, description="squeezed", items=list(range(6)), prompt="{item}", concurrency=4
        )
        flow = result.data["taskId"]
        state = await h.runtime.wait(flow, 30 * TIME_FACTOR)
        assert state.status == TaskStatus.COMPLETED
        assert "6 completed, 0 failed" in (kind_of(state).result(state) or "")
        agents = [s for s in h.runtime.list(include_evicted=True) if s.owner == flow]
        spans = sorted(
            [(s.start_time, 1) for s in agents] + [(s.end_time or 0, -1) for s in agents]
        )
        running = most = 0
        for _, step in sorted(spans, key=lambda m: (m[0], m[1])):
            running += step
            most = max(most, running)
        assert len(agents) == 6 and most <= 2
        await h.end()


async def test_a_workflow_adds_no_level_of_depth(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps({"maxAgentDepth": 1}))
    async with harness(tmp_path, ScriptedModel([])) as h:
        rt, limits = h.runtime, h.agents.spawner.limits
        agent = rt.new_id(TaskType.LOCAL_AGENT)
        rt.register(AgentTaskState(id=agent, owner=h.session_id, status=TaskStatus.RUNNING))
        by_main, by_agent = rt.new_id(TaskType.LOCAL_WORKFLOW), rt.new_id(TaskType.LOCAL_WORKFLOW)
        rt.register(WorkflowTaskState(id=by_main, owner=h.session_id, status=TaskStatus.RUNNING))
        rt.register(WorkflowTaskState(id=by_agent, owner=agent, status=TaskStatus.RUNNING))
        # Its agents are as deep as its caller's would be.
        assert limits.depth(by_main) == limits.depth(h.session_id) == 0
        assert limits.depth(by_agent) == limits.depth(agent) == 1
        limits.admit(by_main).release()  # from the main thread: depth 1, allowed
        with pytest.raises(ToolError, match="at most 1 deep"):
            limits.admit(by_agent)
        for task in (agent, by_main, by_agent):
            rt.update(task, lambda s: s.replace(status=TaskStatus.KILLED))
        await h.end()


async def test_a_subagent_has_workflow_only_where_it_could_nest_agents(tmp_path: Path) -> None:
    from taskloom.agents.filter import filter_tools, restrict_spawns

    async with harness(tmp_path, ScriptedModel([])) as h:
        tools = h.tools

        def names(**kw: Any) -> set[str]:
            return {t.name for t in filter_tools(tools, allowed=None, **kw)}

        assert "Workflow" not in names(is_async=True)
        assert "Workflow" in names(is_async=True, allow_nesting=True)
        limited = {t.name for t in restrict_spawns(tools, ("Explore",))}
        assert "Agent" in limited and "Workflow" not in limited
        assert "Workflow" in {t.name for t in restrict_spawns(tools, None)}
        await h.end()
