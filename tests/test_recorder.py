"""The recorder around the engine: recording, stop-hook continuations, resume repair, acks.

Driven with a scripted model, a real task runtime, real shell hooks and real transcripts.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from taskloom.conversation.recorder import MAX_STOP_CONTINUATIONS, Recorder, StopHook
from taskloom.engine import AssistantTurn, Engine, EngineConfig, EngineEvent, Finished, UserTurn
from taskloom.hooks import HookConfig
from taskloom.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from taskloom.pairing import INTERRUPTED
from taskloom.store import MailRow
from taskloom.tasks.runtime import TaskRuntime
from taskloom.testing import ScriptedModel, ToolCall, Turn
from taskloom.tools.bash import BashTool
from taskloom.transcript import load_messages

#: No run in these tests needs more than a few seconds; a hang fails instead of blocking.
LIMIT_S = 60.0


def engine_for(
    rt: TaskRuntime,
    model: ScriptedModel,
    cwd: Path,
    *,
    hooks: HookConfig | None = None,
    messages: list[Message] | None = None,
    **kw: Any,
) -> Engine:
    config = EngineConfig(
        model=model,
        system_prompt="",
        tools=[BashTool()],
        owner=rt.session_id,
        cwd=cwd,
        hooks=hooks,
        session_id=rt.session_id,
        **kw,
    )
    return Engine(config, rt, messages)


def hooks(event: str, command: str, matcher: str | None = None) -> HookConfig:
    entry: dict[str, Any] = {"hooks": [{"type": "command", "command": command}]}
    if matcher is not None:
        entry["matcher"] = matcher
    return HookConfig.parse({event: [entry]})


def notifications_waiting(rt: TaskRuntime) -> list[MailRow]:
    """The session's notifications not yet delivered (the mailbox rows of that kind)."""
    return [r for r in rt.store.undelivered_mail(rt.session_id) if r.kind == "notification"]


def lines(path: Path) -> list[dict[str, Any]]:
    """The transcript's message lines (not the last-prompt records after prompts)."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in records if "message" in r]


async def drain(recorder: Recorder, prompt: str | None) -> list[EngineEvent]:
    async with asyncio.timeout(LIMIT_S):
        return [e async for e in recorder.run(prompt)]


async def test_every_message_is_recorded_in_order_before_it_is_passed_on(tmp_path: Path) -> None:
    model = ScriptedModel(
        [Turn(text="Looking.", tool_calls=(ToolCall("Bash", {"command": "echo hi"}),)), "Done."]
    )
    path = tmp_path / "t.jsonl"
    async with TaskRuntime() as rt:
        recorder = Recorder(engine_for(rt, model, tmp_path), path)
        recorder.open()
        seen: list[str] = []
        async with asyncio.timeout(LIMIT_S):
            async for event in recorder.run("go"):
                if isinstance(event, UserTurn | AssistantTurn):
                    # The line is in the file by the time the consumer sees the event.
                    last = lines(path)[-1]
                    assert last["message"] == event.message.full()
                    seen.append(event.message.role)
        recorder.close()
    assert isinstance(event, Finished) and event.result == "Done."
    recorded = lines(path)
    assert [r["type"] for r in recorded] == seen == ["user", "assistant", "user", "assistant"]
    assert [r.get("taskloomOrigin") for r in recorded] == ["prompt", None, "tool_results", None]
    assert [r["parentUuid"] for r in recorded[1:]] == [r["uuid"] for r in recorded[:-1]]
    assert [m.wire() for m in load_messages(path)] == [m.wire() for m in recorder.engine.messages]


async def test_running_with_a_closed_transcript_is_refused(tmp_path: Path) -> None:
    async with TaskRuntime() as rt:
        recorder = Recorder(engine_for(rt, ScriptedModel(["hi"]), tmp_path), tmp_path / "t.jsonl")
        with pytest.raises(RuntimeError, match="not open"):
            await drain(recorder, "go")
        assert recorder.transcript is None


async def test_a_stop_hook_exiting_2_sends_the_agent_back_with_its_stderr_a_bounded_number_of_times(
    tmp_path: Path,
) -> None:
    seen = tmp_path / "stdin.log"
    # Always blocks: only the bound ends the run.
    config = hooks("Stop", f"{{ cat; echo; }} >> {seen}; echo 'check the tests' >&2; exit 2")
    model = ScriptedModel([f"answer {n}" for n in range(MAX_STOP_CONTINUATIONS + 1)])
    path = tmp_path / "t.jsonl"
    async with TaskRuntime() as rt:
        recorder = Recorder(engine_for(rt, model, tmp_path, hooks=config), path)
        recorder.open()
        events = await drain(recorder, "go")
        recorder.close()
    model.assert_complete()
    assert len(model.requests) == MAX_STOP_CONTINUATIONS + 1
    for request in model.requests[1:]:
        assert request.messages[-1].role == "user"
        assert request.messages[-1].text() == "check the tests"
    finished = [e for e in events if isinstance(e, Finished)]
    assert [f.result for f in finished] == [f"answer {n}" for n in range(len(finished))]
    inputs = [json.loads(line) for line in seen.read_text().splitlines() if line.strip()]
    assert len(inputs) == MAX_STOP_CONTINUATIONS
    assert [i["hook_event_name"] for i in inputs] == ["Stop"] * MAX_STOP_CONTINUATIONS
    assert [i["stop_hook_active"] for i in inputs] == [False] + [True] * (
        MAX_STOP_CONTINUATIONS - 1
    )
    # The continuations are recorded like any prompt.
    prompts = [r for r in lines(path) if r.get("taskloomOrigin") == "prompt"]
    assert len(prompts) == MAX_STOP_CONTINUATIONS + 1
    assert all(Message.from_dict(r["message"]).text() == "check the tests" for r in prompts[1:])


async def test_a_subagent_stop_hook_gets_its_target_and_payload_and_may_let_it_stop(
    tmp_path: Path,
) -> None:
    seen, once = tmp_path / "stdin.log", tmp_path / "blocked-once"
    command = (
        f"{{ cat; echo; }} >> {seen}; [ -e {once} ] && exit 0; "
        f"touch {once}; echo 'one more thing' >&2; exit 2"
    )
    config = hooks("SubagentStop", command, matcher="Explore")
    model = ScriptedModel(["first", "second"])
    stop = StopHook(
        "SubagentStop", "Explore", {"agent_type": "Explore", "agent_transcript_path": "x"}
    )
    async with TaskRuntime() as rt:
        recorder = Recorder(
            engine_for(rt, model, tmp_path, hooks=config), tmp_path / "t.jsonl", stop=stop
        )
        recorder.open()
        await drain(recorder, "go")
        recorder.close()
    model.assert_complete()
    assert model.requests[1].messages[-1].text() == "one more thing"
    inputs = [json.loads(line) for line in seen.read_text().splitlines() if line.strip()]
    assert [(i["hook_event_name"], i["stop_hook_active"]) for i in inputs] == [
        ("SubagentStop", False),
        ("SubagentStop", True),
    ]
    assert {i["agent_type"] for i in inputs} == {"Explore"}
    assert {i["agent_transcript_path"] for i in inputs} == {"x"}


async def test_a_stop_hook_that_does_not_block_ends_the_run(tmp_path: Path) -> None:
    config = hooks("Stop", "echo 'only a note' >&2; exit 1")
    model = ScriptedModel(["done"])
    async with TaskRuntime() as rt:
        recorder = Recorder(engine_for(rt, model, tmp_path, hooks=config), tmp_path / "t.jsonl")
        recorder.open()
        events = await drain(recorder, "go")
        recorder.close()
    model.assert_complete()
    assert [e for e in events if isinstance(e, Finished)] == [Finished("end_turn", "done")]


def interrupted() -> list[Message]:
    call = ToolUseBlock(id="t1", name="Bash", input={"command": "sleep 9"})
    return [Message.user("start"), Message(role="assistant", content=[call])]


@pytest.mark.parametrize("open_first", [False, True])
async def test_resume_repair_records_the_added_tool_results(
    tmp_path: Path, open_first: bool
) -> None:
    path = tmp_path / "t.jsonl"
    model = ScriptedModel(["resumed"])
    async with TaskRuntime() as rt:
        engine = engine_for(rt, model, tmp_path, messages=interrupted())
        recorder = Recorder(engine, path)
        if open_first:
            recorder.open()
        added = recorder.repair()
        assert len(added) == 1
        [block] = added[0].content
        assert isinstance(block, ToolResultBlock)
        assert (block.tool_use_id, block.content, block.is_error) == ("t1", INTERRUPTED, True)
        assert engine.messages[-1] is added[0]
        # A transcript it opened for the repair only is closed again; an open one stays open.
        assert (recorder.transcript is not None) == open_first
        [line] = lines(path)
        assert line["taskloomOrigin"] == "tool_results"
        assert Message.from_dict(line["message"]) == added[0]
        # The conversation is one the API accepts: the next request alternates roles.
        recorder.open()
        await drain(recorder, "go on")
        recorder.close()
    roles = [m.role for m in model.requests[0].messages]
    assert roles == ["user", "assistant", "user"]


async def test_repair_of_a_sound_conversation_adds_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    async with TaskRuntime() as rt:
        sound = [Message.user("hi"), Message(role="assistant", content=[TextBlock(text="hello")])]
        recorder = Recorder(engine_for(rt, ScriptedModel([]), tmp_path, messages=sound), path)
        assert recorder.repair() == []
        assert recorder.engine.messages == sound
    assert not path.exists()


def background_echo() -> ScriptedModel:
    call = ToolCall("Bash", {"command": "echo finished", "run_in_background": True})
    return ScriptedModel([Turn(tool_calls=(call,)), "Waiting for it.", "It finished."])


async def test_notifications_are_acknowledged_once_recorded_before_they_are_passed_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.jsonl"
    model = background_echo()
    async with TaskRuntime() as rt:
        recorder = Recorder(engine_for(rt, model, tmp_path, wait_for_tasks=True), path)
        recorder.open()
        delivered: list[UserTurn] = []
        async with asyncio.timeout(LIMIT_S):
            async for event in recorder.run("go"):
                if isinstance(event, UserTurn) and event.notifications:
                    assert lines(path)[-1]["message"] == event.message.full()
                    assert notifications_waiting(rt) == []
                    delivered.append(event)
        recorder.close()
    model.assert_complete()
    assert len(delivered) == 1
    assert "finished" in delivered[0].message.text()


async def test_notifications_not_recorded_stay_undelivered(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    model = background_echo()
    async with TaskRuntime() as rt:
        recorder = Recorder(engine_for(rt, model, tmp_path, wait_for_tasks=True), path)
        recorder.open()
        with pytest.raises(RuntimeError, match="not open"):
            async with asyncio.timeout(LIMIT_S):
                async for event in recorder.run("go"):
                    if (
                        isinstance(event, AssistantTurn)
                        and event.message.text() == "Waiting for it."
                    ):
                        # The message delivering the notification cannot be written now.
                        recorder.close()
        # Never recorded, so never delivered: a resume would replay it.
        [row] = notifications_waiting(rt)
        assert row.recipient == rt.session_id
    assert not any(r.get("taskloomOrigin") == "notifications" for r in lines(path))
