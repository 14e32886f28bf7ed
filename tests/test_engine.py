"""The conversation loop with scripted models and real tools."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import Field

from helpers import TIME_FACTOR
from taskloom.engine import AssistantTurn, Engine, EngineConfig, Finished, ToolDone, UserTurn
from taskloom.messages import ToolResultBlock
from taskloom.tasks.runtime import TaskRuntime
from taskloom.testing import FunctionModel, ScriptedModel, ToolCall, Turn
from taskloom.tools.base import Tool, ToolContext, ToolInput, ToolResult
from taskloom.tools.bash import BashTool
from taskloom.tools.tasks import TaskOutputTool, TaskStopTool


class NapInput(ToolInput):
    seconds: float = Field(ge=0, le=5)
    label: str = ""


class Nap(Tool[NapInput]):
    """A read-only tool that takes a while: shows which calls overlap."""

    name = "Nap"
    description = "Sleep a little."
    Input = NapInput
    kind = "read"
    concurrency_safe = True

    def __init__(self) -> None:
        self.spans: list[tuple[str, float, float]] = []

    async def call(self, params: NapInput, ctx: ToolContext) -> ToolResult:
        start = time.monotonic()
        await asyncio.sleep(params.seconds)
        self.spans.append((params.label, start, time.monotonic()))
        return ToolResult(f"slept {params.label}")


class Note(Tool[NapInput]):
    """Like Nap but not concurrency-safe."""

    name = "Note"
    description = "Write a note."
    Input = NapInput
    kind = "edit"

    def __init__(self, spans: list[tuple[str, float, float]]) -> None:
        self.spans = spans

    async def call(self, params: NapInput, ctx: ToolContext) -> ToolResult:
        start = time.monotonic()
        await asyncio.sleep(params.seconds)
        self.spans.append((params.label, start, time.monotonic()))
        return ToolResult(f"noted {params.label}")


def config(model: Any, rt: TaskRuntime, tools: list[Tool[Any]], **kw: Any) -> EngineConfig:
    return EngineConfig(
        model=model, system_prompt="test", tools=tools, owner=rt.session_id, cwd=Path.cwd(), **kw
    )


async def collect(engine: Engine, prompt: str) -> list[Any]:
    return [event async for event in engine.run(prompt)]


async def test_plain_answer_ends_the_run() -> None:
    model = ScriptedModel(["Hello there."])
    async with TaskRuntime() as rt:
        engine = Engine(config(model, rt, []), rt)
        events = await collect(engine, "hi")
        assert isinstance(events[-1], Finished)
        assert events[-1].result == "Hello there." and events[-1].reason == "end_turn"
        assert engine.num_turns == 1
        assert model.requests[0].messages[0].text() == "hi"
        model.assert_complete()


async def test_read_only_calls_run_together_and_others_in_order() -> None:
    nap = Nap()
    note = Note(nap.spans)
    model = ScriptedModel(
        [
            Turn(
                tool_calls=(
                    ToolCall("Nap", {"seconds": 0.4, "label": "a"}),
                    ToolCall("Nap", {"seconds": 0.4, "label": "b"}),
                    ToolCall("Nap", {"seconds": 0.4, "label": "c"}),
                    ToolCall("Note", {"seconds": 0.1, "label": "w1"}),
                    ToolCall("Note", {"seconds": 0.1, "label": "w2"}),
                )
            ),
            "done",
        ]
    )
    async with TaskRuntime() as rt:
        engine = Engine(config(model, rt, [nap, note]), rt)
        started = time.monotonic()
        events = await collect(engine, "go")
        elapsed = time.monotonic() - started
    spans = {label: (s, e) for label, s, e in nap.spans}
    # The three naps overlap: the batch takes about as long as the longest one.
    assert max(s for s, _ in (spans[x] for x in "abc")) < min(
        e for _, e in (spans[x] for x in "abc")
    )
    assert elapsed < 0.4 * 2 + 0.2 + 0.5 * TIME_FACTOR
    # The writes ran after the naps, one after the other, in call order.
    assert spans["w1"][0] >= max(spans[x][1] for x in "abc") - 0.01
    assert spans["w2"][0] >= spans["w1"][1] - 0.01
    results = [e for e in events if isinstance(e, UserTurn) and e.origin == "tool_results"]
    blocks = [b for b in results[0].message.content if isinstance(b, ToolResultBlock)]
    assert [b.text() for b in blocks] == ["slept a", "slept b", "slept c", "noted w1", "noted w2"]


async def test_max_turns_stops_a_run_that_needs_more() -> None:
    model = ScriptedModel([Turn(tool_calls=(ToolCall("Nap", {"seconds": 0}),)), "never reached"])
    async with TaskRuntime() as rt:
        engine = Engine(config(model, rt, [Nap()], max_turns=1), rt)
        events = await collect(engine, "go")
        assert isinstance(events[-1], Finished) and events[-1].reason == "max_turns"
        assert engine.num_turns == 1
        assert any(isinstance(e, ToolDone) for e in events)  # the first turn's calls ran


async def test_background_command_is_waited_for_and_its_notification_delivered() -> None:
    def respond(request: Any) -> Turn | str:
        last = request.messages[-1]
        text = "".join(b.text for b in last.content if getattr(b, "type", "") == "text")
        if len(request.messages) == 1:
            return Turn(
                text="starting",
                tool_calls=(
                    ToolCall("Bash", {"command": "sleep 1; echo hi", "run_in_background": True}),
                ),
            )
        if "<task-notification>" in text:
            return "the command printed hi"
        return "waiting for it"

    model = FunctionModel(respond)
    async with TaskRuntime() as rt:
        engine = Engine(config(model, rt, [BashTool(), TaskOutputTool(), TaskStopTool()]), rt)
        events = await collect(engine, "run it")
        delivered = [e for e in events if isinstance(e, UserTurn) and e.origin == "notifications"]
        assert len(delivered) == 1
        assert "completed (exit code 0)" in delivered[0].message.text()
        assert isinstance(events[-1], Finished)
        assert events[-1].result == "the command printed hi"
        assert not rt.has_live_tasks()


async def test_usage_input_is_latest_and_output_cumulative() -> None:
    from taskloom.messages import Usage

    model = ScriptedModel(
        [
            Turn(
                tool_calls=(ToolCall("Nap", {"seconds": 0}),),
                usage=Usage(input_tokens=100, output_tokens=10),
            ),
            Turn(
                text="ok",
                usage=Usage(input_tokens=150, output_tokens=5, cache_read_input_tokens=20),
            ),
        ]
    )
    async with TaskRuntime() as rt:
        engine = Engine(config(model, rt, [Nap()]), rt)
        await collect(engine, "go")
        assert engine.context_tokens == 170  # its latest request's: not usage
        own = rt.usage.own(engine.ledger_key)  # usage is the ledger's, summed
        assert own.output_tokens == 15
        assert own.input_tokens == 250


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3)
    ),
    max_leaves=6,
)
inputs = st.dictionaries(
    st.sampled_from(["command", "timeout", "task_id", "block", "seconds", "label", "x"]),
    json_values,
    max_size=4,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    calls=st.lists(
        st.tuples(st.sampled_from(["Bash", "TaskOutput", "TaskStop", "Nap", "Nope"]), inputs),
        min_size=1,
        max_size=4,
    )
)
def test_random_inputs_never_raise_out_of_the_engine(
    calls: list[tuple[str, dict[str, Any]]],
) -> None:
    # Bash only with invalid inputs: a valid random command could do anything.
    safe = [(n, i) for n, i in calls if not (n == "Bash" and isinstance(i.get("command"), str))]
    if not safe:
        return
    model = ScriptedModel([Turn(tool_calls=tuple(ToolCall(n, i) for n, i in safe)), "done"])

    async def main() -> list[Any]:
        async with TaskRuntime() as rt:
            tools: list[Tool[Any]] = [BashTool(), TaskOutputTool(), TaskStopTool(), Nap()]
            engine = Engine(config(model, rt, tools), rt)
            return await collect(engine, "go")

    events = asyncio.run(main())
    done = [e for e in events if isinstance(e, ToolDone)]
    assert len(done) == len(safe)
    assert isinstance(events[-1], Finished)


async def test_malformed_inputs_name_the_field() -> None:
    model = ScriptedModel(
        [
            Turn(
                tool_calls=(
                    ToolCall("Bash", {"command": 5}),
                    ToolCall("Bash", {}),
                    ToolCall("Bash", {"command": "true", "colour": "red"}),
                    ToolCall("TaskOutput", {"task_id": "b123", "timeout": "soon"}),
                )
            ),
            "ok",
        ]
    )
    async with TaskRuntime() as rt:
        engine = Engine(config(model, rt, [BashTool(), TaskOutputTool()]), rt)
        events = await collect(engine, "go")
    texts = [e.result.content for e in events if isinstance(e, ToolDone)]
    assert all(e.result.is_error for e in events if isinstance(e, ToolDone))
    assert "command" in texts[0] and "string" in texts[0]
    assert "command: required field is missing" in texts[1]
    assert "colour: unexpected field" in texts[2]
    assert "timeout" in texts[3]
    assert all(isinstance(e, (UserTurn, AssistantTurn, ToolDone, Finished)) for e in events)


async def test_write_then_edit_in_one_message_run_in_order(tmp_path: Path) -> None:
    from taskloom.tools.edit import Edit
    from taskloom.tools.write import Write

    target = tmp_path / "notes.txt"
    model = ScriptedModel(
        [
            Turn(
                tool_calls=(
                    ToolCall("Write", {"file_path": str(target), "content": "alpha\nbeta\n"}),
                    ToolCall(
                        "Edit",
                        {"file_path": str(target), "old_string": "beta", "new_string": "gamma"},
                    ),
                )
            ),
            "done",
        ]
    )
    async with TaskRuntime() as rt:
        engine = Engine(config(model, rt, [Write(), Edit()]), rt)
        events = await collect(engine, "go")
    results = [e.result for e in events if isinstance(e, ToolDone)]
    assert [r.is_error for r in results] == [False, False]
    assert target.read_text() == "alpha\ngamma\n"


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    calls=st.lists(
        st.tuples(
            st.sampled_from(["Read", "Glob", "Grep", "Write", "Edit"]),
            st.dictionaries(
                st.sampled_from(
                    [
                        "file_path",
                        "pattern",
                        "path",
                        "content",
                        "old_string",
                        "new_string",
                        "offset",
                        "limit",
                        "output_mode",
                        "-i",
                        "glob",
                        "extra",
                    ]
                ),
                json_values,
                max_size=4,
            ),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_random_inputs_to_file_tools_never_raise(calls: list[tuple[str, dict[str, Any]]]) -> None:
    from taskloom.tools.registry import core_tools

    # Writes only with inputs that cannot validate: a valid random path could be anywhere.
    safe = [
        (n, i)
        for n, i in calls
        if n not in ("Write", "Edit") or not isinstance(i.get("file_path"), str)
    ]
    if not safe:
        return
    model = ScriptedModel([Turn(tool_calls=tuple(ToolCall(n, i) for n, i in safe)), "done"])

    async def main() -> list[Any]:
        async with TaskRuntime() as rt:
            tools = [t for t in core_tools() if t.name != "Bash"]
            engine = Engine(config(model, rt, tools), rt)
            return await collect(engine, "go")

    events = asyncio.run(main())
    assert len([e for e in events if isinstance(e, ToolDone)]) == len(safe)
    assert isinstance(events[-1], Finished)
