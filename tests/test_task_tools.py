"""TaskOutput, TaskStop and the job profile, over real shell tasks."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from helpers import TIME_FACTOR, file_contains, wait_until
from taskloom.engine import Engine, EngineConfig
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.shell import run_shell
from taskloom.testing import ScriptedModel, ToolCall, Turn
from taskloom.tools.base import ToolContext, ToolResult
from taskloom.tools.bash import BashTool
from taskloom.tools.jobs import JobKillTool, JobListTool, JobOutputTool
from taskloom.tools.registry import core_tools
from taskloom.tools.tasks import TaskOutputTool, TaskStopTool


def ctx(rt: TaskRuntime, owner: str | None = None) -> ToolContext:
    return ToolContext(runtime=rt, owner=owner or rt.session_id, cwd=Path.cwd())


async def call(tool: Any, rt: TaskRuntime, owner: str | None = None, **raw: Any) -> ToolResult:
    params = tool.validate(raw)
    assert not isinstance(params, ToolResult), params
    return await tool.call(params, ctx(rt, owner))


async def test_task_output_blocks_until_the_end_and_returns_new_output_only() -> None:
    async with TaskRuntime() as rt:
        out = await run_shell(rt, "echo one; sleep 0.5; echo two", run_in_background=True)
        await wait_until(file_contains(out.output_file, "one"), what="first line")
        early = await call(TaskOutputTool(), rt, task_id=out.task_id, block=False)
        assert "<retrieval_status>not_ready</retrieval_status>" in early.content
        assert "one" in early.content and "two" not in early.content
        started = time.monotonic()
        done = await call(TaskOutputTool(), rt, task_id=out.task_id, timeout=10_000)
        # Woken by the end, not by the timeout (10 s).
        assert time.monotonic() - started < min(5 * TIME_FACTOR, 10)
        assert "<retrieval_status>success</retrieval_status>" in done.content
        assert "<exit_code>0</exit_code>" in done.content
        assert "two" in done.content and "one" not in done.content  # only what is new
        again = await call(TaskOutputTool(), rt, task_id=out.task_id)
        assert "<output/>" in again.content


async def test_task_output_times_out_with_the_current_state() -> None:
    async with TaskRuntime() as rt:
        out = await run_shell(rt, "sleep 30", run_in_background=True)
        result = await call(TaskOutputTool(), rt, task_id=out.task_id, timeout=200)
        assert "<retrieval_status>timeout</retrieval_status>" in result.content
        assert "<status>running</status>" in result.content
        await rt.kill(out.task_id)


async def test_task_tools_refuse_other_agents_tasks_and_unknown_ids() -> None:
    async with TaskRuntime() as rt:
        out = await run_shell(rt, "sleep 30", run_in_background=True, owner="a11111111")
        stranger = await call(TaskStopTool(), rt, owner="a22222222", task_id=out.task_id)
        assert stranger.is_error and "another agent" in stranger.content
        unknown = await call(TaskOutputTool(), rt, task_id="bnothere0")
        assert unknown.is_error and "No task found with ID: bnothere0" in unknown.content
        stopped = await call(TaskStopTool(), rt, owner="a11111111", task_id=out.task_id)
        assert not stopped.is_error and out.task_id in stopped.content
        assert rt.get(out.task_id).status == "killed"  # type: ignore[union-attr]
        again = await call(TaskStopTool(), rt, shell_id=out.task_id)
        assert again.is_error and "not running" in again.content


def test_task_stop_needs_an_id() -> None:
    result = TaskStopTool().validate({})
    assert isinstance(result, ToolResult) and "task_id" in result.content


async def test_job_profile_over_the_same_runtime() -> None:
    async with TaskRuntime() as rt:
        fast = await run_shell(rt, "echo finished", run_in_background=True, description="fast")
        slow = await run_shell(rt, "sleep 30", run_in_background=True, description="slow")
        await rt.wait(fast.task_id, timeout=10)
        listed = await call(JobListTool(), rt)
        assert fast.task_id in listed.content and slow.task_id in listed.content
        running = await call(JobOutputTool(), rt, job_id=slow.task_id)
        assert "still running" in running.content
        for _ in range(2):  # settled output is returned idempotently
            settled = await call(JobOutputTool(), rt, job_id=fast.task_id)
            assert "completed" in settled.content and "finished" in settled.content
        killed = await call(JobKillTool(), rt, job_id=slow.task_id)
        assert "Cancelled" in killed.content and "killed" in killed.content
    names = [t.name for t in core_tools("jobs")]
    assert {"job_output", "job_list", "job_kill"} <= set(names) and "TaskOutput" not in names


async def test_cancelling_the_run_kills_its_foreground_command() -> None:
    model = ScriptedModel([Turn(tool_calls=(ToolCall("Bash", {"command": "sleep 30"}),)), "x"])
    async with TaskRuntime() as rt:
        engine = Engine(
            EngineConfig(
                model=model,
                system_prompt="",
                tools=[BashTool()],
                owner=rt.session_id,
                cwd=Path.cwd(),
            ),
            rt,
        )

        async def drive() -> list[Any]:
            return [e async for e in engine.run("go")]

        running = asyncio.create_task(drive())
        sub = rt.subscribe()
        while True:
            event = await sub.get(timeout=10)
            assert event is not None
            if event.state.status == "running":
                break
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        assert rt.get(event.state.id).status == "killed"  # type: ignore[union-attr]


async def test_a_shell_stopped_by_its_owners_task_stop_sends_no_notification() -> None:
    # The TaskStop result is the notice; a `killed` notification afterwards would tell the
    # model of its own act a second time (as the reference: a killed shell is marked notified).
    async with TaskRuntime() as rt:
        out = await run_shell(rt, "sleep 30", run_in_background=True, owner="a11111111")
        stopped = await call(TaskStopTool(), rt, owner="a11111111", task_id=out.task_id)
        assert not stopped.is_error
        state = rt.get(out.task_id)
        assert state is not None and state.status == "killed" and state.notified
        assert [n for n in rt.notifications.pending() if n.task_id == out.task_id] == []
        job = await run_shell(rt, "sleep 30", run_in_background=True)
        await call(JobKillTool(), rt, job_id=job.task_id)
        assert [n for n in rt.notifications.pending() if n.task_id == job.task_id] == []
        # Stopped by someone else (the main thread stopping an agent's command): news to
        # the agent that started it, which is notified.
        theirs = await run_shell(rt, "sleep 30", run_in_background=True, owner="a11111111")
        await call(TaskStopTool(), rt, task_id=theirs.task_id)
        notes = [n for n in rt.notifications.pending() if n.task_id == theirs.task_id]
        assert len(notes) == 1 and notes[0].owner == "a11111111", notes


async def test_a_shell_ended_by_anything_else_still_notifies_once() -> None:
    # The output cap's watchdog and a stop from outside the conversation (the user, a parent's
    # end) are news to the model: each is notified exactly once.
    async with TaskRuntime(output_cap=4096) as rt:
        capped = await run_shell(rt, "yes", run_in_background=True)
        await rt.wait(capped.task_id, 30 * TIME_FACTOR)
        user = await run_shell(rt, "sleep 30", run_in_background=True)
        await rt.kill(user.task_id)
        for task_id in (capped.task_id, user.task_id):
            notes = [n for n in rt.notifications.pending() if n.task_id == task_id]
            assert len(notes) == 1 and "<status>killed</status>" in notes[0].text, notes
