"""What stream-json shows besides the main thread's messages, and what results report.

Subagents' messages under their Agent call's id, the model's streaming events, hook runs,
replayed user messages, and the figures of a result (stop reason, usage, modelUsage, cost).
Every line printed is also read with the real SDK's parser, so none would break a program.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from fake_servers import FakeAnthropicServer, ToolCall
from helpers import LazyModule, clean_env, scripted_argv
from taskloom.messages import Usage
from taskloom.models.pricing import list_price, price_for, pricer
from taskloom.tasks.usage import UsageLedger

sdk = LazyModule("claude_agent_sdk")


def parse_message(data: dict[str, Any]) -> Any:
    """The SDK's own reading of one stream-json line."""
    return LazyModule("claude_agent_sdk._internal.message_parser").parse_message(data)


TASKLOOM = str(Path(sys.executable).with_name("taskloom"))
SUBAGENT = "You are a subagent"


def _events(stdout: str) -> list[dict[str, Any]]:
    events = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    for event in events:
        parse_message(event)  # the SDK reads every line without error
    return events


def _run(
    cwd: Path, argv: list[str], *, stdin: str | None = None, **env: str
) -> list[dict[str, Any]]:
    proc = subprocess.run(
        argv,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=clean_env(TASKLOOM_HOME=str(cwd / "home"), **env),
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return _events(proc.stdout)


def _fake_argv(*args: str) -> list[str]:
    return [
        TASKLOOM,
        "-p",
        "go",
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        "claude-sonnet-4-5",
        "--dangerously-skip-permissions",
        *args,
    ]


def _stream_argv(model: str) -> list[str]:
    """A session driven over stdin (``--input-format stream-json``) on ``model``."""
    streamed = ["--input-format", "stream-json", "--output-format", "stream-json"]
    return [TASKLOOM, *streamed, "--model", model]


def _agent_call(call_id: str, **fields: str) -> dict[str, Any]:
    """A scripted Agent call (file form) with id ``call_id``."""
    return {"name": "Agent", "id": call_id, "input": {"description": "d", "prompt": "p", **fields}}


def _system(body: dict[str, Any]) -> str:
    system = body.get("system") or ""
    return system if isinstance(system, str) else json.dumps(system)


# -- subagents ----------------------------------------------------------------------------------


@pytest.mark.e2e
async def test_a_background_agents_messages_arrive_with_its_parent_tool_use_id(
    tmp_path: Path,
) -> None:
    main_turns = iter(
        [
            {
                "text": "Starting it.",
                "tool_calls": [
                    ToolCall(
                        "Agent",
                        {
                            "description": "look around",
                            "prompt": "find the file",
                            "subagent_type": "general-purpose",
                            "run_in_background": True,
                        },
                        id="toolu_bg_1",
                    )
                ],
            },
            "Waiting for it.",
            "All done.",
        ]
    )

    def respond(body: dict[str, Any]) -> Any:
        if SUBAGENT in _system(body):
            return {"text": "Found it in src.", "delay": 0.02}
        return next(main_turns)

    with FakeAnthropicServer(respond) as server:
        env = {
            **clean_env(),
            "ANTHROPIC_BASE_URL": server.url,
            "ANTHROPIC_API_KEY": "test",
            "TASKLOOM_HOME": str(tmp_path / "home"),
        }
        opts = sdk.ClaudeAgentOptions(
            cli_path=TASKLOOM,
            cwd=str(tmp_path),
            env=env,
            model="claude-sonnet-4-5",
            permission_mode="bypassPermissions",
        )
        messages = [m async for m in sdk.query(prompt="go", options=opts)]
    assert isinstance(messages[-1], sdk.ResultMessage) and not messages[-1].is_error
    chat = [m for m in messages if isinstance(m, sdk.AssistantMessage | sdk.UserMessage)]
    under = [m for m in chat if m.parent_tool_use_id == "toolu_bg_1"]
    texts = [b.text for m in under if isinstance(m, sdk.AssistantMessage) for b in m.content]
    assert texts == ["Found it in src."]
    prompts = [m for m in under if isinstance(m, sdk.UserMessage)]
    assert prompts and "find the file" in json.dumps(prompts[0].content, default=vars)
    # The main thread's messages keep a null parent; the agent starts after its Agent call.
    main = [m for m in chat if m.parent_tool_use_id is None]
    assert isinstance(main[0], sdk.AssistantMessage) and main[0].content[0].text == "Starting it."
    assert chat.index(main[0]) < chat.index(under[0])
    started = [
        m for m in messages if isinstance(m, sdk.SystemMessage) and m.subtype == "task_started"
    ]
    assert started and messages.index(started[0]) < messages.index(under[0])


@pytest.mark.e2e
def test_a_foreground_agents_messages_are_printed_as_they_happen_then_its_result(
    tmp_path: Path,
) -> None:
    script = {
        "turns": [
            {
                "text": "Delegating.",
                "tool_calls": [_agent_call("toolu_fg_1", prompt="count", subagent_type="Explore")],
            },
            {"text": "It said 3."},
        ],
        "subagents": {
            "Explore": [
                {
                    "text": "Counting.",
                    "tool_calls": [{"name": "Bash", "input": {"command": "true"}}],
                },
                {"text": "3"},
            ]
        },
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(script))
    events = _run(tmp_path, scripted_argv(tmp_path / "s.yaml", "--dangerously-skip-permissions"))
    chat = [e for e in events if e["type"] in ("assistant", "user")]
    shape = [(e["type"], e["parent_tool_use_id"]) for e in chat]
    assert shape == [
        ("assistant", None),  # the Agent call
        ("user", "toolu_fg_1"),  # the agent's prompt
        ("assistant", "toolu_fg_1"),  # its Bash call
        ("user", "toolu_fg_1"),  # the Bash result
        ("assistant", "toolu_fg_1"),  # "3"
        ("user", None),  # the Agent call's result
        ("assistant", None),
    ]
    assert events[-1]["type"] == "result"  # nothing after the result


# -- results ------------------------------------------------------------------------------------


def _sonnet(usage: Usage) -> float:
    return (
        usage.input_tokens * 3
        + usage.output_tokens * 15
        + usage.cache_read_input_tokens * 0.3
        + usage.cache_creation_input_tokens * 3.75
    ) / 1e6


@pytest.mark.e2e
def test_the_result_reports_stop_reason_model_usage_and_the_cost_subagents_included(
    tmp_path: Path,
) -> None:
    main_turns = iter(
        [
            {
                "text": "Asking.",
                "tool_calls": [
                    ToolCall(
                        "Agent",
                        {"description": "d", "prompt": "p", "subagent_type": "general-purpose"},
                    )
                ],
                "usage": {
                    "input_tokens": 1000,
                    "output_tokens": 200,
                    "cache_read_input_tokens": 4000,
                },
            },
            {"text": "Done.", "usage": {"input_tokens": 1500, "output_tokens": 100}},
        ]
    )

    def respond(body: dict[str, Any]) -> Any:
        if SUBAGENT in _system(body):
            return {"text": "sub answer", "usage": {"input_tokens": 300, "output_tokens": 50}}
        return next(main_turns)

    with FakeAnthropicServer(respond) as server:
        events = _run(
            tmp_path, _fake_argv(), ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="test"
        )
    result = events[-1]
    assert result["type"] == "result" and result["subtype"] == "success", result
    assert result["stop_reason"] == "end_turn"
    main = Usage(input_tokens=2500, output_tokens=300, cache_read_input_tokens=4000)
    sub = Usage(input_tokens=300, output_tokens=50)
    # usage: the main loop's; modelUsage and the cost: every call, the subagent's too.
    assert result["usage"] == main.dump()
    entry = result["modelUsage"]["claude-sonnet-4-5"]
    assert (entry["inputTokens"], entry["outputTokens"], entry["cacheReadInputTokens"]) == (
        2800,
        350,
        4000,
    )
    assert entry["cacheCreationInputTokens"] == 0
    assert entry["costUSD"] == pytest.approx(_sonnet(main) + _sonnet(sub))
    assert result["total_cost_usd"] == pytest.approx(_sonnet(main) + _sonnet(sub))
    message = sdk.ResultMessage  # the SDK reads the fields under their names
    parsed = parse_message(result)
    assert isinstance(parsed, message) and parsed.model_usage == result["modelUsage"]
    assert parsed.stop_reason == "end_turn"


@pytest.mark.e2e
def test_model_prices_in_settings_override_the_list(tmp_path: Path) -> None:
    settings = {"modelPrices": {"claude-sonnet": {"input": 1.0, "output": 2.0}}}
    with FakeAnthropicServer() as server:
        server.add_turn(text="hi", input_tokens=1_000_000, output_tokens=500_000)
        events = _run(
            tmp_path,
            _fake_argv("--settings", json.dumps(settings)),
            ANTHROPIC_BASE_URL=server.url,
            ANTHROPIC_API_KEY="test",
        )
    assert events[-1]["total_cost_usd"] == pytest.approx(1.0 + 1.0)


@pytest.mark.e2e
def test_each_turn_of_a_stream_session_reports_its_own_figures_and_the_running_cost(
    tmp_path: Path,
) -> None:
    with FakeAnthropicServer() as server:
        server.add_turn(text="one", input_tokens=100, output_tokens=10)
        server.add_turn(text="two", input_tokens=200, output_tokens=20)
        lines = [
            {"type": "user", "message": {"role": "user", "content": text}}
            for text in ("first", "second")
        ]
        events = _run(
            tmp_path,
            _stream_argv("claude-sonnet-4-5"),
            stdin="".join(json.dumps(line) + "\n" for line in lines),
            ANTHROPIC_BASE_URL=server.url,
            ANTHROPIC_API_KEY="test",
        )
    first, second = [e for e in events if e["type"] == "result"]
    one, two = Usage(input_tokens=100, output_tokens=10), Usage(input_tokens=200, output_tokens=20)
    assert (first["num_turns"], second["num_turns"]) == (1, 1)
    assert second["usage"] == two.dump()
    # The cost and modelUsage are the session's running totals, as Claude Code's are; what a
    # turn added is in model_usage_since_last_result.
    assert first["total_cost_usd"] == pytest.approx(_sonnet(one))
    assert second["total_cost_usd"] == pytest.approx(_sonnet(one) + _sonnet(two))
    assert second["modelUsage"]["claude-sonnet-4-5"]["inputTokens"] == 300
    since = second["model_usage_since_last_result"]["claude-sonnet-4-5"]
    assert (since["inputTokens"], since["costUSD"]) == (200, pytest.approx(_sonnet(two)))


def test_list_prices_by_family_and_version() -> None:
    sonnet, opus_new, opus_old = (
        list_price("claude-sonnet-4-5-20250929"),
        list_price("claude-opus-4-5"),
        list_price("claude-3-opus-20240229"),
    )
    assert sonnet is not None and (sonnet.input, sonnet.output) == (3.0, 15.0)
    assert sonnet.cache_read == pytest.approx(0.3) and sonnet.cache_write == pytest.approx(3.75)
    assert opus_new is not None and (opus_new.input, opus_new.output) == (5.0, 25.0)
    assert opus_old is not None and (opus_old.input, opus_old.output) == (15.0, 75.0)
    haiku = list_price("claude-3-5-haiku-latest")
    assert haiku is not None and haiku.input == 0.8
    assert list_price("gpt-4o") is None and list_price("scripted") is None
    override = price_for("local-model", {"local": {"input": 2, "output": 4, "cacheRead": 1}})
    assert override is not None and (override.cache_read, override.cache_write) == (1.0, 2.5)
    from taskloom.cli.stream_output import model_usage

    ledger = UsageLedger(pricer())
    ledger.report("r1", {"gpt-4o": {"input_tokens": 10**6}})
    assert ledger.cost() == 0 and model_usage(ledger, None)["gpt-4o"]["costUSD"] == 0
    ledger.report("r1", {"claude-sonnet-4-5": {"input_tokens": 10**6}})
    assert model_usage(ledger, None)["claude-sonnet-4-5"]["costUSD"] == pytest.approx(3.0)


# -- partial messages ---------------------------------------------------------------------------


@pytest.mark.e2e
def test_partial_messages_stream_in_order_and_add_up_to_each_assistant_message(
    tmp_path: Path,
) -> None:
    with FakeAnthropicServer() as server:
        server.add_turn(
            text="Let me run it now.",
            thinking="I should check.",
            tool_calls=[("Bash", {"command": "echo partial"})],
        )
        server.add_turn(text="It printed partial.")
        events = _run(
            tmp_path,
            _fake_argv("--include-partial-messages"),
            ANTHROPIC_BASE_URL=server.url,
            ANTHROPIC_API_KEY="test",
        )
    assistants = [e for e in events if e["type"] == "assistant"]
    assert len(assistants) == 2
    pending: list[dict[str, Any]] = []
    for event in events:
        if event["type"] == "stream_event":
            assert event["parent_tool_use_id"] is None
            pending.append(event["event"])
        elif event["type"] == "assistant":
            _check_stream(pending, event["message"])
            pending = []
    assert pending == []  # every stream ended in its message


def _check_stream(stream: list[dict[str, Any]], message: dict[str, Any]) -> None:
    kinds = [e["type"] for e in stream]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("content_block_start") == kinds.count("content_block_stop")
    built: dict[int, dict[str, Any]] = {}
    for event in stream:
        if event["type"] == "content_block_start":
            assert event["index"] not in built
            built[event["index"]] = dict(event["content_block"], parts=[])
        elif event["type"] == "content_block_delta":
            delta = event["delta"]
            built[event["index"]]["parts"].append(
                delta.get("text") or delta.get("thinking") or delta.get("partial_json") or ""
            )
    final = message["content"]
    assert len(built) == len(final)
    for (_, block), want in zip(sorted(built.items()), final, strict=True):
        assert block["type"] == want["type"]
        text = "".join(block["parts"])
        if want["type"] == "text":
            assert text == want["text"]
        elif want["type"] == "thinking":
            assert text == want["thinking"]
        else:
            assert block["id"] == want["id"] and json.loads(text) == want["input"]
    delta = stream[-2]
    assert delta["delta"]["stop_reason"] == message["stop_reason"]
    assert delta["usage"]["output_tokens"] == message["usage"]["output_tokens"]
    assert stream[0]["message"]["model"] == message["model"]


@pytest.mark.e2e
def test_a_subagents_partial_messages_carry_its_parent_tool_use_id(tmp_path: Path) -> None:
    script = {
        "turns": [
            {"tool_calls": [_agent_call("toolu_p_1", subagent_type="Explore")]},
            {"text": "ok"},
        ],
        "subagents": {"Explore": {"text": "from the agent"}},
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(script))
    events = _run(
        tmp_path,
        scripted_argv(
            tmp_path / "s.yaml", "--dangerously-skip-permissions", "--include-partial-messages"
        ),
    )
    streamed = [e for e in events if e["type"] == "stream_event"]
    under = [e for e in streamed if e["parent_tool_use_id"] == "toolu_p_1"]
    deltas = [e["event"]["delta"].get("text", "") for e in under if "delta" in e["event"]]
    assert "".join(deltas) == "from the agent"
    assert len(streamed) > len(under)  # the main thread's, with a null parent
    without = _run(tmp_path, scripted_argv(tmp_path / "s.yaml", "--dangerously-skip-permissions"))
    assert not [e for e in without if e["type"] == "stream_event"]


# -- replayed user messages, hook events -----------------------------------------------------------


@pytest.mark.e2e
def test_replay_user_messages_echoes_each_user_message_read(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump({"turns": ["one", "two"]}))
    lines = [
        {"type": "user", "message": {"role": "user", "content": "first"}, "uuid": "u-1"},
        {
            "type": "user",
            "message": {"role": "user", "content": [{"type": "text", "text": "second"}]},
        },
    ]
    argv = _stream_argv(f"scripted:{script}")
    stdin = "".join(json.dumps(line) + "\n" for line in lines)
    events = _run(tmp_path, [*argv, "--replay-user-messages"], stdin=stdin)
    echoes = [e for e in events if e["type"] == "user" and e.get("isReplay")]
    assert [e["message"] for e in echoes] == [line["message"] for line in lines]
    assert echoes[0]["uuid"] == "u-1" and echoes[1]["uuid"]
    assert echoes[0]["session_id"] == events[-1]["session_id"]
    assert events.index(echoes[0]) < [e["type"] for e in events].index("result")
    assert not [e for e in _run(tmp_path, argv, stdin=stdin) if e.get("isReplay")]


@pytest.mark.e2e
def test_include_hook_events_shows_each_hook_run(tmp_path: Path) -> None:
    hooks = {
        "hooks": {
            "PreToolUse": [
                {"matcher": "Bash", "hooks": [{"type": "command", "command": "echo checked"}]}
            ]
        }
    }
    script = tmp_path / "s.yaml"
    script.write_text(
        yaml.safe_dump(
            {
                "turns": [
                    {"tool_calls": [{"name": "Bash", "input": {"command": "true"}}]},
                    "done",
                ]
            }
        )
    )
    argv = scripted_argv(script, "--dangerously-skip-permissions", "--settings", json.dumps(hooks))
    events = _run(tmp_path, [*argv, "--include-hook-events"])
    started, response = [e for e in events if e.get("subtype", "").startswith("hook_")]
    assert started["subtype"] == "hook_started" and response["subtype"] == "hook_response"
    assert started["hook_id"] == response["hook_id"]
    for event in (started, response):
        assert (event["hook_event"], event["hook_name"]) == ("PreToolUse", "PreToolUse:Bash")
        parsed = parse_message(event)
        assert isinstance(parsed, sdk.HookEventMessage)
        assert parsed.hook_event_name == "PreToolUse"
    assert (response["outcome"], response["exit_code"]) == ("success", 0)
    assert response["stdout"].strip() == "checked"
    # Before the tool's result, after the call.
    kinds = [(e["type"], e.get("subtype")) for e in events]
    assert kinds.index(("assistant", None)) < events.index(started)
    assert events.index(response) < kinds.index(("user", None))
    assert not [e for e in _run(tmp_path, argv) if e.get("subtype", "").startswith("hook_")]


@pytest.mark.e2e
def test_init_carries_the_fields_the_sdk_documents(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump({"turns": ["hi"]}))
    init = _run(tmp_path, scripted_argv(script))[0]
    documented = {
        "type",
        "subtype",
        "uuid",
        "session_id",
        "apiKeySource",
        "claude_code_version",
        "cwd",
        "tools",
        "mcp_servers",
        "model",
        "permissionMode",
        "slash_commands",
        "output_style",
        "skills",
        "plugins",
    }
    assert documented <= set(init), documented - set(init)
    assert (init["skills"], init["plugins"]) == ([], [])


@pytest.mark.e2e
def test_a_forks_messages_carry_the_id_of_the_call_that_forked_it(tmp_path: Path) -> None:
    script = {
        "turns": [
            {"tool_calls": [_agent_call("toolu_fork_1")]},
            {"text": "Waiting."},
            {"text": "Done."},
        ],
        "subagents": {"fork": {"text": "the fork's answer"}},
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(script))
    settings = json.dumps({"forkSubagent": True})
    argv = scripted_argv(
        tmp_path / "s.yaml", "--dangerously-skip-permissions", "--settings", settings
    )
    events = _run(tmp_path, argv)
    under = [e for e in events if e.get("parent_tool_use_id") == "toolu_fork_1"]
    # Its history (the parent's, with the directive) is copied, not sent: only its answer.
    assert [e["type"] for e in under] == ["assistant"]
    assert under[0]["message"]["content"][0]["text"] == "the fork's answer"
    assert events[-1]["type"] == "result"


def test_remote_agents_of_earlier_runs_are_not_counted_again() -> None:
    # Rewritten with the usage ledger: the tap no longer counts reports; their receivers
    # charge the session's ledger, from a baseline of what an earlier run had counted.
    from taskloom.tasks.kinds import kind_of
    from taskloom.tasks.remote import RemoteAgentTaskState
    from taskloom.tasks.teammate import TeammateTaskState

    def spent_elsewhere(state: Any) -> tuple[str, Any] | None:
        spent = kind_of(state).usage_from_elsewhere(state)
        return (spent.agent_id, spent.by_model) if spent is not None else None

    ledger = UsageLedger()
    before = {"m": {"input_tokens": 1000, "output_tokens": 100}}
    earlier = RemoteAgentTaskState(id="r00000001", usage_by_model=before)
    reported = spent_elsewhere(earlier)
    assert reported == ("r00000001", before)
    # A pane teammate's is its process's (by its agent id); an in-process one's is counted here.
    pane = TeammateTaskState(id="t00000001", agent_id="al@t", backend="tmux", usage_by_model=before)
    assert spent_elsewhere(pane) == ("al@t", before)
    assert spent_elsewhere(pane.replace(backend="in-process")) is None
    ledger.baseline(*reported)
    ledger.report("r00000001", before)  # what the earlier run counted already
    assert ledger.models() == {} and ledger.own("r00000001").tokens == 0
    ledger.report("r00000001", {"m": {"input_tokens": 1500, "output_tokens": 150}})
    (grown,) = ledger.models("r00000001").values()
    assert (grown.usage.input_tokens, grown.usage.output_tokens) == (500, 50)  # grew by, here
    ledger.report("r00000002", {"m": {"input_tokens": 7, "output_tokens": 1}})  # a new one
    assert ledger.models()["m"].usage.input_tokens == 507
    # A pane teammate resumed in a new process counts from zero again: all of it is new.
    ledger.report("al@t", before)
    ledger.restart("al@t")
    ledger.report("al@t", {"m": {"input_tokens": 30, "output_tokens": 3}})
    (again,) = ledger.models("al@t").values()
    assert (again.usage.input_tokens, again.usage.output_tokens) == (1030, 103)


def test_an_image_too_big_for_a_line_is_named_not_cut() -> None:
    # A program reading stream-json gets lines of at most 1 MiB; an image whose base64 does not
    # fit is replaced by a note saying what it was (cut base64 would be no image at all).
    from taskloom.cli.print_mode import MAX_LINE_CHARS, _fitted

    data = "A" * 1_200_000
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    result = {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [{"type": "text", "text": "Image 4000x3000 png"}, image],
    }
    event = {"type": "user", "message": {"role": "user", "content": [result]}}
    line = _fitted(event)
    assert len(line) <= MAX_LINE_CHARS
    parts = json.loads(line)["message"]["content"][0]["content"]
    assert parts[0] == {"type": "text", "text": "Image 4000x3000 png"}
    assert parts[1]["type"] == "text" and "image/png, 1,200,000 characters" in parts[1]["text"]
    assert "the model saw it" in parts[1]["text"]
