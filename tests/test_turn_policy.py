"""The main thread's run policy: structured-output reminders and the fallback model.

Driven on a real engine and task runtime, with scripted and function models; the fallback is
made from its spec (``scripted:FILE``) as a session makes it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from taskloom.conversation.policy import TurnPolicy
from taskloom.engine import Engine, EngineConfig, EngineEvent, Finished
from taskloom.errors import ModelError
from taskloom.messages import Message, TextBlock
from taskloom.models.base import Model
from taskloom.models.switch import ModelSwitch
from taskloom.tasks.runtime import TaskRuntime
from taskloom.testing import FunctionModel, ScriptedModel, ToolCall, Turn
from taskloom.tools.structured import MAX_REMINDERS, NAME, REMINDER, StructuredOutput

#: No run here needs more than a few seconds; a hang fails instead of blocking.
LIMIT_S = 60.0
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def policy_on(
    rt: TaskRuntime,
    model: Model,
    cwd: Path,
    *,
    structured: StructuredOutput | None = None,
    fallback: str | None = None,
) -> tuple[TurnPolicy, Engine, ModelSwitch]:
    switch = ModelSwitch(model)
    config = EngineConfig(
        model=switch,
        system_prompt="",
        tools=[structured] if structured is not None else [],
        owner=rt.session_id,
        cwd=cwd,
        session_id=rt.session_id,
    )
    engine = Engine(config, rt)
    return (
        TurnPolicy(engine.run, switch, {}, structured=structured, fallback=fallback),
        engine,
        switch,
    )


async def drain(policy: TurnPolicy, prompt: str) -> list[EngineEvent]:
    async with asyncio.timeout(LIMIT_S):
        return [e async for e in policy.run(prompt)]


def user_texts(messages: list[Message]) -> list[str]:
    return [
        block.text
        for m in messages
        if m.role == "user"
        for block in m.content
        if isinstance(block, TextBlock)
    ]


async def test_a_run_that_forgets_its_structured_answer_is_reminded_and_gives_it(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(
        [
            "The answer is 2.",  # ends its turn without the tool
            Turn(tool_calls=(ToolCall(NAME, {"n": 2}),)),
            "Done.",
        ]
    )
    async with TaskRuntime() as rt:
        tool = StructuredOutput(SCHEMA)
        policy, engine, _ = policy_on(rt, model, tmp_path, structured=tool)
        events = await drain(policy, "what is 1 + 1?")
    assert policy.structured_output == {"n": 2}
    assert policy.reminders == 1
    # The reminder went in as the second pass's prompt, after the first answer.
    assert user_texts(engine.messages)[:2] == ["what is 1 + 1?", REMINDER]
    finished = [e for e in events if isinstance(e, Finished)]
    assert [f.result for f in finished] == ["The answer is 2.", "Done."]
    assert model.remaining == 0


async def test_the_reminders_end_after_the_limit_without_an_answer(tmp_path: Path) -> None:
    model = ScriptedModel([f"answer {i} in prose" for i in range(MAX_REMINDERS + 2)])
    async with TaskRuntime() as rt:
        policy, engine, _ = policy_on(rt, model, tmp_path, structured=StructuredOutput(SCHEMA))
        await drain(policy, "what is 1 + 1?")
    assert policy.structured_output is None
    assert policy.reminders == MAX_REMINDERS
    assert len(model.requests) == 1 + MAX_REMINDERS  # one turn is left: it stopped asking
    assert user_texts(engine.messages).count(REMINDER) == MAX_REMINDERS


async def test_the_answer_of_an_earlier_run_is_not_the_next_ones(tmp_path: Path) -> None:
    prose = [f"prose {i}" for i in range(MAX_REMINDERS + 1)]
    model = ScriptedModel([Turn(tool_calls=(ToolCall(NAME, {"n": 2}),)), "Done.", *prose])
    async with TaskRuntime() as rt:
        policy, _, _ = policy_on(rt, model, tmp_path, structured=StructuredOutput(SCHEMA))
        await drain(policy, "first")
        assert (policy.structured_output, policy.reminders) == ({"n": 2}, 0)
        # The next run forgets the tool: the earlier answer does not stand for it.
        await drain(policy, "second")
    assert (policy.structured_output, policy.reminders) == (None, MAX_REMINDERS)
    assert model.remaining == 0


async def test_without_a_schema_a_run_is_one_pass(tmp_path: Path) -> None:
    model = ScriptedModel(["Prose.", "never asked"])
    async with TaskRuntime() as rt:
        policy, _, _ = policy_on(rt, model, tmp_path)
        events = await drain(policy, "hi")
    assert [e.result for e in events if isinstance(e, Finished)] == ["Prose."]
    assert policy.reminders == 0 and model.remaining == 1


def overloaded(calls: list[Any]) -> FunctionModel:
    def respond(request: Any) -> str:
        calls.append(request)
        raise ModelError("overloaded", status=529, error_type="overloaded_error", retryable=True)

    return FunctionModel(respond, name="primary")


async def test_a_retryable_failure_goes_on_with_the_fallback_where_it_failed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = tmp_path / "fallback.json"
    script.write_text(json.dumps({"turns": ["from the fallback"]}))
    calls: list[Any] = []
    async with TaskRuntime() as rt:
        policy, engine, switch = policy_on(
            rt, overloaded(calls), tmp_path, fallback=f"scripted:{script}"
        )
        with caplog.at_level("WARNING", logger="taskloom.conversation.policy"):
            events = await drain(policy, "hello")
        fallback = switch.current
        assert isinstance(fallback, ScriptedModel) and switch.on(f"scripted:{script}")
        await switch.close_chosen()
    assert [e.result for e in events if isinstance(e, Finished)] == ["from the fallback"]
    assert len(calls) == 1  # the primary was asked once, not again after the switch
    # The prompt was not sent again: the conversation went on where the request failed.
    assert user_texts(engine.messages) == ["hello"]
    assert [user_texts(r.messages) for r in fallback.requests] == [["hello"]]
    assert "going on with the fallback model scripted:fallback.json" in caplog.text


async def test_a_refused_request_is_raised_not_tried_on_the_fallback(tmp_path: Path) -> None:
    def refuse(request: Any) -> str:
        raise ModelError("bad key", status=401, error_type="authentication_error")

    async with TaskRuntime() as rt:
        policy, _, switch = policy_on(
            rt, FunctionModel(refuse), tmp_path, fallback="scripted:never-read.json"
        )
        with pytest.raises(ModelError, match="bad key"):
            await drain(policy, "hello")
    assert switch.name == "function"


async def test_without_a_fallback_a_retryable_failure_is_raised(tmp_path: Path) -> None:
    calls: list[Any] = []
    async with TaskRuntime() as rt:
        policy, _, _ = policy_on(rt, overloaded(calls), tmp_path)
        with pytest.raises(ModelError, match="overloaded"):
            await drain(policy, "hello")
    assert len(calls) == 1
