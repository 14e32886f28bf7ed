"""``taskloom tasks``: what a task's kind adds after its status, read back from the store."""

from __future__ import annotations

import json

import pytest

from taskloom.cli.tasks_cmd import list_tasks
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.types import TaskStatus, TaskType
from taskloom.tasks.workflow import WorkflowTaskState


async def test_a_workflow_s_done_of_total_is_listed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # a row on one line
    async with TaskRuntime() as rt:
        flow = rt.new_id(TaskType.LOCAL_WORKFLOW)
        state = WorkflowTaskState(
            id=flow, owner=rt.session_id, status=TaskStatus.RUNNING, description="fan out"
        )
        rt.register(state.replace(total=50, concurrency=8))
        rt.update(flow, lambda s: s.replace(done=12, failed=1, running=8))
        rt.store.flush()
        assert list_tasks(session=rt.session_id, all_sessions=False, as_json=True) == 0
        (row,) = json.loads(capsys.readouterr().out)
        assert (row["id"], row["status"], row["status_note"]) == (flow, "running", "12/50")
        assert list_tasks(session=rt.session_id, all_sessions=False, as_json=False) == 0
        table = capsys.readouterr().out
        assert flow in table and "running 12/50" in table
        rt.update(flow, lambda s: s.replace(status=TaskStatus.KILLED))
