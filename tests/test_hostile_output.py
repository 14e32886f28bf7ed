"""Hostile or broken model output never ends a run: the model is told, as a tool error.

End to end through the fake servers (both wire formats) with ``taskloom -p``, plus the parsing
and vetting steps on their own.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from fake_servers import FakeAnthropicServer, FakeOpenAIServer, FakeServer, ToolCall
from helpers import clean_env
from taskloom.engine import Engine, EngineConfig, ToolDone
from taskloom.messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from taskloom.models.anthropic import _Assembly
from taskloom.tasks.runtime import TaskRuntime
from taskloom.testing import ScriptedModel
from taskloom.testing import ToolCall as ScriptedCall
from taskloom.testing import Turn as ScriptedTurn
from taskloom.tools.base import MAX_TOOL_ERROR_CHARS, tool_error
from taskloom.tools.bash import BashTool
from taskloom.tools.tasks import TaskOutputTool
from taskloom.untrusted import (
    CUT_OFF,
    INCOMPLETE,
    MAX_INPUT_DEPTH,
    TOO_DEEP,
    clean_text,
    tool_use_block,
    vet_answer,
)

PROVIDERS = ["anthropic", "openai"]


@pytest.fixture(params=PROVIDERS)
def server(request: pytest.FixtureRequest) -> Iterator[FakeServer]:
    fake: FakeServer = FakeAnthropicServer() if request.param == "anthropic" else FakeOpenAIServer()
    with fake:
        yield fake


def run(server: FakeServer, cwd: Path) -> tuple[subprocess.CompletedProcess[str], list[Any]]:
    if isinstance(server, FakeAnthropicServer):
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="test")
    else:
        env = clean_env(OPENAI_BASE_URL=server.url, OPENAI_API_KEY="test")
    argv = [sys.executable, "-m", "taskloom", "-p", "go", "--output-format", "stream-json"]
    proc = subprocess.run(
        [*argv, "--dangerously-skip-permissions"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=env,
    )
    return proc, [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def sent(server: FakeServer, n: int) -> tuple[list[tuple[str, dict[str, Any]]], list[Any]]:
    """Request ``n``: the last assistant message's calls ``(id, input)`` and the results
    after it ``(id, text, is_error)``, whatever the wire format."""
    body = server.requests[n].body
    messages = body["messages"]
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    if isinstance(server, FakeAnthropicServer):
        calls = [
            (b["id"], b["input"]) for b in messages[last]["content"] if b["type"] == "tool_use"
        ]
        results = [
            (b["tool_use_id"], b["content"], b.get("is_error", False))
            for m in messages[last + 1 :]
            for b in m["content"]
            if b["type"] == "tool_result"
        ]
        return calls, results
    calls = [
        (c["id"], json.loads(c["function"]["arguments"]))
        for c in messages[last].get("tool_calls") or []
    ]
    results = [
        (m["tool_call_id"], m["content"], m["content"].startswith("Error: "))
        for m in messages[last + 1 :]
        if m["role"] == "tool"
    ]
    return calls, results


def assert_success(proc: subprocess.CompletedProcess[str], events: list[Any]) -> None:
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert events[-1]["type"] == "result" and events[-1]["subtype"] == "success", events[-1]
    assert "Internal error" not in proc.stdout + proc.stderr


# -- end to end --------------------------------------------------------------------------------


@pytest.mark.e2e
def test_lone_surrogate_in_text_is_replaced_and_recorded(
    server: FakeServer, tmp_path: Path
) -> None:
    server.add_turn(text="odd \ud800 text", tool_calls=[("Glob", {"pattern": "*.txt"})])
    server.add_turn(text="done \udc00")
    proc, events = run(server, tmp_path)
    assert_success(proc, events)
    assert events[-1]["result"] == "done \ufffd"
    assistant = [e for e in events if e["type"] == "assistant"]
    assert any("U+FFFD" in n for n in assistant[0]["message"]["sanitized"])
    # The model gets its text back, valid, and the call it made alongside still ran.
    body = json.dumps(server.requests[1].body, ensure_ascii=False)
    assert "odd \ufffd text" in body and "\\ud800" not in body
    ((call_id, _),) = sent(server, 1)[0]
    assert [(r[0], r[2]) for r in sent(server, 1)[1]] == [(call_id, False)]


@pytest.mark.e2e
def test_lone_surrogate_in_tool_input_is_a_tool_error(server: FakeServer, tmp_path: Path) -> None:
    server.add_turn(tool_calls=[("Bash", {"command": "touch ran; echo \ud800"})])
    server.add_turn(text="ok")
    proc, events = run(server, tmp_path)
    assert_success(proc, events)
    assert not (tmp_path / "ran").exists()  # an altered command is not run
    [(call_id, tool_input)], [(result_id, text, is_error)] = sent(server, 1)
    assert tool_input == {"command": "touch ran; echo \ufffd"}
    assert result_id == call_id and is_error and "invalid Unicode" in text


@pytest.mark.e2e
def test_tool_input_nested_1000_deep_is_a_tool_error(server: FakeServer, tmp_path: Path) -> None:
    deep = '{"command": "touch ran", "x": ' + "[" * 1000 + "]" * 1000 + "}"
    server.add_turn(tool_calls=[ToolCall("Bash", raw=deep)])
    server.add_turn(text="ok")
    proc, events = run(server, tmp_path)
    assert_success(proc, events)
    assert not (tmp_path / "ran").exists()
    [(call_id, tool_input)], [(result_id, text, is_error)] = sent(server, 1)
    assert tool_input == {} and result_id == call_id
    assert is_error and f"nested more than {MAX_INPUT_DEPTH} levels" in text


@pytest.mark.e2e
def test_duplicate_id_in_one_message_runs_once(server: FakeServer, tmp_path: Path) -> None:
    server.add_turn(
        tool_calls=[
            ToolCall("Bash", {"command": "touch first"}, id="call_same"),
            ToolCall("Bash", {"command": "touch second"}, id="call_same"),
        ]
    )
    server.add_turn(text="ok")
    proc, events = run(server, tmp_path)
    assert_success(proc, events)
    assert (tmp_path / "first").exists() and not (tmp_path / "second").exists()
    calls, results = sent(server, 1)
    ids = [c[0] for c in calls]
    assert ids[0] == "call_same" and ids[1] != "call_same" and len(set(ids)) == 2
    # One result per call, each under its own call's id: a conversation the API accepts.
    assert [r[0] for r in results] == ids
    assert results[0][2] is False
    assert results[1][2] is True and "already used" in results[1][1]


@pytest.mark.e2e
def test_id_reused_from_an_earlier_turn_is_not_run_again(
    server: FakeServer, tmp_path: Path
) -> None:
    server.add_turn(tool_calls=[ToolCall("Bash", {"command": "touch one"}, id="call_again")])
    server.add_turn(tool_calls=[ToolCall("Bash", {"command": "touch two"}, id="call_again")])
    server.add_turn(text="ok")
    proc, events = run(server, tmp_path)
    assert_success(proc, events)
    assert (tmp_path / "one").exists() and not (tmp_path / "two").exists()
    [(call_id, _)], [(result_id, text, is_error)] = sent(server, 2)
    assert call_id != "call_again" and result_id == call_id
    assert is_error and "already used" in text


@pytest.mark.e2e
def test_call_cut_off_by_max_tokens_is_a_tool_error(server: FakeServer, tmp_path: Path) -> None:
    # What a cut leaves parses as far as it goes ({"command": "touch ran"}): it must not run.
    cut = '{"command": "touch ran", "description": "make a fi'
    server.add_turn(
        text="Writing.", tool_calls=[ToolCall("Bash", raw=cut)], stop_reason="max_tokens"
    )
    server.add_turn(text="ok")
    proc, events = run(server, tmp_path)
    assert_success(proc, events)
    assert events[-1]["result"] == "ok"
    assert not (tmp_path / "ran").exists()
    [(call_id, _)], [(result_id, text, is_error)] = sent(server, 1)
    assert result_id == call_id and is_error and "cut off by the output token limit" in text


@pytest.mark.e2e
def test_nan_and_infinity_in_tool_input_are_a_tool_error(
    server: FakeServer, tmp_path: Path
) -> None:
    # json.loads takes them, but they are not JSON: sent back, no request could be encoded.
    server.add_turn(tool_calls=[ToolCall("Bash", raw='{"command": "touch ran", "x": NaN}')])
    server.add_turn(tool_calls=[ToolCall("Bash", raw='{"command": "touch ran", "x": -Infinity}')])
    # Nor is a number no float can hold: json.loads makes it inf.
    server.add_turn(tool_calls=[ToolCall("Bash", raw='{"command": "touch ran", "x": 1e999}')])
    server.add_turn(text="ok")
    proc, events = run(server, tmp_path)
    assert_success(proc, events)
    assert not (tmp_path / "ran").exists()
    for n in (1, 2, 3):
        [(call_id, _)], [(result_id, text, is_error)] = sent(server, n)
        assert result_id == call_id and is_error
        assert "a number JSON cannot carry" in str(text)


@pytest.mark.e2e
def test_an_id_the_api_would_refuse_is_renamed_and_the_call_runs(
    server: FakeServer, tmp_path: Path
) -> None:
    server.add_turn(tool_calls=[ToolCall("Bash", {"command": "touch ran"}, id="call 1/\ud800")])
    server.add_turn(text="ok")
    proc, events = run(server, tmp_path)
    assert_success(proc, events)
    assert (tmp_path / "ran").exists()
    [(call_id, _)], [(result_id, _, is_error)] = sent(server, 1)
    assert call_id.startswith("toolu_taskloom_") and result_id == call_id and not is_error


# -- parsing and vetting -------------------------------------------------------------------------


def test_clean_text() -> None:
    assert clean_text("plain") == ("plain", 0)
    assert clean_text("ünï") == ("ünï", 0)
    assert clean_text("a\ud800b\udfff") == ("a\ufffdb\ufffd", 2)
    # A pair split over two chunks and joined is one character again, not two replacements.
    assert clean_text("\ud83d" + "\ude00") == ("\U0001f600", 0)
    assert clean_text("\ufffd\ud800") == ("\ufffd\ufffd", 1)


def test_tool_use_block_marks_calls_that_must_not_run() -> None:
    deep = "[" * 5000 + "]" * 5000
    assert tool_use_block("t", "T", '{"a": ' + deep + "}", stop_reason=None, last=True).defect == (
        TOO_DEEP
    )
    cut = tool_use_block("t", "T", '{"a": 1, "b": "x', stop_reason="max_tokens", last=True)
    assert (cut.input, cut.defect) == ({"a": 1}, CUT_OFF)
    broken = tool_use_block("t", "T", '{"a": 1, "b": "x', stop_reason="end_turn", last=True)
    assert broken.defect == INCOMPLETE
    # No input at all: a tool without parameters, unless the limit struck right there.
    assert tool_use_block("t", "T", "", stop_reason="max_tokens", last=True).defect == CUT_OFF
    assert tool_use_block("t", "T", "", stop_reason="max_tokens", last=False).defect is None
    whole = tool_use_block("t", "T", '{"a": 1}', stop_reason="max_tokens", last=True)
    assert (whole.input, whole.defect) == ({"a": 1}, None)


def test_a_tool_use_block_left_open_by_max_tokens_is_kept_and_marked() -> None:
    msg = _Assembly(model="m")
    feed = [
        ("message_start", {"message": {"id": "msg_1", "usage": {"input_tokens": 3}}}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
        ("content_block_stop", {"index": 0}),
        (
            "content_block_start",
            {"index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Write"}},
        ),
        (
            "content_block_delta",
            {"index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"file_'}},
        ),
        # No content_block_stop: the output limit struck inside the call.
        ("message_delta", {"delta": {"stop_reason": "max_tokens"}}),
    ]
    for kind, data in feed:
        list(msg.feed(kind, data))
    [done] = list(msg.feed("message_stop", {}))
    message = done.message  # type: ignore[union-attr]
    assert message.text() == "Hi"
    [call] = message.tool_uses()
    assert (call.id, call.defect) == ("toolu_1", CUT_OFF)


def test_vet_answer_leaves_clean_answers_alone_and_records_changes() -> None:
    clean = Message(
        role="assistant",
        content=[TextBlock(text="hi"), ToolUseBlock(id="a", name="T", input={"x": [1]})],
    )
    assert vet_answer(clean, {"b"}) is clean
    dirty = Message(
        role="assistant",
        id="msg_\ud800",
        content=[
            ThinkingBlock(thinking="\udc00"),
            ToolUseBlock(id="a", name="T", input={"k\ud800": "v"}),
            ToolUseBlock(id="a", name="T", input={}),
            ToolUseBlock(id="seen", name="T", input={}),
        ],
    )
    vetted = vet_answer(dirty, {"seen"})
    assert vetted.id == "msg_\ufffd"
    assert vetted.content[0].thinking == "\ufffd"  # type: ignore[union-attr]
    calls = vetted.tool_uses()
    assert calls[0].input == {"k\ufffd": "v"} and "invalid Unicode" in (calls[0].defect or "")
    assert calls[0].id == "a" and len({c.id for c in calls} | {"seen"}) == 4
    assert all("already used" in (c.defect or "") for c in calls[1:])
    assert vetted.sanitized is not None and len(vetted.sanitized) == 5
    # Marks and notes stay on our side: the wire form has neither.
    wire = json.dumps(vetted.wire())
    assert "defect" not in wire and "sanitized" not in wire
    assert "sanitized" in vetted.full()


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


async def test_engine_answers_bad_calls_with_tool_errors_and_goes_on(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            ScriptedTurn(
                tool_calls=(
                    ScriptedCall("Bash", {"command": "touch one"}, id="dup"),
                    ScriptedCall("Bash", {"command": "touch two"}, id="dup"),
                    ScriptedCall("Bash", {"command": "touch three", "x": nested(80)}),
                )
            ),
            "ok",
        ]
    )
    work = tmp_path / "work"
    work.mkdir()
    async with TaskRuntime() as rt:
        config = EngineConfig(
            model=model, system_prompt="", tools=[BashTool()], owner=rt.session_id, cwd=work
        )
        engine = Engine(config, rt)
        events = [e async for e in engine.run("go")]
    done = [e for e in events if isinstance(e, ToolDone)]
    assert [d.result.is_error for d in done] == [False, True, True]
    assert "already used" in done[1].result.content and "nested more" in done[2].result.content
    assert sorted(p.name for p in work.iterdir()) == ["one"]
    answered = [b.tool_use_id for b in engine.messages[2].content if isinstance(b, ToolResultBlock)]
    assert answered == [c.id for c in engine.messages[1].tool_uses()]
    assert engine.last_text() == "ok"


async def test_an_event_of_the_wrong_shape_is_a_model_error_not_a_crash() -> None:
    from httpx_sse import ServerSentEvent

    from taskloom.errors import ModelError
    from taskloom.models.anthropic import AnthropicModel

    model = AnthropicModel("m", api_key="k", base_url="http://127.0.0.1:9")

    async def sse() -> AsyncIterator[ServerSentEvent]:
        data = {"type": "content_block_delta", "index": [0], "delta": "not an object"}
        yield ServerSentEvent(event="content_block_delta", data=json.dumps(data))

    with pytest.raises(ModelError, match="unreadable stream event: TypeError") as info:
        async for _ in model._transport._guard(model._parser("m")(sse())):
            pass
    assert info.value.retryable


@pytest.mark.parametrize(
    ("start", "problem"),
    [
        ({"type": "tool_use", "id": None, "name": "Bash"}, "content[0].id"),
        ({"type": "tool_use", "id": "toolu_1", "name": 7}, "content[0].name"),
        ({"type": "text", "text": "hi", "message_id": 123}, "id"),
    ],
)
async def test_an_answer_of_the_wrong_types_is_a_model_error_not_a_crash(
    start: dict[str, object], problem: str
) -> None:
    # A null or numeric id or name would pass into the conversation (and a transcript that
    # refuses it on resume), or crash the engine later: it ends the request, to be retried.
    from httpx_sse import ServerSentEvent

    from taskloom.errors import ModelError
    from taskloom.models.anthropic import AnthropicModel
    from taskloom.models.openai import OpenAIModel

    message_id = start.pop("message_id", "msg_1")
    events = [
        {"type": "message_start", "message": {"id": message_id, "model": "m"}},
        {"type": "content_block_start", "index": 0, "content_block": start},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
        {"type": "message_stop"},
    ]

    async def sse() -> AsyncIterator[ServerSentEvent]:
        for data in events:
            yield ServerSentEvent(event=str(data["type"]), data=json.dumps(data))

    model = AnthropicModel("m", api_key="k", base_url="http://127.0.0.1:9")
    said = f"unreadable stream event: .*{re.escape(problem)}"
    with pytest.raises(ModelError, match=said) as info:
        async for _ in model._transport._guard(model._parser("m")(sse())):
            pass
    assert info.value.retryable
    if problem == "content[0].name":  # the same answer from a Chat Completions server
        chunk = {
            "id": "c1",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [{"index": 0, "id": "call_1", "function": {"name": 7}}]
                    },
                    "finish_reason": "tool_calls",
                }
            ],
        }

        async def chunks() -> AsyncIterator[ServerSentEvent]:
            yield ServerSentEvent(data=json.dumps(chunk))
            yield ServerSentEvent(data="[DONE]")

        openai = OpenAIModel("m", api_key="k", base_url="http://127.0.0.1:9")
        with pytest.raises(ModelError, match=said):
            async for _ in openai._transport._guard(openai._parser("m")(chunks())):
                pass


async def test_inputs_a_tool_refuses_are_quoted_cut_short(tmp_path: Path) -> None:
    huge = "echo " + "a" * 10 * 1024 * 1024  # execve refuses it: too long for one argument
    model = ScriptedModel(
        [
            ScriptedTurn(
                tool_calls=(
                    ScriptedCall("Bash", {"command": huge}),
                    ScriptedCall("TaskOutput", {"task_id": "b" * 1_000_000}),
                    ScriptedCall("N" * 1_000_000, {}),
                    ScriptedCall("Bash", {"command": "true", "k" * 1_000_000: 1}),
                )
            ),
            "ok",
        ]
    )
    async with TaskRuntime() as rt:
        config = EngineConfig(
            model=model,
            system_prompt="",
            tools=[BashTool(), TaskOutputTool()],
            owner=rt.session_id,
            cwd=tmp_path,
            # Megabytes of input would fill any window: compaction is another test's subject.
            settings={"autoCompact": False},
        )
        events = [e async for e in Engine(config, rt).run("go")]
    done = [e.result for e in events if isinstance(e, ToolDone)]
    assert [r.is_error for r in done] == [True, True, True, True]
    assert all(len(r.content) < 1_000 for r in done), [len(r.content) for r in done]
    assert "cannot start shell for 'echo aaa" in done[0].content
    assert "(10,485,765 characters)" in done[0].content
    assert (
        "No task found with ID: bbb" in done[1].content
        and "(1,000,000 characters)" in done[1].content
    )
    assert "No such tool available: NNN" in done[2].content
    assert "kkk… (1,000,000 characters): unexpected field" in done[3].content


def test_a_tool_error_is_bounded_whatever_it_says() -> None:
    result = tool_error("start " + "x" * 50_000 + " end")
    assert len(result.content) < MAX_TOOL_ERROR_CHARS + 100
    assert "start" in result.content and "end" in result.content
    assert "[40,010 characters cut]" in result.content
