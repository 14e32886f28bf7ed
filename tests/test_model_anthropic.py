"""AnthropicModel against a local fake server speaking the real Messages streaming format."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse

from fake_servers import ErrorReply, FakeAnthropicServer, ToolCall, Turn
from taskloom.errors import ModelError
from taskloom.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from taskloom.models.anthropic import AnthropicModel
from taskloom.models.base import (
    INVALID_INPUT_KEY,
    MessageComplete,
    ModelRequest,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolSpec,
    ToolUseStart,
)
from taskloom.untrusted import BAD_NUMBER, tool_use_block

BASH = ToolSpec(
    "Bash",
    "Run a shell command.",
    {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
)
READ = ToolSpec(
    "Read",
    "Read a file.",
    {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]},
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def fake() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as server:
        yield server
    assert not any(t.name == "FakeAnthropicServer" for t in threading.enumerate())


@pytest.fixture
async def model(fake: FakeAnthropicServer) -> AsyncIterator[AnthropicModel]:
    async with AnthropicModel(
        "claude-test", api_key="sk-test", base_url=fake.url, retry_base_delay=0.01
    ) as m:
        yield m


def request(text: str = "hi", tools: list[ToolSpec] | None = None, **kw: Any) -> ModelRequest:
    return ModelRequest(
        model="claude-test",
        system="You are terse.",
        messages=[Message.user(text)],
        tools=tools or [],
        **kw,
    )


async def run(model: AnthropicModel, req: ModelRequest) -> tuple[list[StreamEvent], Message]:
    async with model.stream(req) as events:
        got = [e async for e in events]
    assert isinstance(got[-1], MessageComplete)
    assert sum(isinstance(e, MessageComplete) for e in got) == 1
    return got, got[-1].message


async def test_text_arrives_in_pieces(fake: FakeAnthropicServer, model: AnthropicModel) -> None:
    fake.add_turn(text="Hello there, brave new world.")
    events, msg = await run(model, request())
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 1
    assert "".join(d.text for d in deltas) == "Hello there, brave new world."
    assert {d.index for d in deltas} == {0}
    assert msg.text() == "Hello there, brave new world."
    assert msg.role == "assistant"
    assert msg.stop_reason == "end_turn"
    assert msg.id is not None and msg.id.startswith("msg_fake_")
    assert msg.model == "claude-test"


async def test_several_tool_calls_with_chunked_input(
    fake: FakeAnthropicServer, model: AnthropicModel
) -> None:
    bash_input = {"command": "ls -la /tmp", "description": "list temp files"}
    fake.add_turn(
        text="Let me look.",
        tool_calls=[ToolCall("Bash", bash_input, chunks=6), ("Read", {"file_path": "/etc/hosts"})],
    )
    events, msg = await run(model, request(tools=[BASH, READ]))
    starts = [e for e in events if isinstance(e, ToolUseStart)]
    assert [(s.index, s.name) for s in starts] == [(1, "Bash"), (2, "Read")]
    chunks = [e for e in events if isinstance(e, ToolInputDelta) and e.index == 1]
    assert len(chunks) >= 6
    assert json.loads("".join(c.partial_json for c in chunks)) == bash_input
    uses = msg.tool_uses()
    assert [(u.name, u.input) for u in uses] == [
        ("Bash", bash_input),
        ("Read", {"file_path": "/etc/hosts"}),
    ]
    assert [u.id for u in uses] == [s.id for s in starts]
    assert len({u.id for u in uses}) == 2
    assert msg.text() == "Let me look."
    assert msg.stop_reason == "tool_use"


async def test_usage_merges_message_start_and_delta(
    fake: FakeAnthropicServer, model: AnthropicModel
) -> None:
    # message_start carries input and cache counts with output_tokens=1; message_delta the
    # final output count.
    fake.add_turn(text="ok", input_tokens=1234, output_tokens=56, cache_read_input_tokens=7)
    _, msg = await run(model, request())
    assert msg.usage is not None
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (1234, 56)
    assert msg.usage.cache_read_input_tokens == 7


async def test_thinking_and_signature(fake: FakeAnthropicServer, model: AnthropicModel) -> None:
    fake.add_turn(text="42", thinking="Let me reason about it.")
    events, msg = await run(model, request())
    thinking = [e for e in events if isinstance(e, ThinkingDelta)]
    assert "".join(t.thinking for t in thinking) == "Let me reason about it."
    assert msg.content[0].dump()["signature"].startswith("sig_fake_")
    assert msg.text() == "42"


async def test_overloaded_529_is_retried(fake: FakeAnthropicServer, model: AnthropicModel) -> None:
    fake.add_error(529, "overloaded_error", "Overloaded")
    fake.add_turn(text="finally")
    _, msg = await run(model, request())
    assert msg.text() == "finally"
    assert len(fake.requests) == 2
    assert fake.requests[0].body == fake.requests[1].body


async def test_overloaded_stream_event_before_content_is_retried(
    fake: FakeAnthropicServer, model: AnthropicModel
) -> None:
    fake.add_stream_error("overloaded_error", "Overloaded")
    fake.add_turn(text="second try")
    events, msg = await run(model, request())
    assert msg.text() == "second try"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "second try"
    assert len(fake.requests) == 2


async def test_no_retry_once_content_was_yielded(
    fake: FakeAnthropicServer, model: AnthropicModel
) -> None:
    fake.add_stream_error("overloaded_error", "Overloaded", partial_text="Half an answer")
    fake.add_turn(text="must not be fetched")
    seen: list[StreamEvent] = []
    with pytest.raises(ModelError) as info:
        async with model.stream(request()) as events:
            async for event in events:
                seen.append(event)
    assert info.value.error_type == "overloaded_error"
    assert "".join(e.text for e in seen if isinstance(e, TextDelta)) == "Half an answer"
    assert len(fake.requests) == 1
    assert fake.pending == 1


async def test_400_is_surfaced_and_not_retried(
    fake: FakeAnthropicServer, model: AnthropicModel
) -> None:
    fake.add_error(400, "invalid_request_error", "messages.0: roles must alternate")
    fake.add_turn(text="never")
    with pytest.raises(ModelError) as info:
        await run(model, request())
    err = info.value
    assert (err.status, err.error_type, err.retryable) == (400, "invalid_request_error", False)
    assert "messages.0: roles must alternate" in str(err)
    assert len(fake.requests) == 1


async def test_retry_after_is_honoured(fake: FakeAnthropicServer, model: AnthropicModel) -> None:
    fake.add_error(429, "rate_limit_error", "Slow down", retry_after=0.3)
    fake.add_turn(text="ok")
    start = time.monotonic()
    _, msg = await run(model, request())
    assert time.monotonic() - start >= 0.3  # our own backoff here would be ~0.01 s
    assert msg.text() == "ok"
    assert len(fake.requests) == 2


async def test_gives_up_after_max_retries(fake: FakeAnthropicServer) -> None:
    fake.add(*[ErrorReply(500, "api_error", "Internal server error")] * 3)
    async with AnthropicModel(
        "claude-test", api_key="k", base_url=fake.url, max_retries=2, retry_base_delay=0.01
    ) as model:
        with pytest.raises(ModelError) as info:
            await run(model, request())
    assert info.value.retryable and info.value.status == 500
    assert "Internal server error" in str(info.value) and "3 attempts" in str(info.value)
    assert len(fake.requests) == 3


async def test_connection_errors_are_retried() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nobody listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    attempts: list[httpx.Request] = []

    async def count(req: httpx.Request) -> None:
        attempts.append(req)

    async with httpx.AsyncClient(event_hooks={"request": [count]}) as client:
        model = AnthropicModel(
            "claude-test",
            api_key="k",
            base_url=f"http://127.0.0.1:{port}",
            client=client,
            max_retries=2,
            retry_base_delay=0.01,
        )
        with pytest.raises(ModelError) as info:
            await run(model, request())
        await model.aclose()  # must not close a client it was given
        assert not client.is_closed
    assert info.value.retryable
    assert "ConnectError" in str(info.value)
    assert len(attempts) == 3


async def test_auth_token_from_env_sends_bearer(
    fake: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "tok-123")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
    fake.add_turn(text="ok")
    async with AnthropicModel("claude-test") as model:
        await run(model, request())
    headers = fake.requests[0].headers
    assert headers["authorization"] == "Bearer tok-123"
    assert "x-api-key" not in headers


async def test_api_key_from_env(fake: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url + "/")
    fake.add_turn(text="ok")
    async with AnthropicModel("claude-test") as model:
        await run(model, request())
    assert fake.requests[0].headers["x-api-key"] == "sk-env"
    assert "authorization" not in fake.requests[0].headers


async def test_request_shape(fake: FakeAnthropicServer, model: AnthropicModel) -> None:
    history = [
        Message.user("list files"),
        Message(
            role="assistant",
            content=[
                TextBlock(text="Sure."),
                ToolUseBlock(id="toolu_1", name="Bash", input={"command": "ls"}),
            ],
        ),
        Message(role="user", content=[ToolResultBlock(tool_use_id="toolu_1", content="a\nb")]),
    ]
    fake.add_turn(text="Two files.")
    req = ModelRequest("claude-x", "Be brief.", history, [BASH], max_tokens=321)
    await run(model, req)
    sent = fake.requests[0]
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["content-type"] == "application/json"
    assert sent.headers["x-api-key"] == "sk-test"
    body = sent.body
    assert body["stream"] is True
    assert (body["model"], body["max_tokens"], body["system"]) == ("claude-x", 321, "Be brief.")
    assert body["messages"] == [m.wire() for m in history]
    assert body["messages"][1]["content"][1] == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "Bash",
        "input": {"command": "ls"},
    }
    assert body["tools"] == [
        {"name": "Bash", "description": BASH.description, "input_schema": BASH.input_schema}
    ]


async def test_leaving_early_then_reusing_the_model(
    fake: FakeAnthropicServer, model: AnthropicModel
) -> None:
    fake.add_turn(text="one two three four five six")
    fake.add_turn(text="again")
    async with model.stream(request()) as events:
        async for event in events:
            assert isinstance(event, TextDelta)
            break
    _, msg = await run(model, request())
    assert msg.text() == "again"


def test_tool_input_parsing() -> None:
    def parse(raw: str) -> dict[str, object]:
        return tool_use_block("t", "T", raw, stop_reason="tool_use", last=True).input

    assert parse("") == {}
    assert parse('{"a": [1, 2]}') == {"a": [1, 2]}
    # Cut short: what is complete is kept (the call itself is marked not to run).
    assert parse('{"a": 1, "b": "unfinish') == {"a": 1}
    # Not an object, or not JSON: kept as it came, for the tool to report as an error.
    assert parse("[1, 2]") == {INVALID_INPUT_KEY: "[1, 2]"}
    assert parse("ls -la") == {INVALID_INPUT_KEY: "ls -la"}
    # A number JSON cannot carry back (NaN, Infinity, out of range): dropped, the call not run.
    for raw in ('{"a": NaN}', '{"a": -Infinity}', '{"a": 1e999}'):
        block = tool_use_block("t", "T", raw, stop_reason="tool_use", last=True)
        assert block.input == {} and block.defect == BAD_NUMBER, raw


async def test_official_sdk_reads_the_same_stream(
    fake: FakeAnthropicServer, model: AnthropicModel
) -> None:
    import anthropic  # dev-only: proves the fake is wire-true

    turn = Turn(
        text="Checking.",
        tool_calls=(ToolCall("Bash", {"command": "echo hi"}, chunks=4), ToolCall("Read", {})),
        input_tokens=321,
        output_tokens=17,
    )
    fake.add(turn, turn)
    _, ours = await run(model, request(tools=[BASH, READ]))
    client = anthropic.AsyncAnthropic(api_key="sk-test", base_url=fake.url, max_retries=0)
    try:
        async with client.messages.stream(
            model="claude-test",
            max_tokens=100,
            system="You are terse.",
            messages=[{"role": "user", "content": "hi"}],
            tools=[
                {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in (BASH, READ)
            ],
        ) as stream:
            theirs = await stream.get_final_message()
    finally:
        await client.close()
    assert [b.type for b in theirs.content] == ["text", "tool_use", "tool_use"]
    assert theirs.content[0].text == ours.text() == "Checking."  # type: ignore[union-attr]
    sdk_calls = [(b.name, b.input) for b in theirs.content if b.type == "tool_use"]
    assert sdk_calls == [(u.name, u.input) for u in ours.tool_uses()]
    assert sdk_calls == [("Bash", {"command": "echo hi"}), ("Read", {})]
    assert theirs.stop_reason == ours.stop_reason == "tool_use"
    assert ours.usage is not None
    assert (theirs.usage.input_tokens, theirs.usage.output_tokens) == (321, 17)
    assert (ours.usage.input_tokens, ours.usage.output_tokens) == (321, 17)


def test_fake_server_from_sync_code_and_responder() -> None:
    def route(body: dict[str, Any]) -> str:
        return "pong" if "ping" in json.dumps(body["messages"]) else "what?"

    with FakeAnthropicServer(responder=route) as server:
        payload = {"model": "m", "max_tokens": 5, "stream": True}
        texts = []
        with httpx.Client(base_url=server.url) as client:
            for word in ("ping", "hello"):
                payload["messages"] = [{"role": "user", "content": word}]
                with connect_sse(client, "POST", "/v1/messages", json=payload) as source:
                    kinds = [(e.event, json.loads(e.data)) for e in source.iter_sse()]
                texts.append(
                    "".join(d["delta"]["text"] for k, d in kinds if k == "content_block_delta")
                )
                assert kinds[-1][0] == "message_stop"
        assert texts == ["pong", "what?"]
        assert [r.body["messages"][0]["content"] for r in server.requests] == ["ping", "hello"]
    assert not any(t.name == "FakeAnthropicServer" for t in threading.enumerate())


def test_a_stream_reporting_no_usage_leaves_it_unknown() -> None:
    """A proxy that sends no usage at all: the message's usage is None (unknown), not 0."""
    from taskloom.models.anthropic import _Assembly

    assembly = _Assembly(model="claude-x")
    stream = [
        ("message_start", {"message": {"id": "msg_1", "model": "claude-x"}}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": "hi"}}),
        ("content_block_stop", {"index": 0}),
        ("message_delta", {"delta": {"stop_reason": "end_turn"}}),
        ("message_stop", {}),
    ]
    events = [event for kind, data in stream for event in assembly.feed(kind, data)]
    final = events[-1]
    assert isinstance(final, MessageComplete)
    assert final.message.text() == "hi" and final.message.usage is None
