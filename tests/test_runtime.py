"""The TaskRuntime: registration, atomic updates, owners, waits, eviction, resume."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from taskloom.errors import InvalidTransition, TaskAccessDenied, TaskNotFound
from taskloom.tasks.agent import PANEL_GRACE_S
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.types import AgentTaskState, ShellTaskState, TaskStatus, TaskType
from taskloom.testing import FakeClock

SCRIPT = Path(__file__).with_name("session_script.py")


def shell(rt: TaskRuntime, **kw: object) -> ShellTaskState:
    fields: dict[str, object] = {
        "id": rt.new_id(TaskType.LOCAL_BASH),
        "owner": rt.session_id,
        "status": TaskStatus.RUNNING,
        "description": "job",
    }
    fields.update(kw)
    return rt.register(ShellTaskState(**fields))  # type: ignore[arg-type]


def done(s: ShellTaskState) -> ShellTaskState:
    return s.replace(status=TaskStatus.COMPLETED, exit_code=0)


async def test_update_is_atomic_and_skips_no_ops() -> None:
    async with TaskRuntime() as rt:
        state = shell(rt)
        sub = rt.subscribe()
        same = rt.update(state.id, lambda s: s)
        equal = rt.update(state.id, lambda s: s.replace(description="job"))
        assert same is state and equal is state
        assert await sub.get(timeout=0.01) is None  # nothing published
        new = rt.update(state.id, lambda s: s.replace(description="renamed"))
        assert new is not None and new.description == "renamed"
        event = await sub.get(timeout=1)
        assert event is not None and event.kind == "updated"
        assert rt.update("bnotthere", done) is None


async def test_every_illegal_transition_through_update_raises() -> None:
    async with TaskRuntime() as rt:
        for old in TaskStatus:
            for new in TaskStatus:
                allowed = old == new or (old, new) in {
                    (TaskStatus.PENDING, TaskStatus.RUNNING),
                    (TaskStatus.PENDING, TaskStatus.FAILED),
                    (TaskStatus.PENDING, TaskStatus.KILLED),
                    (TaskStatus.RUNNING, TaskStatus.COMPLETED),
                    (TaskStatus.RUNNING, TaskStatus.FAILED),
                    (TaskStatus.RUNNING, TaskStatus.KILLED),
                }
                state = shell(rt, status=old)
                if allowed:
                    assert rt.update(state.id, lambda s, n=new: s.replace(status=n)) is not None
                else:
                    with pytest.raises(InvalidTransition):
                        rt.update(state.id, lambda s, n=new: s.replace(status=n))
                    assert rt.get(state.id).status == old  # type: ignore[union-attr]


async def test_terminal_transition_stamps_end_and_notifies_exactly_once() -> None:
    async with TaskRuntime() as rt:
        state = shell(rt)
        ended = rt.update(state.id, done)
        assert ended is not None and ended.notified and ended.end_time is not None
        # Racing paths that try to end it again change nothing.
        with pytest.raises(InvalidTransition):
            rt.update(state.id, lambda s: s.replace(status=TaskStatus.KILLED))
        assert (await rt.kill(state.id)).status == TaskStatus.COMPLETED
        notes = rt.drain()
        assert len(notes) == 1 and notes[0].task_id == state.id
        assert "<status>completed</status>" in notes[0].text


async def test_wait_is_woken_by_the_transition_and_times_out_bounded() -> None:
    async with TaskRuntime() as rt:
        state = shell(rt)
        assert (await rt.wait(state.id, timeout=0.05)).status == TaskStatus.RUNNING
        waiter = asyncio.create_task(rt.wait(state.id, timeout=30))
        await asyncio.sleep(0)
        rt.update(state.id, done)
        result = await asyncio.wait_for(waiter, 1)
        assert result.status == TaskStatus.COMPLETED
        with pytest.raises(TaskNotFound):
            await rt.wait("bmissing0", timeout=1)


async def test_owner_scoping_for_reading_stopping_and_notification() -> None:
    async with TaskRuntime() as rt:
        state = shell(rt, owner="a1234567")
        assert rt.get(state.id, caller="a1234567") is not None
        assert rt.get(state.id, caller=rt.session_id) is not None
        with pytest.raises(TaskAccessDenied):
            rt.get(state.id, caller="a7654321")
        with pytest.raises(TaskAccessDenied):
            await rt.kill(state.id, caller="a7654321")
        assert not rt.get(state.id).terminal  # type: ignore[union-attr]
        rt.update(state.id, done)
        assert rt.drain(owner="a7654321") == []
        assert [n.owner for n in rt.drain(owner="a1234567")] == ["a1234567"]


async def test_kill_without_handle_and_kill_owned() -> None:
    async with TaskRuntime() as rt:
        a = shell(rt, owner="a0000001")
        b = shell(rt, owner="a0000001")
        c = shell(rt, owner="a0000002")
        killed = await rt.kill_owned("a0000001")
        assert {s.id for s in killed} == {a.id, b.id}
        assert all(s.status == TaskStatus.KILLED for s in killed)
        assert rt.get(c.id).status == TaskStatus.RUNNING  # type: ignore[union-attr]


async def test_eviction_after_delivery_and_agent_grace_period() -> None:
    clock = FakeClock()
    async with TaskRuntime(clock=clock, sweep_interval=10) as rt:
        sh = shell(rt)
        agent = rt.register(
            AgentTaskState(
                id=rt.new_id(TaskType.LOCAL_AGENT),
                owner=rt.session_id,
                description="look",
                status=TaskStatus.RUNNING,
            )
        )
        running = shell(rt)
        rt.update(sh.id, done)
        rt.update(agent.id, lambda s: s.replace(status=TaskStatus.COMPLETED, result="42"))
        assert not rt.evict(running.id)  # a running task stays
        batch = rt.drain()
        rt.ack(batch)
        ids = {s.id for s in rt.list()}
        assert sh.id not in ids  # evicted once delivered
        assert agent.id in ids  # the panel grace period holds it
        # Evicted tasks are still readable from the store.
        assert rt.get(sh.id).status == TaskStatus.COMPLETED  # type: ignore[union-attr]
        await clock.wait_for_sleepers(1)  # the periodic sweep is parked
        await clock.advance(PANEL_GRACE_S + 10)  # ...and runs
        assert agent.id not in {s.id for s in rt.list()}
        assert {s.id for s in rt.list(include_evicted=True)} == {sh.id, agent.id, running.id}


async def test_resume_merges_and_returns_to_running_under_the_same_id() -> None:
    async with TaskRuntime() as rt:
        first = rt.register(
            AgentTaskState(
                id=rt.new_id(TaskType.LOCAL_AGENT),
                owner=rt.session_id,
                description="dig",
                status=TaskStatus.RUNNING,
                name="digger",
                start_time=1000.0,
            )
        )
        rt.update(first.id, lambda s: s.replace(status=TaskStatus.COMPLETED, result="r"))
        assert len(rt.drain()) == 1
        again = rt.register(
            AgentTaskState(
                id=first.id,
                owner=rt.session_id,
                description="dig more",
                status=TaskStatus.RUNNING,
            )
        )
        assert again.status == TaskStatus.RUNNING and again.description == "dig more"
        # The start time survives; what the new registration says (no name) replaces the old.
        assert (again.start_time, again.name, again.result) == (1000.0, None, None)
        assert not again.notified and again.end_time is None
        rt.update(again.id, lambda s: s.replace(status=TaskStatus.COMPLETED, result="r2"))
        notes = rt.drain()
        assert len(notes) == 1 and "r2" in notes[0].text
        with pytest.raises(InvalidTransition):
            rt.register(ShellTaskState(id=shell(rt).id, status=TaskStatus.PENDING))


async def test_subscribe_stream_is_bounded_and_keeps_the_newest() -> None:
    async with TaskRuntime() as rt:
        sub = rt.subscribe(maxlen=3)
        state = shell(rt)
        for i in range(10):
            rt.update(state.id, lambda s, i=i: s.replace(description=f"d{i}"))
        events = [await sub.get(timeout=1) for _ in range(3)]
        assert [e.state.description for e in events if e] == ["d7", "d8", "d9"]
        assert sub.lagged == 8
        sub.close()
        assert await sub.get(timeout=1) is None


async def test_session_sigkilled_with_undelivered_notifications_replays_exactly_those() -> None:
    session_id = str(uuid.uuid4())
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "notify", session_id], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "session script died"
    info = json.loads(line)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()
    async with TaskRuntime(session_id=session_id) as rt:
        replayed = rt.drain()
        assert sorted(n.task_id for n in replayed) == sorted(info["undelivered"])
        assert len(replayed) == 3
        assert not set(info["delivered"]) & {n.task_id for n in replayed}
        rt.ack(replayed)
    # Acknowledged now: a second resume replays nothing.
    async with TaskRuntime(session_id=session_id) as rt:
        assert rt.drain() == []


async def test_resumed_session_notifies_tasks_that_died_with_it() -> None:
    session_id = str(uuid.uuid4())
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "orphans", session_id],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    info = json.loads(proc.stdout.readline())
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()
    async with TaskRuntime(session_id=session_id) as rt:
        notes = rt.drain()
        assert [n.task_id for n in notes] == [info["task_id"]]
        assert "<status>killed</status>" in notes[0].text
