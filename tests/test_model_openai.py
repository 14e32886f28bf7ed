"""OpenAIModel against a local fake server speaking the real Chat Completions stream format."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from fake_llama_cpp import FakeLlamaCppServer, render, validation_errors
from fake_servers import ErrorReply, FakeOpenAIServer, ToolCall, Turn
from helpers import clean_env, json_lines, run_cli
from taskloom.errors import ModelError
from taskloom.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from taskloom.models.base import (
    MessageComplete,
    ModelRequest,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolSpec,
    ToolUseStart,
)
from taskloom.models.openai import OpenAIModel, to_chat_messages, to_usage

BASH = ToolSpec(
    "Bash",
    "Run a shell command.",
    {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
)
GREP = ToolSpec(
    "Grep",
    "Search files.",
    {"type": "object", "properties": {"pattern": {"type": "string"}}, "required": ["pattern"]},
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def fake() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server
    assert not any(t.name == "FakeOpenAIServer" for t in threading.enumerate())


@pytest.fixture
async def model(fake: FakeOpenAIServer) -> AsyncIterator[OpenAIModel]:
    async with OpenAIModel(
        "gpt-test", api_key="sk-test", base_url=fake.url, retry_base_delay=0.01
    ) as m:
        yield m


def request(text: str = "hi", tools: list[ToolSpec] | None = None) -> ModelRequest:
    return ModelRequest("gpt-test", "You are terse.", [Message.user(text)], tools or [])


async def run(model: OpenAIModel, req: ModelRequest) -> tuple[list[StreamEvent], Message]:
    async with model.stream(req) as events:
        got = [e async for e in events]
    assert isinstance(got[-1], MessageComplete)
    assert sum(isinstance(e, MessageComplete) for e in got) == 1
    return got, got[-1].message


async def test_text_and_usage(fake: FakeOpenAIServer, model: OpenAIModel) -> None:
    fake.add_turn(text="Hello from the chat side.", input_tokens=90, output_tokens=12)
    events, msg = await run(model, request())
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 1 and {d.index for d in deltas} == {0}
    assert "".join(d.text for d in deltas) == msg.text() == "Hello from the chat side."
    assert msg.stop_reason == "end_turn"
    assert msg.id is not None and msg.id.startswith("chatcmpl-fake")
    assert msg.usage is not None
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (90, 12)


async def test_cached_prompt_tokens_become_cache_reads(
    fake: FakeOpenAIServer, model: OpenAIModel
) -> None:
    fake.add_turn(text="ok", input_tokens=10, output_tokens=3, cache_read_input_tokens=40)
    _, msg = await run(model, request())
    assert msg.usage is not None
    assert (msg.usage.input_tokens, msg.usage.cache_read_input_tokens) == (10, 40)
    assert msg.usage.context_tokens == 50  # = prompt_tokens


async def test_several_tool_calls_with_chunked_arguments(
    fake: FakeOpenAIServer, model: OpenAIModel
) -> None:
    bash_input = {"command": "grep -rn TODO src", "timeout": 5000}
    fake.add_turn(
        text="Searching.",
        tool_calls=[ToolCall("Bash", bash_input, chunks=5), ("Grep", {"pattern": "FIXME"})],
    )
    events, msg = await run(model, request(tools=[BASH, GREP]))
    starts = [e for e in events if isinstance(e, ToolUseStart)]
    assert [(s.index, s.name) for s in starts] == [(1, "Bash"), (2, "Grep")]
    chunks = [e.partial_json for e in events if isinstance(e, ToolInputDelta) and e.index == 1]
    assert len(chunks) == 5
    assert json.loads("".join(chunks)) == bash_input
    # Every event's index is the position of its block in the final message.
    assert [type(b).__name__ for b in msg.content] == ["TextBlock", "ToolUseBlock", "ToolUseBlock"]
    uses = msg.tool_uses()
    assert [(u.name, u.input) for u in uses] == [
        ("Bash", bash_input),
        ("Grep", {"pattern": "FIXME"}),
    ]
    assert [u.id for u in uses] == [s.id for s in starts]
    assert msg.stop_reason == "tool_use"


async def test_reasoning_content_becomes_thinking(
    fake: FakeOpenAIServer, model: OpenAIModel
) -> None:
    fake.add_turn(text="4", thinking="two plus two")
    events, msg = await run(model, request())
    assert [e.index for e in events if isinstance(e, ThinkingDelta)] == [0, 0, 0]
    assert msg.content[0].dump()["thinking"] == "two plus two"
    assert msg.text() == "4"


async def test_request_shape(fake: FakeOpenAIServer, model: OpenAIModel) -> None:
    history = [
        Message.user("find todos"),
        Message(
            role="assistant",
            content=[
                TextBlock(text="On it."),
                ToolUseBlock(id="call_1", name="Bash", input={"command": "grep TODO"}),
                ToolUseBlock(id="call_2", name="Grep", input={"pattern": "x"}),
            ],
        ),
        Message(
            role="user",
            content=[
                ToolResultBlock(tool_use_id="call_1", content="a.py:1: TODO"),
                ToolResultBlock(tool_use_id="call_2", content="bad regex", is_error=True),
                TextBlock(text="<task-notification>...</task-notification>"),
            ],
        ),
    ]
    fake.add_turn(text="One todo.")
    await run(model, ModelRequest("gpt-x", "Be brief.", history, [BASH], max_tokens=77))
    sent = fake.requests[0]
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == "Bearer sk-test"
    body = sent.body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert (body["model"], body["max_tokens"]) == ("gpt-x", 77)
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "find todos"},
        {
            "role": "assistant",
            "content": "On it.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "Bash", "arguments": '{"command": "grep TODO"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "Grep", "arguments": '{"pattern": "x"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py:1: TODO"},
        {"role": "tool", "tool_call_id": "call_2", "content": "Error: bad regex"},
        {"role": "user", "content": "<task-notification>...</task-notification>"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "Bash",
                "description": BASH.description,
                "parameters": BASH.input_schema,
            },
        }
    ]


def test_tool_only_assistant_message_has_empty_content() -> None:
    msg = Message(role="assistant", content=[ToolUseBlock(id="c", name="Bash", input={})])
    assert to_chat_messages("", [msg]) == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "Bash", "arguments": "{}"}}
            ],
        }
    ]


def _null_contents(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if "content" in m and m["content"] is None]


async def test_after_a_tool_call_llama_cpp_takes_every_request() -> None:
    """llama-cpp-python refuses ``"content": null`` (500); after a tool call none is sent."""
    async with FakeLlamaCppServer() as server:
        server.add_turn(tool_calls=[("Bash", {"command": "ls"})])
        server.add_turn(text="Two files.")
        async with OpenAIModel("local", base_url=server.url, retry_base_delay=0.01) as model:
            _, first = await run(model, request("list", tools=[BASH]))
            assert first.text() == "" and len(first.tool_uses()) == 1
            call = first.tool_uses()[0]
            history = [
                Message.user("list"),
                first,
                Message(role="user", content=[ToolResultBlock(tool_use_id=call.id, content="a b")]),
            ]
            _, second = await run(model, ModelRequest("local", "Be terse.", history, [BASH]))
    assert second.text() == "Two files."
    assert len(server.requests) == 2  # none refused, none retried
    assert [_null_contents(r.body) for r in server.requests] == [[], []]
    sent = server.requests[1].body["messages"][2]
    assert sent["role"] == "assistant" and sent["tool_calls"][0]["id"] == call.id


async def test_a_500_refusing_the_request_is_not_retried(
    fake: FakeOpenAIServer, model: OpenAIModel
) -> None:
    """llama-cpp-python's 500 for a body its types refuse: one try, its reason and the URL."""
    call = {"id": "c1", "type": "function", "function": {"name": "Bash", "arguments": "{}"}}
    refused = {"messages": [{"role": "user", "content": "hi"}]}
    refused["messages"].append({"role": "assistant", "content": None, "tool_calls": [call]})
    body = render(validation_errors(refused))  # the body the real server sends for it
    fake.add(ErrorReply(500, "internal_server_error", body))
    fake.add_turn(text="never")
    with pytest.raises(ModelError) as info:
        await run(model, request())
    err = info.value
    assert (err.status, err.error_type, err.retryable) == (500, "internal_server_error", False)
    assert len(fake.requests) == 1 and fake.pending == 1
    text = str(err)
    assert f"{fake.url}/chat/completions" in text and "\n" not in text
    # What was wrong, without the noise of the union's other members.
    assert text.endswith(
        "refused the request as invalid (not retried): messages.1."
        "ChatCompletionRequestAssistantMessage.content: Input should be a valid string "
        "(got None)"
    )


@pytest.mark.parametrize(
    "message",
    [
        "llama_decode returned -1",
        # A proxy failing to parse its upstream's answer: not the request's body.
        "1 validation error for ModelResponse\n  {'type': 'missing', 'loc': ('choices',), "
        "'msg': 'Field required'}",
    ],
)
async def test_a_500_that_is_a_server_failure_is_still_retried(
    fake: FakeOpenAIServer, model: OpenAIModel, message: str
) -> None:
    fake.add_error(500, "internal_server_error", message)
    fake.add_turn(text="ok")
    _, msg = await run(model, request())
    assert msg.text() == "ok" and len(fake.requests) == 2


async def test_a_server_sending_no_usage_leaves_it_unknown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with FakeOpenAIServer(usage=False) as server:
        server.add_turn(text="one")
        server.add_turn(text="two")
        async with OpenAIModel("local", base_url=server.url) as model:
            with caplog.at_level("WARNING", logger="taskloom"):
                _, first = await run(model, request())
                _, second = await run(model, request())
    assert first.usage is None and second.usage is None  # unknown, not 0
    warned = [r.getMessage() for r in caplog.records if "no token usage" in r.getMessage()]
    assert len(warned) == 1 and server.url in warned[0]  # said once


def test_official_endpoint_gets_max_completion_tokens() -> None:
    body = OpenAIModel("gpt-x", base_url="https://api.openai.com/v1").request_body(request())
    assert body["max_completion_tokens"] == 16_000 and "max_tokens" not in body


async def test_key_and_base_url_from_env(
    fake: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    fake.add_turn(text="no key needed")
    async with OpenAIModel("local") as model:  # local servers usually take no key
        _, msg = await run(model, request())
    assert msg.text() == "no key needed"
    assert "authorization" not in fake.requests[0].headers
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    fake.add_turn(text="ok")
    async with OpenAIModel("gpt") as model:
        await run(model, request())
    assert fake.requests[1].headers["authorization"] == "Bearer sk-env"


async def test_server_errors_are_retried(fake: FakeOpenAIServer, model: OpenAIModel) -> None:
    fake.add_error(503, "server_error", "The server is overloaded")
    fake.add_stream_error("server_error", "The model crashed")
    fake.add_turn(text="third time")
    _, msg = await run(model, request())
    assert msg.text() == "third time"
    assert len(fake.requests) == 3


async def test_retry_after_is_honoured(fake: FakeOpenAIServer, model: OpenAIModel) -> None:
    fake.add_error(429, "requests", "Rate limit reached", retry_after=0.25)
    fake.add_turn(text="ok")
    start = time.monotonic()
    _, msg = await run(model, request())
    assert time.monotonic() - start >= 0.25
    assert msg.text() == "ok" and len(fake.requests) == 2


async def test_400_is_surfaced_and_not_retried(fake: FakeOpenAIServer, model: OpenAIModel) -> None:
    fake.add_error(400, "invalid_request_error", "Invalid 'messages[1].tool_calls'")
    fake.add_turn(text="never")
    with pytest.raises(ModelError) as info:
        await run(model, request())
    err = info.value
    assert (err.status, err.error_type, err.retryable) == (400, "invalid_request_error", False)
    assert "Invalid 'messages[1].tool_calls'" in str(err)
    assert len(fake.requests) == 1 and fake.pending == 1


async def test_no_retry_once_content_was_yielded(
    fake: FakeOpenAIServer, model: OpenAIModel
) -> None:
    fake.add_stream_error("server_error", "lost the GPU", partial_text="I will now")
    fake.add_turn(text="never")
    seen: list[StreamEvent] = []
    with pytest.raises(ModelError, match="lost the GPU"):
        async with model.stream(request()) as events:
            async for event in events:
                seen.append(event)
    assert "".join(e.text for e in seen if isinstance(e, TextDelta)) == "I will now"
    assert len(fake.requests) == 1


async def test_official_sdk_reads_the_same_stream(
    fake: FakeOpenAIServer, model: OpenAIModel
) -> None:
    import openai  # dev-only: proves the fake is wire-true

    turn = Turn(
        tool_calls=(
            ToolCall("Bash", {"command": "make test"}, chunks=4),
            ToolCall("Grep", {"pattern": "def "}, chunks=3),
        ),
        input_tokens=55,
        output_tokens=9,
    )
    fake.add(turn, turn)
    _, ours = await run(model, request(tools=[BASH, GREP]))
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=fake.url, max_retries=0)
    args: dict[int, list[str]] = {}
    names: dict[int, str] = {}
    usage: Any = None
    finish = None
    try:
        stream = await client.chat.completions.create(
            model="gpt-test",
            messages=[{"role": "user", "content": "hi"}],
            tools=[
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    },
                }
                for t in (BASH, GREP)
            ],
            stream=True,
            stream_options={"include_usage": True},
        )
        async for chunk in stream:
            usage = chunk.usage or usage
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
                for call in choice.delta.tool_calls or ():
                    if call.function and call.function.name:
                        names[call.index] = call.function.name
                    if call.function and call.function.arguments:
                        args.setdefault(call.index, []).append(call.function.arguments)
    finally:
        await client.close()
    assert [len(args[0]), len(args[1])] == [4, 3]  # arguments really came in chunks
    sdk_calls = [(names[i], json.loads("".join(args[i]))) for i in sorted(args)]
    assert sdk_calls == [(u.name, u.input) for u in ours.tool_uses()]
    assert sdk_calls == [("Bash", {"command": "make test"}), ("Grep", {"pattern": "def "})]
    assert finish == "tool_calls" and ours.stop_reason == "tool_use"
    assert (usage.prompt_tokens, usage.completion_tokens) == (55, 9)
    assert ours.usage is not None
    assert (ours.usage.input_tokens, ours.usage.output_tokens) == (55, 9)


async def test_fake_accepts_scripted_file_turns_and_reports_responder_bugs() -> None:
    def broken(body: dict[str, Any]) -> str:
        raise KeyError("no route for this prompt")

    server = FakeOpenAIServer(responder=broken)
    async with server:
        # The dict form of ScriptedModel's turn files works as is.
        server.add({"text": "hi", "usage": {"input_tokens": 3, "output_tokens": 2}})
        async with OpenAIModel("m", base_url=server.url, retry_base_delay=0.01) as model:
            _, msg = await run(model, request())
            assert msg.usage is not None and msg.usage.output_tokens == 2
            with pytest.raises(ModelError, match="no route for this prompt") as info:
                await run(model, request())
            assert info.value.status == 400
        with pytest.raises(KeyError, match="no route"):
            server.close()
    assert not any(t.name == "FakeOpenAIServer" for t in threading.enumerate())


@pytest.mark.e2e
def test_a_session_on_llama_cpp_runs_its_tool_loop_and_says_usage_is_unknown(
    tmp_path: Path,
) -> None:
    """The whole loop against llama-cpp-python's validation and its lack of usage."""
    lines = [
        {"type": "user", "message": {"role": "user", "content": text}}
        for text in ("list the files", "thanks")
    ]
    with FakeLlamaCppServer() as server:
        server.add_turn(tool_calls=[("Bash", {"command": "echo listed"})])
        server.add_turn(text="One file.")
        server.add_turn(text="You are welcome.")
        proc = run_cli(
            "--input-format", "stream-json", "--output-format", "stream-json",
            "--model", "openai:local", "--dangerously-skip-permissions",
            cwd=tmp_path,
            env=clean_env(OPENAI_BASE_URL=server.url),
            stdin="".join(json.dumps(line) + "\n" for line in lines),
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    first, second = [e for e in json_lines(proc.stdout) if e["type"] == "result"]
    assert (first["subtype"], first["result"]) == ("success", "One file."), first
    assert (second["subtype"], second["result"]) == ("success", "You are welcome.")
    assert len(server.requests) == 3  # nothing refused, nothing retried
    assert not any(_null_contents(r.body) for r in server.requests)
    # The server sent no usage: the figures are 0, and said to be unknown; the session's
    # and the turn's figures agree on what they count.
    for result, n_session, n_turn in ((first, 2, 2), (second, 3, 1)):
        assert result["usage_unknown"] is True
        assert result["usage"]["output_tokens"] == 0
        session, turn = result["modelUsage"], result["model_usage_since_last_result"]
        assert session["local"]["responsesWithoutUsage"] == n_session
        assert turn["local"]["responsesWithoutUsage"] == n_turn
        assert result["agentUsage"]["main"]["responsesWithoutUsage"] == n_session
    assert first["modelUsage"] == first["model_usage_since_last_result"]
    assert proc.stderr.count("reported no token usage") == 1, proc.stderr
    assert server.url in proc.stderr


def test_usage_counts_are_read_as_integers_and_cached_tokens_as_cache_reads() -> None:
    raw = {
        "prompt_tokens": 10.0,
        "completion_tokens": "3",
        "prompt_tokens_details": {"cached_tokens": 4},
    }
    usage = to_usage(raw)
    assert usage.dump() == {
        "input_tokens": 6,
        "output_tokens": 3,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 4,
    }
    assert type(usage.input_tokens) is int and type(usage.output_tokens) is int
    assert to_usage({"prompt_tokens": None}).context_tokens == 0
    with pytest.raises(ValueError, match="output_tokens: Input should be a valid integer"):
        to_usage({"completion_tokens": "many"})
