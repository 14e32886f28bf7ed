"""Edge cases of the loop: failed spawns, empty answers, bad inputs, resume repairs, signals."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from helpers import TIME_FACTOR, clean_env, scripted_argv
from taskloom.engine import NO_CONTENT, Engine, EngineConfig, Finished, ToolDone
from taskloom.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from taskloom.models.base import INVALID_INPUT_KEY
from taskloom.pairing import INTERRUPTED, repair
from taskloom.session import Session, transcript_path
from taskloom.tasks.runtime import TaskRuntime
from taskloom.testing import ScriptedModel, ToolCall, Turn
from taskloom.tools.bash import BashTool
from taskloom.tools.tasks import TaskOutputTool
from taskloom.transcript import TranscriptWriter


def config(model: Any, rt: TaskRuntime, **kw: Any) -> EngineConfig:
    return EngineConfig(
        model=model,
        system_prompt="",
        tools=[BashTool(), TaskOutputTool()],
        owner=rt.session_id,
        cwd=Path.cwd(),
        **kw,
    )


async def run(engine: Engine, prompt: str) -> list[Any]:
    return [e async for e in engine.run(prompt)]


async def test_a_command_that_cannot_start_is_a_tool_error_and_the_run_ends() -> None:
    model = ScriptedModel([Turn(tool_calls=(ToolCall("Bash", {"command": "echo a\x00b"}),)), "ok"])
    async with TaskRuntime() as rt:
        started = time.monotonic()
        events = await run(Engine(config(model, rt), rt), "go")
        assert time.monotonic() - started < 10 * TIME_FACTOR
        done = [e for e in events if isinstance(e, ToolDone)]
        assert done[0].result.is_error and "cannot start shell" in done[0].result.content
        assert isinstance(events[-1], Finished) and events[-1].reason == "end_turn"
        assert not rt.has_live_tasks()


async def test_an_empty_answer_is_recorded_as_no_content() -> None:
    model = ScriptedModel([Turn(text="")])
    async with TaskRuntime() as rt:
        engine = Engine(config(model, rt), rt)
        await run(engine, "go")
        assert engine.messages[-1].content == [TextBlock(text=NO_CONTENT)]


async def test_tool_input_that_is_not_an_object_is_a_tool_error() -> None:
    model = ScriptedModel(
        [Turn(tool_calls=(ToolCall("Bash", {INVALID_INPUT_KEY: "ls -la"}),)), "ok"]
    )
    async with TaskRuntime() as rt:
        events = await run(Engine(config(model, rt), rt), "go")
    done = [e for e in events if isinstance(e, ToolDone)]
    assert (
        done[0].result.is_error and "must be a JSON object, got: ls -la" in done[0].result.content
    )
    assert isinstance(events[-1], Finished)


async def test_max_turns_does_not_wait_for_background_tasks() -> None:
    model = ScriptedModel(
        [
            Turn(
                tool_calls=(ToolCall("Bash", {"command": "sleep 30", "run_in_background": True}),)
            ),
            "waiting for it",
        ]
    )
    async with TaskRuntime() as rt:
        started = time.monotonic()
        events = await run(Engine(config(model, rt, max_turns=2), rt), "go")
        assert time.monotonic() - started < 5 * TIME_FACTOR
        assert isinstance(events[-1], Finished) and events[-1].reason == "max_turns"


async def test_task_output_pages_through_long_output_after_eviction() -> None:
    from taskloom.tasks.shell import run_shell
    from taskloom.tools.base import ToolContext

    async with TaskRuntime() as rt:
        out = await run_shell(rt, "seq 1 20000", run_in_background=True)
        await rt.wait(out.task_id, timeout=10)
        rt.ack(rt.drain())  # delivered: the task is evicted from memory
        assert out.task_id not in {s.id for s in rt.list()}
        tool = TaskOutputTool()
        ctx = ToolContext(runtime=rt, owner=rt.session_id, cwd=Path.cwd())
        seen = ""
        for _ in range(10):
            params = tool.validate({"task_id": out.task_id})
            result = await tool.call(params, ctx)  # type: ignore[arg-type]
            seen += result.content
            if "more output follows" not in result.content:
                break
        assert "\n20000\n" in seen and "\n1\n2\n" in seen


def test_repair_answers_interrupted_calls_and_merges_user_messages() -> None:
    call = ToolUseBlock(id="t1", name="Bash", input={"command": "sleep 9"})
    convo = [
        Message.user("start"),
        Message(role="assistant", content=[call]),
        Message.user("what happened?"),  # a resume recorded before any repair existed
        Message.user("and now?"),
    ]
    fixed, added = repair(convo)
    assert added == []
    assert [m.role for m in fixed] == ["user", "assistant", "user"]
    first = fixed[2].content[0]
    assert isinstance(first, ToolResultBlock) and first.tool_use_id == "t1"
    assert first.content == INTERRUPTED
    assert [b.text for b in fixed[2].content[1:]] == ["what happened?", "and now?"]  # type: ignore[union-attr]
    trailing, added = repair(convo[:2])
    assert len(added) == 1 and trailing[-1] is added[0]


async def test_resume_after_an_interrupted_call_records_the_repair(home: Path) -> None:
    session_id = "s-interrupted"
    writer = TranscriptWriter(transcript_path(session_id), session_id)
    writer.append(Message.user("start"))
    call = ToolUseBlock(id="t1", name="Bash", input={"command": "sleep 9"})
    writer.append(Message(role="assistant", content=[call]))
    writer.close()
    for answer in ("first resume", "second resume"):
        model = ScriptedModel([answer])
        async with TaskRuntime(session_id=session_id) as rt:
            session = Session.resume(rt, config(model, rt))
            [e async for e in session.run("go on")]
            session.close()
        sent = model.requests[0].messages
        roles = [m.role for m in sent]
        assert all(a != b for a, b in itertools.pairwise(roles)), roles
        assert roles[-1] == "user"
        # The call is answered once, however many resumes recorded its repair.
        results = [b.tool_use_id for m in sent for b in m.content if isinstance(b, ToolResultBlock)]
        assert results == ["t1"], results
    lines = [json.loads(x) for x in transcript_path(session_id).read_text().splitlines()]
    lines = [line for line in lines if "message" in line]  # not the last-prompt records
    assert [line["type"] for line in lines] == [
        "user",
        "assistant",
        "user",
        "user",
        "assistant",
        "user",
        "assistant",
    ]


# Survives TERM (the kill must escalate), and says it got it: the test's event for "the kill's
# TERM grace has begun".
TRAPPED = "trap 'echo termed' TERM; echo armed; while :; do sleep 0.1; done"


def _wait_for_output(path: str, text: bytes) -> None:
    """Wait (bounded) for ``text`` in a command's output file: another process writes it."""
    deadline = time.monotonic() + 10 * TIME_FACTOR
    while text not in Path(path).read_bytes():
        assert time.monotonic() < deadline, f"no {text!r} in {path}"
        time.sleep(0.01)


@pytest.mark.e2e
def test_two_interrupts_still_clean_up(tmp_path: Path) -> None:
    turns = tmp_path / "t.json"
    turns.write_text(
        json.dumps(
            {
                "turns": [
                    {
                        "tool_calls": [
                            {
                                "name": "Bash",
                                "input": {
                                    "command": TRAPPED,
                                    "run_in_background": True,
                                },
                            }
                        ]
                    },
                    {"text": "waiting"},
                ]
            }
        )
    )
    env = clean_env()
    proc = subprocess.Popen(
        scripted_argv(turns, "--dangerously-skip-permissions"),
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert proc.stdout is not None
    output_file = None
    for line in proc.stdout:
        event = json.loads(line)
        if event.get("subtype") == "task_started":
            output_file = event["output_file"]
        if event["type"] == "assistant" and "waiting" in json.dumps(event["message"]):
            break
    assert output_file is not None
    _wait_for_output(output_file, b"armed")
    proc.send_signal(signal.SIGINT)
    _wait_for_output(output_file, b"termed")
    proc.send_signal(signal.SIGINT)  # inside the TERM grace period, on purpose
    assert proc.wait(timeout=30) == 128 + signal.SIGINT
    proc.stdout.close()
    # The autouse fixture fails this test if the trapped loop survived.


async def test_a_halted_engine_asks_nothing_until_a_new_run_unhalts_it(tmp_path: Path) -> None:
    from taskloom.models.scripted import FunctionModel

    asked: list[int] = []

    def respond(request: Any) -> str:
        asked.append(1)
        return "answer"

    async with TaskRuntime() as runtime:
        config = EngineConfig(
            model=FunctionModel(respond), system_prompt="", tools=[], owner="me", cwd=tmp_path
        )
        engine = Engine(config, runtime)
        engine.halt("the token budget of a1 ran out")
        events = [e async for e in engine.run("go")]
        assert isinstance(events[-1], Finished) and asked == []
        engine.unhalt()
        events = [e async for e in engine.run("again")]
        assert isinstance(events[-1], Finished) and events[-1].result == "answer"
        assert asked == [1] and engine.halted is None
