"""In-process teammates: their turns, idleness, mail, shutdown and kill, on a real runtime."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import json
import os
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil
from pydantic import Field

from helpers import TIME_FACTOR
from taskloom.agents.bookkeeping import sidechain_path
from taskloom.engine import EngineConfig
from taskloom.errors import ModelError
from taskloom.models.base import ModelRequest
from taskloom.tasks.kinds import kind_for
from taskloom.tasks.mailbox import HELD, MESSAGES, Letter
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.teammate import TeammateKind, TeammateTaskState
from taskloom.tasks.types import ShellTaskState, TaskStatus, TaskType, state_from_dict
from taskloom.teams import protocol
from taskloom.teams.executor import InProcessExecutor, TeammateSpec
from taskloom.teams.teammate import RECENT_LIMIT, TeammateRun
from taskloom.testing import FunctionModel, ToolCall, Turn
from taskloom.tools.base import Tool, ToolContext, ToolInput, ToolResult
from taskloom.tools.bash import BashTool

WAIT_S = 10.0  # bound on every wait for something that should happen at once
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


class EchoInput(ToolInput):
    text: str = Field(default="")


class Echo(Tool[EchoInput]):
    """A tool that answers at once: many turns without a process each."""

    name = "Echo"
    description = "Echo the text."
    Input = EchoInput
    kind = "read"

    async def call(self, params: EchoInput, ctx: ToolContext) -> ToolResult:
        return ToolResult(params.text or "echo")


class ApproveInput(ToolInput):
    request_id: str = Field(default="")


class Approve(Tool[ApproveInput]):
    """Stands for SendMessage's shutdown_response approve: it calls the run's shutdown()."""

    name = "Approve"
    description = "Approve the shutdown."
    Input = ApproveInput
    kind = "read"

    def __init__(self) -> None:
        self.executor: InProcessExecutor | None = None

    async def call(self, params: ApproveInput, ctx: ToolContext) -> ToolResult:
        assert self.executor is not None
        await self.executor.run("alice@crew").shutdown(params.request_id)
        return ToolResult("approved")


Respond = Callable[[ModelRequest], "Turn | str | Awaitable[Any]"]


class Model:
    """A FunctionModel that signals each request it receives (no sleeping to wait for one)."""

    def __init__(self, respond: Respond) -> None:
        self.arrived = asyncio.Event()
        self.respond = respond
        self.inner = FunctionModel(self._answer)

    def _answer(self, request: ModelRequest) -> Any:
        self.arrived.set()
        return self.respond(request)

    @property
    def requests(self) -> list[ModelRequest]:
        return self.inner.requests

    async def next_request(self) -> ModelRequest:
        await asyncio.wait_for(self.arrived.wait(), WAIT_S)
        self.arrived.clear()
        return self.requests[-1]


def config(model: Model, tools: list[Tool[Any]], cwd: Path) -> EngineConfig:
    return EngineConfig(
        model=model.inner,
        system_prompt="You are a teammate.",
        tools=tools,
        owner="",  # the run owns its calls under its task id
        cwd=cwd,
        wait_for_tasks=False,
    )


async def spawn(
    rt: TaskRuntime, model: Model, cwd: Path, tools: list[Tool[Any]] | None = None
) -> tuple[InProcessExecutor, str, str]:
    executor = InProcessExecutor(rt)
    spec = TeammateSpec(
        name="alice",
        team="crew",
        color="blue",
        prompt="Fix the build.",
        config=config(model, tools if tools is not None else [BashTool()], cwd),
    )
    member = await executor.spawn(spec)
    task_id = executor.task_id(member)
    assert task_id is not None
    return executor, member, task_id


async def lead_mail(rt: TaskRuntime) -> list[Letter]:
    """The rows for the lead, waiting (bounded) until there is one."""
    assert await rt.mailbox.wait(WAIT_S, rt.session_id, (*MESSAGES, *HELD))
    return rt.mailbox.take(rt.session_id, (*MESSAGES, *HELD))


def unwrap(letter: Letter, sender: str) -> dict[str, Any]:
    """A protocol message from ``sender``: what code reads of it, and what the model is shown."""
    head = f'<teammate-message teammate_id="{sender}" color="blue">\n'
    body = letter.body
    assert body.startswith(head) and body.endswith("\n</teammate-message>")
    data = protocol.structured(body[len(head) : -len("\n</teammate-message>")])
    assert data is not None
    # An idle notice or a shutdown approval is held for the lead's next turn; the rest wake it.
    held = data["type"] in ("idle_notification", "shutdown_approved")
    kind = "held" if held else "protocol"
    assert (letter.kind, letter.topic, letter.data) == (kind, data["type"], data)
    return data


def state(rt: TaskRuntime, task_id: str) -> TeammateTaskState:
    found = rt.get(task_id)
    assert isinstance(found, TeammateTaskState)
    return found


def no_task_notification(rt: TaskRuntime, task_id: str) -> None:
    assert state(rt, task_id).notified
    assert rt.notifications.pending(rt.session_id) == []
    for letter in rt.mailbox.pending(rt.session_id):
        assert "<task-notification>" not in letter.body


# -- the kind and the protocol ----------------------------------------------------------------


def test_the_kind_is_registered_and_its_records_read_back() -> None:
    assert isinstance(kind_for(TaskType.IN_PROCESS_TEAMMATE), TeammateKind)
    saved = TeammateTaskState(id="t00000001", agent_id="alice@crew", is_idle=True)
    assert state_from_dict(json.loads(json.dumps(saved.to_dict()))) == saved


def test_wrap_escapes_attributes_and_keeps_the_body() -> None:
    wrapped = protocol.wrap('a <b> & "c"', sender='x"y', color="red", summary="<hi> & 'so'")
    assert wrapped == (
        '<teammate-message teammate_id="x&quot;y" color="red" summary="&lt;hi&gt; &amp; \'so\'">'
        '\na <b> & "c"\n</teammate-message>'
    )
    assert protocol.wrap("go", sender="team-lead") == (
        '<teammate-message teammate_id="team-lead">\ngo\n</teammate-message>'
    )


def test_structured_bodies_and_their_builders() -> None:
    assert protocol.structured("plain text") is None
    assert protocol.structured("[1, 2]") is None
    assert protocol.structured('{"type": 3}') is None
    assert protocol.structured("[" * 100_000) is None
    at = 1_700_000_000.123
    assert protocol.timestamp(at) == "2023-11-14T22:13:20.123Z"
    assert protocol.request_id("shutdown", "alice", at) == "shutdown-1700000000123@alice"
    idle = protocol.structured(protocol.idle_notification("alice", "x" * 300, at=at))
    assert idle == {
        "type": "idle_notification",
        "from": "alice",
        "timestamp": "2023-11-14T22:13:20.123Z",
        "idleReason": "available",
        "result": "x" * 199 + "…",
    }
    request = protocol.structured(protocol.shutdown_request("r1", reason="done", at=at))
    assert request is not None and request["from"] == "team-lead" and request["requestId"] == "r1"
    rejected = protocol.structured(protocol.shutdown_rejected("r1", name="a", reason="busy"))
    assert rejected is not None and rejected["type"] == "shutdown_rejected"
    assert rejected["reason"] == "busy" and ISO.match(rejected["timestamp"])
    plan = protocol.structured(protocol.plan_approval_request("p1", name="a", plan="1. x"))
    assert plan is not None and plan["plan"] == "1. x" and plan["requestId"] == "p1"
    answer = protocol.structured(protocol.plan_approval_response("p1", approve=False))
    assert answer == {"type": "plan_approval_response", "request_id": "p1", "approve": False}
    assert protocol.lead_batch(["one", "two"]) == "\n\n".join(
        [protocol.LEAD_PREAMBLE, "one", "two", protocol.LEAD_CLOSING]
    )


# -- the run ----------------------------------------------------------------------------------


async def test_a_turn_on_the_wrapped_prompt_then_an_idle_notification(tmp_path: Path) -> None:
    model = Model(lambda request: "All done: the build is green.")
    async with TaskRuntime() as rt:
        executor, member, task_id = await spawn(rt, model, tmp_path)
        assert member == "alice@crew"
        first = await model.next_request()
        assert first.messages[0].text() == (
            '<teammate-message teammate_id="team-lead">\nFix the build.\n</teammate-message>'
        )
        [letter] = await lead_mail(rt)
        assert (letter.recipient, letter.sender, letter.kind) == (
            rt.session_id,
            "alice@crew",
            "held",  # for the lead's next turn
        )
        idle = unwrap(letter, "alice")
        assert idle["type"] == "idle_notification" and idle["from"] == "alice"
        assert idle["idleReason"] == "available" and ISO.match(idle["timestamp"])
        assert idle["result"] == "All done: the build is green." and "summary" not in idle
        run = executor.run(member)
        assert run.is_idle and state(rt, task_id).is_idle
        assert state(rt, task_id).status == TaskStatus.RUNNING  # idle is not an end
        assert state(rt, task_id).result == "All done: the build is green."
        transcript = sidechain_path(rt, task_id)
        assert "Fix the build." in transcript.read_text()
        await executor.kill(member)
        assert state(rt, task_id).status == TaskStatus.KILLED
        no_task_notification(rt, task_id)


async def test_a_session_without_transcripts_records_no_teammate_s_sidechain(
    tmp_path: Path,
) -> None:
    model = Model(lambda request: "Done.")
    async with TaskRuntime(keep_transcripts=False) as rt:  # --no-session-persistence
        executor, member, task_id = await spawn(rt, model, tmp_path)
        await model.next_request()
        await lead_mail(rt)  # its idle notification: the turn is over
        assert state(rt, task_id).result == "Done."
        assert not sidechain_path(rt, task_id).exists()
        assert not (Path(os.environ["CLAUDE_CONFIG_DIR"]) / "projects").exists()
        await executor.kill(member)


def test_a_pane_teammate_s_spec_carries_whether_its_lead_keeps_transcripts(
    tmp_path: Path,
) -> None:
    from taskloom.teams.join import JoinSpec

    spec = JoinSpec(session="s", team="t", name="n", task_id="k", prompt="p")
    assert spec.keep_transcript
    written = dataclasses.replace(spec, keep_transcript=False).write(tmp_path)
    assert JoinSpec.read(written).keep_transcript is False


async def test_a_message_wakes_an_idle_teammate_at_once(tmp_path: Path) -> None:
    model = Model(lambda request: f"answer {len(request.messages)}")
    async with TaskRuntime() as rt:
        executor, member, _ = await spawn(rt, model, tmp_path)
        await model.next_request()
        await lead_mail(rt)
        assert executor.run(member).is_idle
        body = protocol.wrap("Please also run the tests.", sender="bob", color="green")
        posted = time.monotonic()
        await executor.send(member, body, sender="bob@crew", summary="tests")
        request = await model.next_request()
        assert time.monotonic() - posted < 0.5 * TIME_FACTOR
        assert request.messages[-1].role == "user" and request.messages[-1].text() == body
        [letter] = await lead_mail(rt)
        assert unwrap(letter, "alice")["result"] == "answer 3"


async def test_a_message_sent_while_it_works_arrives_at_its_next_tool_boundary(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    wait_for_gate = f"while [ ! -f {gate} ]; do sleep 0.05; done; echo through"

    def respond(request: ModelRequest) -> Turn | str:
        if len(request.messages) == 1:
            return Turn(tool_calls=(ToolCall("Bash", {"command": wait_for_gate}),))
        return "seen"

    model = Model(respond)
    async with TaskRuntime() as rt:
        executor, member, _ = await spawn(rt, model, tmp_path)
        await model.next_request()  # its command now waits for the gate
        body = protocol.wrap("Stop after this step.", sender="team-lead")
        await executor.send(member, body, sender="team-lead@crew")
        gate.write_text("")
        request = await model.next_request()
        results = request.messages[-1]
        assert "through" in json.dumps(results.wire())
        assert results.text() == body  # in the tool results' message, not a new turn
        assert len(model.requests) == 2


async def test_shutdown_kills_its_processes_and_tells_the_lead(tmp_path: Path) -> None:
    def respond(request: ModelRequest) -> Turn | str:
        if len(request.messages) == 1:
            call = ToolCall("Bash", {"command": "sleep 300", "run_in_background": True})
            return Turn(tool_calls=(call,))
        return "Started the server."

    model = Model(respond)
    async with TaskRuntime() as rt:
        executor, member, task_id = await spawn(rt, model, tmp_path)
        await lead_mail(rt)
        [shell] = rt.list(owner=task_id, types=[TaskType.LOCAL_BASH])
        assert isinstance(shell, ShellTaskState) and shell.pid is not None
        process = psutil.Process(shell.pid)
        assert process.is_running()
        await executor.run(member).shutdown("shutdown-1@alice")
        assert not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
        assert rt.get(shell.id).terminal  # type: ignore[union-attr]
        assert state(rt, task_id).status == TaskStatus.COMPLETED
        assert not executor.is_active(member)
        [letter] = rt.mailbox.take(rt.session_id, HELD)  # held for the lead
        approved = unwrap(letter, "alice")
        assert approved["type"] == "shutdown_approved"
        assert approved["requestId"] == "shutdown-1@alice" and approved["from"] == "alice"
        assert approved["paneId"] == "in-process" and approved["backendType"] == "in-process"
        no_task_notification(rt, task_id)


async def test_a_shutdown_approved_from_its_own_tool_call_ends_it(tmp_path: Path) -> None:
    approve = Approve()

    def respond(request: ModelRequest) -> Turn | str:
        text = request.messages[-1].text()
        request_data = protocol.structured(text.split("\n", 1)[1].rsplit("\n", 1)[0])
        if request_data is not None and request_data["type"] == "shutdown_request":
            call = ToolCall("Approve", {"request_id": request_data["requestId"]})
            return Turn(tool_calls=(call,))
        return "ready"

    model = Model(respond)
    async with TaskRuntime() as rt:
        executor, member, task_id = await spawn(rt, model, tmp_path, [approve])
        approve.executor = executor
        await lead_mail(rt)
        request = await executor.terminate(member, "the work is done")
        assert re.fullmatch(r"shutdown-\d+@alice", request)
        assert state(rt, task_id).shutdown_requested
        ended = await rt.wait(task_id, WAIT_S)
        assert ended.status == TaskStatus.COMPLETED
        [letter] = await lead_mail(rt)
        assert unwrap(letter, "alice")["requestId"] == request
        no_task_notification(rt, task_id)


async def test_kill_ends_a_teammate_whose_model_hangs(tmp_path: Path) -> None:
    never = asyncio.Event()

    async def hang(request: ModelRequest) -> str:
        await never.wait()
        raise AssertionError("unreachable")

    model = Model(hang)
    async with TaskRuntime() as rt:
        executor, member, task_id = await spawn(rt, model, tmp_path)
        await model.next_request()
        started = time.monotonic()
        await executor.kill(member)
        assert time.monotonic() - started < 5.0 * TIME_FACTOR
        run = executor.run(member)
        assert run.driver is not None and run.driver.done()
        assert state(rt, task_id).status == TaskStatus.KILLED
        no_task_notification(rt, task_id)


async def test_the_lead_s_turn_ending_does_not_stop_it(tmp_path: Path) -> None:
    model = Model(lambda request: "ok")
    async with TaskRuntime() as rt:
        executor = InProcessExecutor(rt)
        spec = TeammateSpec("alice", "crew", "blue", "go", config(model, [], tmp_path))

        async def lead_turn() -> None:
            await executor.spawn(spec)
            await asyncio.Event().wait()  # the lead's turn goes on until it is interrupted

        turn = asyncio.get_running_loop().create_task(lead_turn())
        await model.next_request()
        turn.cancel()
        await asyncio.gather(turn, return_exceptions=True)
        await lead_mail(rt)
        await executor.send("alice@crew", "more", sender="team-lead@crew")
        await model.next_request()
        assert executor.is_active("alice@crew")


async def test_recent_keeps_the_last_fifty_messages(tmp_path: Path) -> None:
    def respond(request: ModelRequest) -> Turn | str:
        if len(request.messages) < 2 * RECENT_LIMIT:
            return Turn(tool_calls=(ToolCall("Echo", {"text": str(len(request.messages))}),))
        return "finished"

    model = Model(respond)
    async with TaskRuntime() as rt:
        executor, member, task_id = await spawn(rt, model, tmp_path, [Echo()])
        await lead_mail(rt)
        run: TeammateRun = executor.run(member)
        assert len(run.engine.messages) > RECENT_LIMIT
        assert len(run.recent) == RECENT_LIMIT
        assert run.recent == run.engine.messages[-RECENT_LIMIT:]
        # One call per request made with fewer than 100 messages: at 1, 3, ..., 99.
        assert state(rt, task_id).tool_uses == RECENT_LIMIT


async def test_a_failed_turn_leaves_it_alive_and_idle(tmp_path: Path) -> None:
    def respond(request: ModelRequest) -> str:
        if len(model.requests) == 1:
            raise ModelError("overloaded")
        return "recovered"

    model = Model(respond)
    async with TaskRuntime() as rt:
        executor, member, task_id = await spawn(rt, model, tmp_path)
        [letter] = await lead_mail(rt)
        failed_notice = unwrap(letter, "alice")
        assert failed_notice["idleReason"] == "failed"
        assert failed_notice["failureReason"] == "overloaded"
        failed = state(rt, task_id)
        assert failed.status == TaskStatus.RUNNING and failed.is_idle
        assert failed.error == "overloaded"
        assert executor.is_active(member) and executor.run(member).is_idle
        await executor.send(member, "try again", sender="team-lead@crew")
        [letter] = await lead_mail(rt)
        assert unwrap(letter, "alice")["result"] == "recovered"
        assert state(rt, task_id).error is None
        assert state(rt, task_id).result == "recovered"


async def test_a_turn_failed_by_the_os_says_the_path_and_what_to_do(tmp_path: Path) -> None:
    def respond(request: ModelRequest) -> str:
        raise PermissionError(errno.EACCES, "Permission denied", "/srv/shared/notes")

    model = Model(respond)
    async with TaskRuntime() as rt:
        _, _, task_id = await spawn(rt, model, tmp_path)
        [letter] = await lead_mail(rt)
        why = "/srv/shared/notes: Permission denied (check the permissions of that path)"
        assert unwrap(letter, "alice")["failureReason"] == why
        assert state(rt, task_id).error == why


def test_a_pane_teammate_inherits_the_lead_s_relative_paths_as_absolute(tmp_path: Path) -> None:
    from taskloom.options import Options
    from taskloom.teams.compose import inherited_options

    options = Options(plugin_dirs=["kit", str(tmp_path / "abs")], add_dirs=["../shared"])
    inherited = inherited_options(options, tmp_path / "lead")
    # A teammate in a worktree must find them where its lead did.
    assert inherited["plugin_dirs"] == [str(tmp_path / "lead" / "kit"), str(tmp_path / "abs")]
    assert inherited["add_dirs"] == [str(tmp_path / "lead" / "../shared")]
    assert inherited["allowed_tools"] == [] and inherited["settings"] is None
