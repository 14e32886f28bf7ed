"""A workflow under the session's budget: it starts no more agents once the budget ran out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil

from helpers import TIME_FACTOR, harness, main_context
from taskloom.agents.inputs.workflow_tool import WorkflowInput
from taskloom.agents.workflow_tool import WorkflowTool
from taskloom.models.base import ModelRequest
from taskloom.tasks.types import TaskStatus
from taskloom.testing import FunctionModel, ToolCall, Turn


def _tool(h: Any) -> WorkflowTool:
    return next(t for t in h.tools if t.name == "Workflow")


def _busy(request: ModelRequest) -> Turn:
    """An agent that never ends by itself: a short command a turn, 500 tokens a response."""
    usage = {"input_tokens": 450, "output_tokens": 50}
    work = ToolCall("Bash", {"command": "sleep 0.05"})
    return Turn(tool_calls=(work,), usage=usage)  # type: ignore[arg-type]


async def test_a_spent_session_budget_stops_the_workflow_and_says_so(tmp_path: Path) -> None:
    async with harness(tmp_path, FunctionModel(_busy), max_budget_tokens=3000) as h:
        tool = _tool(h)
        params = WorkflowInput(description="busy", items=list(range(20)), prompt="{item}")
        params = params.model_copy(update={"concurrency": 3})
        result = await tool.call(params, main_context(h))
        assert not result.is_error, result.content
        flow = result.data["taskId"]
        state = await h.runtime.wait(flow, 30 * TIME_FACTOR)
        assert state.status == TaskStatus.KILLED, state
        # It started no agent after the budget ran out: the three it ran at once, no more.
        agents = [s for s in h.runtime.list(include_evicted=True) if s.owner == flow]
        assert len(agents) == 3, [a.id for a in agents]
        assert all(a.status == TaskStatus.KILLED for a in agents)
        # Nothing of theirs runs on: no task, and no process of this session's commands.
        assert [s.id for s in h.runtime.list() if not s.terminal] == []
        shells = [
            p for p in psutil.Process().children(recursive=True) if "sleep" in " ".join(p.cmdline())
        ]
        assert shells == []
        # One notification: which budget ended it, and how far it got.
        notes = [n for n in h.runtime.drain() if n.task_id == flow]
        assert len(notes) == 1, notes
        text = notes[0].text
        assert "<status>killed</status>" in text
        assert "was stopped: the token budget of the session ran out" in text
        assert "it started no more agents" in text and "(3/20 done, 3 failed)" in text
        assert "3 of 20 items ran, 0 completed, 3 failed" in text  # what it has, as a result
        await h.end()
