"""Tasks as an ACP client sees them: a session's background work as updates.

A real session (a Harness on a scripted model) runs background commands and agents; its
:class:`TaskView` sends what a client would be told to a recorder: a command as a tool call
that stays in progress while its output streams, an agent as a child session (its updates
under its own id, cancelled from the client), or as a tool call for a client without
subagent sessions.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

from helpers import TIME_FACTOR, alive, harness, main_context, pids_with_env, wait_until
from taskloom.acp.tasks_view import BATCH_S, TaskView, subagents_offered
from taskloom.errors import ModelError
from taskloom.messages import ToolResultBlock
from taskloom.models.base import ModelRequest
from taskloom.models.scripted import FunctionModel, ToolCall, Turn
from taskloom.tasks.kinds import kind_of
from taskloom.tasks.types import TaskStatus

SESSION = "acp-session-1"


class Recorder:
    """A client's view of the updates: every one sent, in order, by session."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def send(self, session_id: str, update: dict[str, Any]) -> None:
        self.sent.append((session_id, update))

    def of(self, kind: str, session_id: str | None = None) -> list[dict[str, Any]]:
        return [
            u
            for s, u in self.sent
            if u["sessionUpdate"] == kind and (session_id is None or s == session_id)
        ]

    def calls(self, call_id: str) -> list[dict[str, Any]]:
        return [u for _, u in self.sent if u.get("toolCallId") == call_id]


class Gate:
    """A FIFO a command blocks on until :meth:`release` writes a line (no timing guessed)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "gate.fifo"
        os.mkfifo(self.path)

    def release(self) -> None:
        def write() -> None:
            with open(self.path, "w") as fifo:
                fifo.write("go\n")

        threading.Thread(target=write, daemon=True).start()


def text_of(update: dict[str, Any]) -> str:
    """The text of an update: a message chunk's, or a tool call's content's."""
    content = update.get("content") or []
    if isinstance(content, dict):
        return str(content["text"])
    return "".join(c["content"]["text"] for c in content)


def first_text(request: ModelRequest) -> str:
    return str(request.messages[0].content)


async def drain(h: Any, prompt: str) -> None:
    async for _ in h.run(prompt):
        pass


def test_subagents_are_offered_by_an_object_only() -> None:
    assert subagents_offered({"subagents": {}})
    assert subagents_offered({"subagents": {"_meta": None}, "terminal": True})
    assert not subagents_offered({"subagents": None})
    assert not subagents_offered({"fs": {"readTextFile": True}})
    assert not subagents_offered(None)


async def test_a_background_command_is_a_tool_call_in_progress_until_it_ends(
    tmp_path: Path,
) -> None:
    gate = Gate(tmp_path)
    # 300 lines at once, then a wait on the gate, then its end with exit code 3.
    command = f"seq 1 300; echo halfway; read line < {gate.path}; echo released; exit 3"

    def respond(request: ModelRequest) -> Turn | str:
        if len(request.messages) == 1:
            call = ToolCall("Bash", {"command": command, "run_in_background": True})
            return Turn(tool_calls=(call,))
        return "started it"

    sent = Recorder()
    view = TaskView(SESSION, sent.send, subagents=True)
    async with harness(tmp_path, FunctionModel(respond), observer=view, wait_for_tasks=False) as h:
        view.attach(h)
        await drain(h, "run it")  # the turn ends; the command runs on
        (task,) = h.tasks()
        call_id = f"task-{task.id}"
        await wait_until(
            lambda: any("halfway" in text_of(u) for u in sent.calls(call_id)), what="its output"
        )
        assert not h.runtime.get(task.id).terminal  # type: ignore[union-attr]
        (start,) = sent.of("tool_call", SESSION)
        assert start["toolCallId"] == call_id and start["status"] == "in_progress"
        assert start["kind"] == "execute" and start["rawInput"]["task_id"] == task.id
        streamed = [u for u in sent.calls(call_id) if u["sessionUpdate"] == "tool_call_update"]
        assert all("status" not in u for u in streamed)  # still in progress
        assert len(streamed) <= 3, "batched, not an update per line"
        assert "300\nhalfway" in text_of(streamed[-1])
        gate.release()
        await h.runtime.wait(task.id, timeout=10 * TIME_FACTOR)
        await wait_until(lambda: "status" in sent.calls(call_id)[-1], what="its end")
        await view.aclose()
    end = sent.calls(call_id)[-1]
    assert end["status"] == "failed"
    assert end["rawOutput"] == {"status": "failed", "exit_code": 3}
    assert "released" in text_of(end) and "exit code 3" in text_of(end)
    assert len([u for u in sent.calls(call_id) if "status" in u]) == 2  # its start, its end


def child_model(marker: Path) -> Any:
    """Main: an Agent in the background. Child: a long command, then a model that waits."""

    async def respond(request: ModelRequest) -> Turn | str:
        if "child job" not in first_text(request):
            if len(request.messages) == 1:
                spawn = {"description": "long child", "prompt": "child job",
                         "run_in_background": True}  # fmt: skip
                return Turn(tool_calls=(ToolCall("Agent", spawn),))
            return "spawned"
        if len(request.messages) == 1:
            command = f"touch {marker}; sleep 300"
            return Turn(
                text="starting the long job",
                tool_calls=(ToolCall("Bash", {"command": command, "run_in_background": True}),),
            )
        await asyncio.sleep(300)  # works on until stopped
        return "never"

    return respond


async def test_a_background_agent_is_a_child_session_the_client_cancels(tmp_path: Path) -> None:
    marker = tmp_path / "shell-started"
    sent = Recorder()
    view = TaskView(SESSION, sent.send, subagents=True)
    async with harness(
        tmp_path, FunctionModel(child_model(marker)), observer=view, wait_for_tasks=False
    ) as h:
        view.attach(h)
        await drain(h, "spawn it")
        await wait_until(marker.exists, what="the agent's command")
        agent = next(s for s in h.tasks() if s.description == "long child")
        shell = next(s for s in h.tasks() if s.owner == agent.id)
        pids = pids_with_env("TASKLOOM_TASK_ID", shell.id)
        assert pids, "the agent's command runs"
        child = view.child_session(agent.id)
        assert child is not None and view.task_of(child) == agent.id
        (hello, *_) = sent.of("subagent_update", SESSION)
        assert hello["sessionId"] == child and hello["title"] == "long child"
        assert hello["capabilities"] == {"cancel": {}} and hello["state"] == {"state": "running"}
        assert hello["description"].startswith("Agent (general-purpose)")
        await wait_until(lambda: sent.of("tool_call", child), what="the child's tool call")
        # Its updates are its own session's: its text, its tool call (and its command's).
        said = [text_of(u) for u in sent.of("agent_message_chunk", child)]
        assert said == ["starting the long job"]
        assert any(u["kind"] == "execute" for u in sent.of("tool_call", child))
        assert not sent.of("agent_message_chunk", SESSION)
        assert await view.cancel("not-a-child") is False
        assert await view.cancel(child) is True
        state = h.runtime.get(agent.id)
        assert state is not None and state.status == TaskStatus.KILLED
        await wait_until(lambda: not any(alive(p) for p in pids), what="its command gone")
        await wait_until(
            lambda: sent.of("subagent_update", SESSION)[-1].get("state", {}).get("state") == "idle",
            what="the child idle",
        )
        notes = h.runtime.notifications.pending(h.session_id)
        await view.aclose()
    last = sent.of("subagent_update", SESSION)[-1]
    assert last["state"] == {"state": "idle", "stopReason": "cancelled"}
    states = [u["state"]["state"] for u in sent.of("subagent_update", SESSION) if "state" in u]
    assert states == ["running", "idle"]
    ours = [n for n in notes if n.task_id == agent.id]
    assert len(ours) == 1 and ours[0].kind == "terminal"
    assert "<status>killed</status>" in ours[0].text and "was stopped" in ours[0].text
    # The child's command is shown in the child's session, not in the parent's.
    assert [u["toolCallId"] for u in sent.of("tool_call", SESSION)] == []
    assert f"task-{shell.id}" in {u["toolCallId"] for u in sent.of("tool_call", child)}
    # No call is left spinning in the idle child: the killed agent never records its results.
    ends = {u["toolCallId"]: u["status"] for u in sent.of("tool_call_update", child)}
    for call in sent.of("tool_call", child):
        assert ends.get(call["toolCallId"]) in ("completed", "failed"), call


async def test_without_subagents_an_agent_is_a_tool_call_with_progress(tmp_path: Path) -> None:
    def respond(request: ModelRequest) -> Turn | str:
        if "child job" not in first_text(request):
            if len(request.messages) == 1:
                spawn = {"description": "quick child", "prompt": "child job",
                         "run_in_background": True}  # fmt: skip
                return Turn(tool_calls=(ToolCall("Agent", spawn),))
            return "spawned"
        if len(request.messages) == 1:
            return Turn(tool_calls=(ToolCall("Bash", {"command": "echo from the child"}),))
        return "the answer is 42"

    sent = Recorder()
    view = TaskView(SESSION, sent.send, subagents=False)
    async with harness(tmp_path, FunctionModel(respond), observer=view, wait_for_tasks=False) as h:
        view.attach(h)
        await drain(h, "spawn it")
        agent = next(s for s in h.tasks() if s.description == "quick child")
        await h.runtime.wait(agent.id, timeout=10 * TIME_FACTOR)
        call_id = f"task-{agent.id}"
        await wait_until(lambda: "status" in sent.calls(call_id)[-1], what="its end")
        assert view.child_session(agent.id) is None
        await view.aclose()
    assert not sent.of("subagent_update")
    assert {s for s, _ in sent.sent} == {SESSION}  # no child sessions, nothing of its own
    start, *progress, end = sent.calls(call_id)
    assert start["sessionUpdate"] == "tool_call" and start["kind"] == "think"
    assert start["title"] == 'Agent "quick child"' and start["status"] == "in_progress"
    assert any("1 tool use" in text_of(u) for u in progress), progress
    assert end["status"] == "completed" and end["rawOutput"]["status"] == "completed"
    assert "the answer is 42" in text_of(end) and 'Agent "quick child" completed' in text_of(end)
    assert BATCH_S < 1


async def test_a_teammate_is_a_child_session_with_its_commands_under_it(tmp_path: Path) -> None:
    def respond(request: ModelRequest) -> Turn | str:
        if not request.metadata.get("teammate"):
            return "lead"
        if len(request.messages) == 1:
            bg = {"command": "sleep 300", "run_in_background": True}
            return Turn(text="on it", tool_calls=(ToolCall("Bash", bg),))
        return "started it"

    sent = Recorder()
    view = TaskView(SESSION, sent.send, subagents=True)
    model = FunctionModel(respond)
    async with harness(tmp_path, model, teams=True, observer=view, wait_for_tasks=False) as h:
        view.attach(h)
        agent = next(t for t in h.tools if t.name == "Agent")
        params = agent.validate({"description": "w", "prompt": "p", "name": "worker1"})
        await agent.call(params, main_context(h))
        mate = next(s for s in h.tasks() if kind_of(s).addresses(s))
        await wait_until(lambda: view.child_session(mate.id) is not None, what="its session")
        child = view.child_session(mate.id)
        assert child is not None
        # The call is shown as the teammate asks for it; its command's task comes a little later.
        await wait_until(lambda: sent.of("tool_call", child), what="its command's call")
        await wait_until(
            lambda: any(kind_of(s).is_process for s in h.tasks()), what="its command's task"
        )
        shell = next(s for s in h.tasks() if kind_of(s).is_process)
        await wait_until(lambda: pids_with_env("TASKLOOM_TASK_ID", shell.id), what="its process")
        pids = pids_with_env("TASKLOOM_TASK_ID", shell.id)
        assert await view.cancel(child)
        await wait_until(lambda: not any(alive(p) for p in pids), what="its command gone")
        await wait_until(
            lambda: sent.of("subagent_update", SESSION)[-1].get("state", {}).get("state") == "idle",
            what="the child idle",
        )
        await view.aclose()
    hello = sent.of("subagent_update", SESSION)[0]
    assert hello["title"].startswith("worker1@") and hello["description"].startswith("Teammate")
    said = [text_of(u) for u in sent.of("agent_message_chunk", child)]
    assert said in (["on it"], ["on it", "started it"])  # it may answer before it is stopped
    # Its command is a call of its session: the teammate started it under its own name.
    calls = {u["toolCallId"] for u in sent.of("tool_call", child)}
    assert f"task-{shell.id}" in calls and not sent.of("tool_call", SESSION)
    assert sent.of("subagent_update", SESSION)[-1]["state"]["stopReason"] == "cancelled"


async def test_a_foreground_agent_is_a_child_session_and_its_failure_says_why(
    tmp_path: Path,
) -> None:
    def respond(request: ModelRequest) -> Turn | str:
        first = first_text(request)
        if "ok job" in first:
            return "fine"
        if "bad job" in first:
            raise ModelError("the model is down")
        if len(request.messages) == 1:
            calls = tuple(
                ToolCall("Agent", {"description": f"{job} child", "prompt": f"{job} job"})
                for job in ("ok", "bad")
            )
            return Turn(tool_calls=calls)
        return "both ended"

    sent = Recorder()
    view = TaskView(SESSION, sent.send, subagents=True)
    async with harness(tmp_path, FunctionModel(respond), observer=view, wait_for_tasks=False) as h:
        view.attach(h)
        await drain(h, "run them")  # the turn waits for both: they run in the foreground
        ok = next(s for s in h.tasks() if s.description == "ok child")
        bad = next(s for s in h.tasks() if s.description == "bad child")
        assert bad.status == TaskStatus.FAILED and ok.status == TaskStatus.COMPLETED

        def ends() -> dict[str, Any]:
            return {
                u["sessionId"]: u["state"]
                for u in sent.of("subagent_update", SESSION)
                if u.get("state", {}).get("state") == "idle"
            }

        await wait_until(lambda: len(ends()) == 2, what="both idle")
        await view.aclose()
    ok_child, bad_child = view.child_session(ok.id), view.child_session(bad.id)
    assert ends()[ok_child] == {"state": "idle", "stopReason": "end_turn"}
    failed = ends()[bad_child]
    assert failed["stopReason"] == "error" and "the model is down" in failed["error"]["message"]
    assert [text_of(u) for u in sent.of("agent_message_chunk", ok_child)] == ["fine"]
    assert [text_of(u) for u in sent.of("user_message_chunk", ok_child)] == ["ok job"]


async def test_a_foreground_agent_cancelled_from_the_client_tells_the_model_why(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "child-started"
    results: list[str] = []

    async def respond(request: ModelRequest) -> Turn | str:
        if "child job" in first_text(request):
            if len(request.messages) == 1:
                return Turn(tool_calls=(ToolCall("Bash", {"command": f"touch {marker}"}),))
            await asyncio.sleep(300)  # works on until stopped
            return "never"
        if len(request.messages) == 1:
            spawn = {"description": "stuck child", "prompt": "child job"}
            return Turn(tool_calls=(ToolCall("Agent", spawn),))
        results.extend(
            b.text() for m in request.messages for b in m.content if isinstance(b, ToolResultBlock)
        )
        return "the child was stopped"

    sent = Recorder()
    view = TaskView(SESSION, sent.send, subagents=True)
    async with harness(tmp_path, FunctionModel(respond), observer=view, wait_for_tasks=False) as h:
        view.attach(h)
        turn = asyncio.create_task(drain(h, "run it"))
        await wait_until(marker.exists, what="the child at work")
        agent = next(s for s in h.tasks() if s.description == "stuck child")
        child = view.child_session(agent.id)
        assert child is not None and await view.cancel(child) is True
        await asyncio.wait_for(turn, 10 * TIME_FACTOR)
        await view.aclose()
    (said,) = results
    said = said.removeprefix("<tool_use_error>").removesuffix("</tool_use_error>")
    assert said == f"Agent {agent.id} killed: stopped before it finished", said
