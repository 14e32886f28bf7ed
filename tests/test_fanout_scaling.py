"""A fan-out's cost per agent does not grow with the number of agents (counted, not timed).

The quadratic costs a fan-out had were passes over every task or every pending row of the
session made once per agent or per event: an agent's turn asking for its own tasks, a spawn
counting the live agents, the main thread asking which of its tasks still run each time one
ended, an agent looking at its mailbox while thousands of notifications waited for the main
thread. These tests count such passes (every state of the task table read; every pending row
of the mailbox read) over a whole fan-out, and over the owner-scoped questions themselves.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import harness
from taskloom.engine import UserTurn
from taskloom.models import scripted
from taskloom.tasks import _pending, _table
from taskloom.tasks.owner_wait import OwnerWait
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.statuses import TaskBoard
from taskloom.tasks.types import ShellTaskState, TaskStatus, TaskType


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often every task state, or every pending row of any recipient, was read."""
    seen: Counter[str] = Counter()
    values = _table.TaskTable.values
    select = _pending.PendingRows.select

    def all_states(self: _table.TaskTable) -> Any:
        seen["tasks"] += 1
        return values(self)

    def rows(self: _pending.PendingRows[Any], recipient: str | None, kinds: Any) -> Iterator[Any]:
        if recipient is None:
            seen["mail"] += 1
        return select(self, recipient, kinds)

    monkeypatch.setattr(_table.TaskTable, "values", all_states)
    monkeypatch.setattr(_pending.PendingRows, "select", rows)
    return seen


async def _fan_out(cwd: Path, n: int) -> tuple[int, Counter[str]]:
    """Run a main thread that launches ``n`` background agents; its notifications, per agent."""
    calls = [
        scripted.ToolCall(
            "Agent",
            {"description": f"job {i}", "prompt": f"Do job {i}.", "run_in_background": True},
        )
        for i in range(n)
    ]
    model = scripted.ScriptedModel(
        [scripted.Turn(tool_calls=tuple(calls)), "Waiting.", "All reported."],
        subagents={"general-purpose": [scripted.Turn(text="done")] * n},
    )
    settings = json.dumps({"maxConcurrentAgents": n, "maxAgentsPerTurn": n})
    delivered: Counter[str] = Counter()
    async with harness(cwd, model, settings=settings) as h:
        async for event in h.run(f"Start {n} agents."):
            if isinstance(event, UserTurn):
                delivered.update(note.task_id for note in event.notifications)
    return len(model.requests), delivered


async def test_a_fan_out_reads_no_more_of_the_session_as_it_grows(
    tmp_path: Path, passes: Counter[str]
) -> None:
    counts = {}
    for n in (8, 40):
        passes.clear()
        requests, delivered = await _fan_out(tmp_path / str(n), n)
        assert len(delivered) == n and set(delivered.values()) == {1}  # each told once
        assert requests <= 3
        counts[n] = dict(passes)
    # Whatever reads the whole session does so a fixed number of times, not once per agent.
    assert counts[40] == counts[8]


async def test_an_owner_s_questions_read_only_its_own_tasks(passes: Counter[str]) -> None:
    async with TaskRuntime() as rt:
        for i in range(300):  # another owner's many tasks, most ended
            task_id = rt.new_id(TaskType.LOCAL_BASH)
            rt.register(
                ShellTaskState(
                    id=task_id, owner="a-other", description=f"job {i}", status=TaskStatus.RUNNING
                )
            )
            if i % 3:
                rt.update(task_id, lambda s: s.replace(status=TaskStatus.COMPLETED, exit_code=0))
        mine = rt.new_id(TaskType.LOCAL_BASH)
        rt.register(ShellTaskState(id=mine, owner="a-mine", status=TaskStatus.RUNNING))
        passes.clear()
        assert [s.id for s in rt.live("a-mine")] == [mine]
        assert [s.id for s in rt.list(owner="a-mine")] == [mine]
        assert rt.has_live_tasks("a-mine") and not rt.has_live_tasks("a-nobody")
        assert rt.live_counts() == {TaskType.LOCAL_BASH: 101}
        assert OwnerWait(rt, "a-mine", {}, listens=True).must_wait()
        assert TaskBoard(rt, "a-mine").block() is not None
        assert not rt.mailbox.has_pending("a-mine") and rt.mailbox.pending("a-mine") == []
        assert rt.notifications.has_pending("a-other")
        assert passes == Counter()
