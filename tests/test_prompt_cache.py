"""Prompt caching on the wire: the breakpoints of a request, and the settings that time them."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from helpers import harness
from taskloom.errors import UsageError
from taskloom.messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from taskloom.models.anthropic import AnthropicModel
from taskloom.models.base import ModelRequest, ToolSpec
from taskloom.models.caching import prompt_cache_ttl
from taskloom.testing import FunctionModel, ScriptedModel, ToolCall, Turn

TOOLS = [
    ToolSpec("Bash", "Run a command.", {"type": "object", "properties": {}}),
    ToolSpec("Read", "Read a file.", {"type": "object", "properties": {}}),
]


def turn(i: int, calls: int = 1) -> list[Message]:
    """One model answer with ``calls`` tool calls, and the user message answering them."""
    uses = [ToolUseBlock(id=f"t{i}_{n}", name="Bash", input={"n": n}) for n in range(calls)]
    results = [ToolResultBlock(tool_use_id=u.id, content=f"out {n}") for n, u in enumerate(uses)]
    return [Message(role="assistant", content=[TextBlock(text="go"), *uses]), Message(
        role="user", content=list(results)
    )]  # fmt: skip


def body(messages: list[Message], *, system: str = "Be brief.", ttl: Any = "5m") -> Any:
    request = ModelRequest("claude-x", system, messages, TOOLS, cache_ttl=ttl)
    return AnthropicModel("claude-x", api_key="k").request_body(request)


def marks(sent: dict[str, Any]) -> list[tuple[str, int, int]]:
    """Where the breakpoints are: ("tools"|"system", index, -1) or ("messages", i, block)."""
    found = [("tools", i, -1) for i, t in enumerate(sent.get("tools", [])) if "cache_control" in t]
    system = sent.get("system")
    if isinstance(system, list):
        found += [("system", i, -1) for i, b in enumerate(system) if "cache_control" in b]
    for i, message in enumerate(sent["messages"]):
        found += [
            ("messages", i, j) for j, b in enumerate(message["content"]) if "cache_control" in b
        ]
    return found


def test_breakpoints_at_the_system_end_the_moving_end_and_the_previous_requests_end() -> None:
    history = [Message.user("Fix the bug."), *turn(1, calls=25), *turn(2, calls=3)]
    sent = body(history)
    assert sent["system"] == [
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
    ]
    # The previous request ended with turn 1's results (25 blocks: past the API's lookback).
    assert marks(sent) == [("system", 0, -1), ("messages", 2, 24), ("messages", 4, 2)]
    assert "cache_control" not in json.dumps(sent["tools"])


def test_without_a_system_prompt_the_last_tool_is_the_first_breakpoint() -> None:
    sent = body([Message.user("Hi.")], system="")
    assert "system" not in sent
    assert marks(sent) == [("tools", 1, -1), ("messages", 0, 0)]


def test_the_hour_cache_is_asked_for_with_its_ttl() -> None:
    sent = body([Message.user("Hi."), *turn(1)], ttl="1h")
    hour = {"type": "ephemeral", "ttl": "1h"}
    assert sent["system"][0]["cache_control"] == hour
    assert sent["messages"][0]["content"][0]["cache_control"] == hour
    assert sent["messages"][2]["content"][0]["cache_control"] == hour


def test_no_ttl_sends_the_request_as_before_and_marking_leaves_the_messages_alone() -> None:
    history = [Message.user("Hi."), *turn(1)]
    plain = body(history, ttl=None)
    assert plain["system"] == "Be brief."
    assert "cache_control" not in json.dumps(plain)
    assert plain["messages"] == [m.wire() for m in history]
    body(history)  # marked...
    assert "cache_control" not in json.dumps([m.wire() for m in history])  # ...on copies


def test_thinking_and_empty_text_blocks_are_never_marked() -> None:
    history = [
        Message.user("Hi."),
        Message(role="assistant", content=[ThinkingBlock(thinking="hm", signature="s")]),
        Message(role="user", content=[TextBlock(text="more"), TextBlock(text="")]),
    ]
    assert marks(body(history)) == [("system", 0, -1), ("messages", 0, 0), ("messages", 2, 0)]


def test_ttl_settings_pick_the_main_threads_or_the_agents(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DISABLE_PROMPT_CACHING", raising=False)
    settings = {"subagentPromptCacheTtl": "1h"}
    assert prompt_cache_ttl({}, subagent=False) == "5m"
    assert prompt_cache_ttl(settings, subagent=False) == "5m"
    assert prompt_cache_ttl(settings, subagent=True) == "1h"
    assert prompt_cache_ttl({"promptCacheTtl": "1h"}, subagent=False) == "1h"
    monkeypatch.setenv("DISABLE_PROMPT_CACHING", "1")
    assert prompt_cache_ttl(settings, subagent=True) is None
    monkeypatch.setenv("DISABLE_PROMPT_CACHING", "0")
    assert prompt_cache_ttl(settings, subagent=True) == "1h"


@pytest.mark.parametrize("key", ["promptCacheTtl", "subagentPromptCacheTtl"])
async def test_a_bad_ttl_setting_stops_the_session_naming_it(tmp_path: Path, key: str) -> None:
    with pytest.raises(UsageError, match=f'the setting {key} must be "5m" or "1h", got 300'):
        async with harness(tmp_path, ScriptedModel([]), settings=json.dumps({key: 300})):
            pass


async def test_the_main_threads_requests_carry_its_ttl_and_an_agents_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DISABLE_PROMPT_CACHING", raising=False)
    seen: dict[str | None, Any] = {}

    def answer(request: ModelRequest) -> Turn:
        seen[request.agent_id] = request.cache_ttl
        if request.agent_id is None and len(request.messages) == 1:
            return Turn(tool_calls=[ToolCall("Agent", {"description": "d", "prompt": "p"})])
        return Turn(text="done")

    settings = json.dumps({"promptCacheTtl": "1h"})
    async with harness(tmp_path, FunctionModel(answer), settings=settings) as h:
        [e async for e in h.run("go")]
    agents = [ttl for agent, ttl in seen.items() if agent is not None]
    assert (seen[None], agents) == ("1h", ["5m"])


def test_hour_cache_writes_cost_twice_the_input_and_five_minute_ones_a_quarter_more() -> None:
    from taskloom.messages import Usage
    from taskloom.models.pricing import list_price, price_for

    price = list_price("claude-sonnet-4-5")
    assert price is not None
    split = {"ephemeral_5m_input_tokens": 400_000, "ephemeral_1h_input_tokens": 600_000}
    usage = Usage.from_dict({"cache_creation_input_tokens": 1_000_000, "cache_creation": split})
    assert price.cost(usage) == pytest.approx(0.4 * 3.75 + 0.6 * 6.0)
    # Not split (a proxy, or a sum): all five-minute writes.
    assert price.cost(Usage(cache_creation_input_tokens=1_000_000)) == pytest.approx(3.75)
    mine = price_for("my-model", {"my-model": {"input": 1.0, "cacheWrite1h": 3.0}})
    assert mine is not None and mine.cost(usage) == pytest.approx(0.4 * 1.25 + 0.6 * 3.0)


async def test_the_usage_of_a_streamed_answer_keeps_its_cache_split() -> None:
    from fake_servers import FakeAnthropicServer, Turn
    from taskloom.models.base import MessageComplete

    split = {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 30}
    with FakeAnthropicServer() as server:
        server.add(Turn(text="ok", cache_creation_input_tokens=30, cache_creation=split))
        model = AnthropicModel("claude-x", api_key="k", base_url=server.url)
        request = ModelRequest("claude-x", "s", [Message.user("hi")], cache_ttl="1h")
        async with model.stream(request) as events:
            done = [e async for e in events if isinstance(e, MessageComplete)]
        await model.aclose()
    usage = done[0].message.usage
    assert usage is not None and usage.cache_creation_input_tokens == 30
    assert usage.hour_cache_writes == 30
    assert usage.dump()["cache_creation"] == split


def test_the_environment_date_stays_the_sessions_after_midnight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import date

    from taskloom import prompts

    before = prompts.environment(tmp_path)

    class Tomorrow(date):
        @classmethod
        def today(cls) -> Tomorrow:
            return cls(2999, 1, 1)

    monkeypatch.setattr(prompts, "date", Tomorrow)
    assert prompts.environment(tmp_path) == before  # an agent started now: the same bytes
    assert "2999" not in before


async def test_openai_compatible_requests_keep_a_growing_stable_prefix_and_count_cached_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fake_servers import FakeOpenAIServer
    from taskloom.models.openai import OpenAIModel

    monkeypatch.delenv("DISABLE_PROMPT_CACHING", raising=False)
    script = [
        {"tool_calls": [("Bash", {"command": "sleep 0.2; echo bg", "run_in_background": True})]},
        {"tool_calls": [("Bash", {"command": "echo one"})]},
        {"tool_calls": [("Read", {"file_path": str(tmp_path / "f.txt")})]},
    ]
    (tmp_path / "f.txt").write_text("hello\n")

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        step = sum(1 for m in body["messages"] if m["role"] == "assistant")
        reply = script[step] if step < len(script) else {"text": "done"}
        return {**reply, "input_tokens": 100, "cache_read_input_tokens": 700}

    with FakeOpenAIServer(responder=respond) as server:
        model = OpenAIModel("gpt-x", api_key="k", base_url=server.url)
        async with harness(tmp_path, model) as h:
            [e async for e in h.run("go")]
            answers = [m for m in h.session.engine.messages if m.role == "assistant"]
        await model.aclose()
    bodies = [r.body for r in server.requests]
    assert len(bodies) >= 4
    assert "cache_control" not in json.dumps(bodies)  # its cache is automatic
    # The same tools and system message, and each request goes on from the one before.
    assert len({json.dumps([b["tools"], b["messages"][0]]) for b in bodies}) == 1
    for before, after in itertools.pairwise(bodies):
        assert after["messages"][: len(before["messages"])] == before["messages"]
    usage = answers[0].usage
    assert usage is not None
    assert (usage.input_tokens, usage.cache_read_input_tokens) == (100, 700)


def test_an_other_process_report_prices_its_hour_writes_as_the_process_did() -> None:
    from taskloom.messages import Usage
    from taskloom.models.pricing import pricer
    from taskloom.tasks.usage import UsageLedger, report_fields, report_in

    split = {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 800_000}
    response = Usage.from_dict(
        {"input_tokens": 10, "cache_creation_input_tokens": 1_000_000, "cache_creation": split}
    )
    pane = UsageLedger(pricer())  # a teammate's process, which made the call
    pane.charge("mate@team", "claude-sonnet-4-5", response)
    record = report_fields(pane.report_of("mate@team"))
    lead = UsageLedger(pricer())  # its lead, charging what the record says
    by_model = report_in(record)
    assert by_model is not None
    lead.report("mate@team", by_model)
    # 0.2M five-minute writes at $3.75, 0.8M one-hour writes at $6, 10 input tokens at $3.
    expected = 0.2 * 3.75 + 0.8 * 6.0 + 10 * 3.0 / 1e6
    assert pane.cost() == pytest.approx(expected)
    assert lead.cost() == pytest.approx(expected)
    assert lead.own("mate@team").cache_creation_input_tokens == 1_000_000


def test_marks_a_program_put_on_its_messages_give_way_to_ours() -> None:
    own = TextBlock.from_dict(
        {"type": "text", "text": "old", "cache_control": {"type": "ephemeral"}}
    )
    history = [
        Message(role="user", content=[own]),
        Message(role="assistant", content=[TextBlock(text="a")]),
        Message.user("b"),
        Message(role="assistant", content=[TextBlock(text="c")]),
        Message.user("d"),
    ]
    sent = body(history)
    assert marks(sent) == [("system", 0, -1), ("messages", 2, 0), ("messages", 4, 0)]
    assert plain_marks(body(history, ttl=None)) == 1  # left alone when not caching


def plain_marks(sent: dict[str, Any]) -> int:
    return json.dumps(sent).count("cache_control")
