"""``taskloom tasks``: what a task's kind adds after its status, read back from the store."""

from __future__ import annotations

import json

import pytest

from taskloom.cli.tasks_cmd import DEFAULT_PAGE, list_tasks
from taskloom.store import Store
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.types import ShellTaskState, TaskStatus, TaskType
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


def _many(store: Store, n: int, session: str = "s1") -> list[str]:
    """``n`` ended shell tasks of ``session``, started one second apart (oldest first)."""
    ids = [f"b{session[-1]}{i:07d}" for i in range(n)]
    for i, task_id in enumerate(ids):
        state = ShellTaskState(
            id=task_id,
            session_id=session,
            owner=session,
            description=f"job {i}",
            status=TaskStatus.COMPLETED,
            start_time=1000.0 + i,
        )
        store.upsert_task(state.to_dict())
    return ids


def test_the_table_shows_one_page_and_says_how_to_see_the_next(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    ids = _many(store, DEFAULT_PAGE + 50)
    assert list_tasks(session="s1", all_sessions=False, as_json=False) == 0
    table = capsys.readouterr().out
    shown = [task_id for task_id in ids if task_id in table]
    assert shown == ids[:DEFAULT_PAGE]
    assert f"Rows 1-{DEFAULT_PAGE} of {len(ids)} (--offset {DEFAULT_PAGE} for the next" in table

    assert list_tasks(session="s1", all_sessions=False, as_json=False, offset=DEFAULT_PAGE) == 0
    table = capsys.readouterr().out
    assert [task_id for task_id in ids if task_id in table] == ids[DEFAULT_PAGE:]
    assert f"Rows {DEFAULT_PAGE + 1}-{len(ids)} of {len(ids)} (--limit 0 for all)" in table

    assert list_tasks(session="s1", all_sessions=False, as_json=False, limit=0) == 0
    table = capsys.readouterr().out
    assert [task_id for task_id in ids if task_id in table] == ids
    assert "Rows" not in table


def test_json_gives_every_row_unless_a_page_is_asked_for(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = _many(store, DEFAULT_PAGE + 5)
    assert list_tasks(session="s1", all_sessions=False, as_json=True) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == ids
    assert list_tasks(session="s1", all_sessions=False, as_json=True, limit=3, offset=4) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == ids[4:7]
    assert list_tasks(session="s1", all_sessions=False, as_json=False, offset=len(ids)) == 0
    assert "No tasks in session s1 past the first" in capsys.readouterr().out


def test_the_store_pages_and_counts_a_session_s_tasks(store: Store) -> None:
    ids = _many(store, 7)
    _many(store, 2, session="s2")
    assert [t["id"] for t in store.list_tasks("s1", limit=3)] == ids[:3]
    assert [t["id"] for t in store.list_tasks("s1", limit=3, offset=5)] == ids[5:]
    assert [t["id"] for t in store.list_tasks("s1", offset=6)] == ids[6:]
    assert store.list_tasks("s1", limit=0) == []
    assert (store.count_tasks("s1"), store.count_tasks("s2"), store.count_tasks()) == (7, 2, 9)
