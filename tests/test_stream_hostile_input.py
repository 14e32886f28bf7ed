"""stdin of a stream-json session from a hostile or broken program: no line ends the session.

Each bad line is an error reply (a control request) or one line on stderr naming stdin's line
number, and the prompt after it is answered, with exactly one ``result`` per turn. A
``tool_result`` that answers no pending call is refused before it can poison the conversation.
The whole reader is fuzzed in process (random JSON, random bytes, huge and deep lines).
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import taskloom
from fake_servers import FakeAnthropicServer
from helpers import clean_env
from taskloom.cli.print_mode import PrintOptions
from taskloom.cli.stream_input import MAX_LINE_BYTES
from taskloom.cli.stream_mode import run_stream
from taskloom.errors import UserError
from taskloom.messages import Message, ToolResultBlock
from taskloom.testing import FunctionModel


def user(content: Any) -> str:
    return json.dumps({"type": "user", "message": {"role": "user", "content": content}})


def control(request_id: str, **request: Any) -> str:
    return json.dumps({"type": "control_request", "request_id": request_id, "request": request})


def serve(tmp_path: Path, lines: list[str | bytes], env: dict[str, str], *args: str) -> Any:
    data = b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines)
    argv = [sys.executable, "-m", "taskloom", "--input-format", "stream-json"]
    argv += ["--output-format", "stream-json", "--dangerously-skip-permissions", *args]
    proc = subprocess.run(argv, input=data, capture_output=True, timeout=120, cwd=tmp_path, env=env)
    events = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    return proc, events, proc.stderr.decode()


def scripted(tmp_path: Path, *texts: str) -> tuple[dict[str, str], str]:
    script = tmp_path / "turns.yaml"
    script.write_text(yaml.safe_dump({"turns": [{"text": t} for t in texts]}))
    return clean_env(TASKLOOM_HOME=str(tmp_path / "home")), f"scripted:{script}"


@pytest.mark.e2e
def test_bad_lines_are_reported_by_number_and_the_next_prompt_is_answered(
    tmp_path: Path,
) -> None:
    env, model = scripted(tmp_path, "answered")
    lines: list[str | bytes] = [
        control("init", subtype="initialize"),  # line 1: stdin's numbers count it
        user([{"type": "bogus_block"}]),
        user([{"type": "text"}]),
        "[" * 100_000,
        '{"type": "control_response", "response": ' + "[" * 100_000,
        user("x" * (MAX_LINE_BYTES + 1024)),
        b'{"type": "user", "message": {"content": "\xff\xfe"}}',
        user([{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}]),
        '{"type": "user", "message": {"content": NaN}}',
        "",
        user([{"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": 1}}]),
        '{"type": "user", "message": {"content": [{"type": "text", "text": "x", "n": 1e999}]}}',
        user([{"type": "text", "text": "x", "bogus": 1}]),
        user([{"type": "text", "text": " \n"}]),
        user("hi"),
    ]
    proc, events, err = serve(tmp_path, lines, env, "--model", model)
    assert proc.returncode == 0, err
    reported = {
        int(line.split()[3].rstrip(":")): line
        for line in err.splitlines()
        if line.startswith("Error: stdin line ")
    }
    assert sorted(reported) == [2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14], err
    assert "bogus_block" in reported[2] and "message.content[0].text: Field required" in reported[3]
    assert "nested more than 64 levels" in reported[4] and "nested" in reported[5]
    assert f"over the limit of {MAX_LINE_BYTES:,} bytes" in reported[6]
    assert "not UTF-8" in reported[7] and "not 'tool_use'" in reported[8]
    assert "NaN is not valid JSON" in reported[9]
    assert "message.content[0].cache_control: must be" in reported[11]
    assert "1e999 is out of range" in reported[12]
    assert "a text block takes no field 'bogus'" in reported[13]
    assert "text blocks must hold non-whitespace text" in reported[14]
    assert all(len(line) < 300 for line in reported.values())
    results = [e for e in events if e["type"] == "result"]
    assert [(r["subtype"], r["result"]) for r in results] == [("success", "answered")]


@pytest.mark.e2e
def test_a_control_request_that_cannot_be_read_is_answered_with_an_error(tmp_path: Path) -> None:
    env, model = scripted(tmp_path, "still here")
    deep = '{"type": "control_request", "request_id": "deep", "request": ' + "[" * 5000
    huge = control("huge", subtype="interrupt", pad="x" * (MAX_LINE_BYTES + 10))
    lines: list[str | bytes] = [
        deep,
        huge,
        control("num", subtype="set_model", model=12345),
        control("nomode", subtype="set_permission_mode"),
        json.dumps({"type": "control_request", "request": {"subtype": "interrupt"}}),
        user("hi"),
    ]
    proc, events, err = serve(tmp_path, lines, env, "--model", model)
    assert proc.returncode == 0, err
    errors = {
        e["response"]["request_id"]: e["response"]["error"]
        for e in events
        if e["type"] == "control_response"
    }
    assert set(errors) == {"deep", "huge", "num", "nomode"}
    assert errors["deep"].startswith("stdin line 1 is nested")
    assert "over the limit" in errors["huge"]
    assert errors["num"] == "set_model: model must be a string or null, not int 12345"
    assert errors["nomode"] == "set_permission_mode: mode must be a string, not missing"
    assert "stdin line 5: a control_request needs a request_id (a string or a number)" in err
    init = next(e for e in events if e.get("subtype") == "init")
    assert init["model"] == "scripted:turns.yaml"  # set_model 12345 changed nothing
    results = [e for e in events if e["type"] == "result"]
    assert [(r["subtype"], r["result"]) for r in results] == [("success", "still here")]


@pytest.mark.e2e
def test_an_orphan_tool_result_is_refused_and_the_next_turns_succeed(tmp_path: Path) -> None:
    orphan = [{"type": "tool_result", "tool_use_id": "toolu_nowhere", "content": "hi"}]
    with FakeAnthropicServer() as server:
        # The fake validates as the API does: the orphan would be refused there.
        bad = {
            "model": "m",
            "max_tokens": 5,
            "stream": True,
            "messages": [{"role": "user", "content": orphan}],
        }
        refused = httpx.post(f"{server.url}/v1/messages", json=bad, timeout=10)
        assert refused.status_code == 400 and "unexpected `tool_use_id`" in refused.text
        server.add_turn(text="first")
        server.add_turn(text="second")
        env = clean_env(
            TASKLOOM_HOME=str(tmp_path / "home"),
            ANTHROPIC_API_KEY="test-key",
            ANTHROPIC_BASE_URL=server.url,
        )
        lines: list[str | bytes] = [user(orphan), user("one"), user(orphan), user("two")]
        proc, events, err = serve(tmp_path, lines, env)
    assert proc.returncode == 0, err
    assert err.count("toolu_nowhere answers no pending tool_use") == 2
    assert "stdin line 1:" in err and "stdin line 3:" in err
    results = [e for e in events if e["type"] == "result"]
    assert [(r["subtype"], r["result"]) for r in results] == [
        ("success", "first"),
        ("success", "second"),
    ]
    assert len(server.requests) == 3  # the probe, and one request per turn


async def test_the_engine_refuses_an_orphan_result_before_it_joins_the_conversation(
    tmp_path: Path,
) -> None:
    model = FunctionModel(lambda request: "fine")
    async with taskloom.Harness(model=model, cwd=tmp_path, skip_permissions=True) as h:
        orphan = Message(role="user", content=[ToolResultBlock(tool_use_id="toolu_x", content="x")])
        with pytest.raises(UserError, match="toolu_x answers no pending tool_use"):
            async for _ in h.run(orphan):
                pass
        events = [e async for e in h.run("go on")]
    assert isinstance(events[-1], taskloom.Finished) and events[-1].result == "fine"
    assert len(model.requests) == 1
    assert all(
        b.get("type") != "tool_result"
        for m in model.requests[0].messages
        for b in m.wire()["content"]
    )


# -- the fuzzer -------------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_subtypes = st.sampled_from(
    ["initialize", "interrupt", "set_permission_mode", "mcp_status", "stop_task", "bogus"]
)


@st.composite
def _protocol(draw: st.DrawFn) -> bytes:
    """A line shaped like the protocol, with random values where its fields go."""
    kind = draw(st.sampled_from(["user", "control_request", "control_response", "other"]))
    if kind == "user":
        value: Any = {"type": "user", "message": {"role": "user", "content": draw(_json)}}
    elif kind == "control_request":
        request = {"subtype": draw(_subtypes)} | draw(st.dictionaries(st.text(max_size=8), _json))
        value = {"type": "control_request", "request_id": draw(_json), "request": request}
    elif kind == "control_response":
        value = {"type": "control_response", "response": draw(_json)}
    else:
        value = {"type": draw(_json), **draw(st.dictionaries(st.text(max_size=8), _json))}
    return json.dumps(value).encode()


_extreme = st.sampled_from(
    [
        b"[" * 100_000,
        b"{" * 60_000,
        b'{"type": "user", "message": {"content": ' + b"[" * 100_000,
        b'{"type": "control_request", "request_id": "x", "request": ' + b"[" * 2_000,
        b'{"type": "user", "message": {"content": "' + b"y" * (MAX_LINE_BYTES + 5) + b'"}}',
        b'{"type": "user", "message": {"content": [{"type": "text", "text": "\\ud800"}]}}',
        b'{"type": "user", "message": {"content": [{"type": "image"}]}}',
        b'{"type": "user", "message": {"content": [{"type": "text", "text": "a", "x": -1e999}]}}',
        b'{"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t",'
        b' "content": [{"type": "text", "text": "a", "cache_control": {"ttl": 2e400}}]}]}}',
        b"\x00\xff\xfe\n\r\x1b[2J",
    ]
)
_line = (
    _json.map(lambda v: json.dumps(v).encode()) | st.binary(max_size=200) | _protocol() | _extreme
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(lines=st.lists(_line, min_size=1, max_size=5))
# Found by this test: an initialize first, with no request_id, ended the session.
@example(lines=[b'{"type": "control_request", "request": {"subtype": "initialize"}}'])
def test_no_line_keeps_the_session_from_answering_the_next_prompt(
    lines: list[bytes], tmp_path: Path
) -> None:
    data = b"".join(line + b"\n" for line in lines) + user("ping").encode() + b"\n"

    def answer(request: Any) -> str:
        # As a provider would: a line taken must leave every request sendable as strict JSON.
        json.dumps([m.wire() for m in request.messages], allow_nan=False)
        return "pong"

    model = FunctionModel(answer)
    options = taskloom.Options(model=model, cwd=tmp_path, skip_permissions=True)
    out = io.StringIO()
    opts = PrintOptions(None, options, output_format="stream-json")
    asyncio.run(asyncio.wait_for(run_stream(opts, io.BytesIO(data), out), 60))
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    results = [e for e in events if e["type"] == "result"]
    assert results, out.getvalue()[-2000:]
    assert (results[-1]["subtype"], results[-1]["result"]) == ("success", "pong")
    assert events[-1] is results[-1] or events[-1]["type"] == "control_response"
