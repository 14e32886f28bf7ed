"""Streams that stall or drop: bounded by the idle timeout, retried while nothing was delivered,
and reported with what happened (type, OS error, URL, the timeout in seconds)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fake_servers import FakeAnthropicServer, FakeOpenAIServer, FakeServer, Turn
from helpers import TIME_FACTOR, clean_env
from taskloom.errors import ModelError, UsageError
from taskloom.messages import Message
from taskloom.models._http import (
    DEFAULT_IDLE_TIMEOUT,
    IDLE_TIMEOUT_ENV,
    IDLE_TIMEOUT_SETTING,
    describe,
    idle_timeout,
)
from taskloom.models.anthropic import AnthropicModel
from taskloom.models.base import MessageComplete, ModelRequest, StreamEvent, TextDelta
from taskloom.models.openai import OpenAIModel
from taskloom.models.resolve import resolve_model

#: Events of each fake stream up to and including the first text delta.
FIRST_DELTA = {"anthropic": 4, "openai": 2}


@pytest.fixture(autouse=True)
def _no_idle_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(IDLE_TIMEOUT_ENV, raising=False)


@pytest.fixture(params=["anthropic", "openai"])
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server(provider: str) -> Iterator[FakeServer]:
    fake: FakeServer = FakeAnthropicServer() if provider == "anthropic" else FakeOpenAIServer()
    with fake:
        yield fake


def run(
    server: FakeServer, cwd: Path, *args: str, **env: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], float]:
    if isinstance(server, FakeAnthropicServer):
        env |= {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "test"}
    else:
        env |= {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "test"}
    argv = [sys.executable, "-m", "taskloom", "-p", "go", "--output-format", "stream-json"]
    started = time.monotonic()
    proc = subprocess.run(
        [*argv, *args], capture_output=True, text=True, timeout=60, cwd=cwd, env=clean_env(**env)
    )
    elapsed = time.monotonic() - started
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert lines and lines[-1]["type"] == "result", (proc.stdout, proc.stderr)
    return proc, lines[-1], elapsed


def api_url(server: FakeServer) -> str:
    return server.url + server.api_path.removeprefix(server.url_suffix)


def model_for(server: FakeServer, **kw: Any) -> AnthropicModel | OpenAIModel:
    kw = {"api_key": "k", "base_url": server.url, "retry_base_delay": 0.05, **kw}
    if isinstance(server, FakeAnthropicServer):
        return AnthropicModel("m", **kw)
    return OpenAIModel("m", **kw)


async def collect(model: AnthropicModel | OpenAIModel, *, deltas: bool = True) -> list[StreamEvent]:
    request = ModelRequest("m", "", [Message.user("hi")], deltas=deltas)
    seen: list[StreamEvent] = []
    async with model.stream(request) as events:
        async for event in events:
            seen.append(event)
    return seen


# -- end to end --------------------------------------------------------------------------------


@pytest.mark.e2e
def test_a_stream_stalled_mid_answer_is_retried(
    server: FakeServer, provider: str, tmp_path: Path
) -> None:
    server.add_turn(text="half an answer that stops", stall_at=FIRST_DELTA[provider] + 1)
    server.add_turn(text="recovered")
    # The setting for one provider, the environment for the other: both reach the model.
    if provider == "anthropic":
        proc, result, _ = run(server, tmp_path, **{IDLE_TIMEOUT_ENV: "1"})
    else:
        proc, result, _ = run(server, tmp_path, "--settings", '{"streamIdleTimeout": 1}')
    assert proc.returncode == 0, proc.stderr
    assert (result["subtype"], result["result"]) == ("success", "recovered")
    assert len(server.requests) == 2


@pytest.mark.e2e
@pytest.mark.parametrize("where", ["mid_stream", "before_headers"])
def test_a_stream_that_always_stalls_fails_clearly_and_soon(
    server: FakeServer, provider: str, where: str, tmp_path: Path
) -> None:
    stall = FIRST_DELTA[provider] if where == "mid_stream" else 0
    server.responder = lambda body: Turn(text="never finished", stall_at=stall)
    proc, result, _ = run(server, tmp_path, **{IDLE_TIMEOUT_ENV: "1"})
    (message,) = result["errors"]
    # From the first request to the end of the run (the interpreter's start-up, which a
    # loaded machine stretches, is not part of what the stall costs).
    assert time.monotonic() - server.requests[0].received < 5 * TIME_FACTOR, message
    assert proc.returncode == 1 and result["subtype"] == "error_during_execution"
    assert f"no data from {api_url(server)} for 1 s" in message, message
    assert IDLE_TIMEOUT_ENV in message and "Internal error" not in message
    assert 2 <= len(server.requests) <= 3  # retried, within a window of three timeouts


@pytest.mark.e2e
def test_a_connection_reset_says_what_happened(
    server: FakeServer, provider: str, tmp_path: Path
) -> None:
    server.responder = lambda body: Turn(text="one two three", reset_at=FIRST_DELTA[provider])
    proc, result, elapsed = run(server, tmp_path, **{IDLE_TIMEOUT_ENV: "1"})
    assert proc.returncode == 1 and elapsed < 10 * TIME_FACTOR
    (message,) = result["errors"]
    assert f"request to {api_url(server)} failed: ReadError: " in message, message
    assert "Connection reset by peer" in message
    assert len(server.requests) >= 2  # nothing had reached the session: retried


@pytest.mark.e2e
def test_a_bad_idle_timeout_is_a_clear_error(server: FakeServer, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "taskloom", "-p", "go"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=clean_env(
            ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="t", **{IDLE_TIMEOUT_ENV: "soon"}
        ),
    )
    assert proc.returncode == 2  # a bad setting: nothing was run
    assert IDLE_TIMEOUT_ENV in proc.stderr and "'soon'" in proc.stderr
    assert "Traceback" not in proc.stderr and not server.requests


# -- the transport -------------------------------------------------------------------------------


async def test_without_deltas_a_stall_after_content_is_retried(
    server: FakeServer, provider: str
) -> None:
    server.add_turn(text="one two three four", stall_at=FIRST_DELTA[provider] + 1)
    server.add_turn(text="whole")
    async with model_for(server, idle_timeout=1.0) as model:
        events = await collect(model, deltas=False)
    assert len(events) == 1 and isinstance(events[0], MessageComplete)
    assert events[0].message.text() == "whole"
    assert len(server.requests) == 2


async def test_a_long_answer_that_breaks_is_retried_however_long_it_ran(
    server: FakeServer, provider: str
) -> None:
    # The retry window (three idle timeouts: 1.2 s) counts the time lost, not the time taken:
    # this answer streams for about 1.6 s before the connection breaks, losing almost none.
    words = " ".join(f"w{i}" for i in range(16))
    server.add_turn(text=words, delay=0.2, reset_at=FIRST_DELTA[provider] + 8)
    server.add_turn(text="whole")
    async with model_for(server, idle_timeout=0.4) as model:
        events = await collect(model, deltas=False)
    assert events[-1].message.text() == "whole"  # type: ignore[union-attr]
    assert len(server.requests) == 2


async def test_with_deltas_a_stall_after_content_fails_without_retry(
    server: FakeServer, provider: str
) -> None:
    server.add_turn(text="one two three four", stall_at=FIRST_DELTA[provider] + 1)
    server.add_turn(text="must not be fetched")
    async with model_for(server, idle_timeout=0.5) as model:
        with pytest.raises(ModelError) as info:
            await collect(model)
    assert f"no data from {api_url(server)} for 0.5 s" in str(info.value)
    assert len(server.requests) == 1 and server.pending == 1


async def test_with_deltas_a_reset_after_the_first_delta_names_the_os_error(
    server: FakeServer, provider: str
) -> None:
    server.add_turn(text="one two three", reset_at=FIRST_DELTA[provider])
    got: list[StreamEvent] = []
    async with model_for(server) as model:
        with pytest.raises(ModelError) as info:
            request = ModelRequest("m", "", [Message.user("hi")])
            async with model.stream(request) as events:
                async for event in events:
                    got.append(event)
    assert [type(e) for e in got] == [TextDelta]
    assert "ReadError: [Errno 104] Connection reset by peer" in str(info.value)
    assert api_url(server) in str(info.value) and len(server.requests) == 1


async def test_a_stall_before_the_headers_is_bounded_by_the_idle_timeout(
    server: FakeServer,
) -> None:
    server.responder = lambda body: Turn(text="x", stall_at=0)
    started = time.monotonic()
    async with model_for(server, idle_timeout=0.4, max_retries=10) as model:
        with pytest.raises(ModelError) as info:
            await collect(model, deltas=False)
    # No retry starts after three timeouts: not 11 timeouts for 11 tries.
    assert time.monotonic() - started < min(2.5 * TIME_FACTOR, 11 * 0.4)
    assert "gave up after" in str(info.value) and "for 0.4 s" in str(info.value)


# -- configuration -------------------------------------------------------------------------------


def test_idle_timeout_precedence_and_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    assert idle_timeout() == idle_timeout({}) == DEFAULT_IDLE_TIMEOUT == 90
    assert idle_timeout({IDLE_TIMEOUT_SETTING: 12}) == 12
    monkeypatch.setenv(IDLE_TIMEOUT_ENV, "2.5")
    assert idle_timeout({IDLE_TIMEOUT_SETTING: 12}) == 2.5  # the environment wins
    for bad in ("0", "-1", "nan", "inf", "soon"):
        monkeypatch.setenv(IDLE_TIMEOUT_ENV, bad)
        with pytest.raises(UsageError, match=IDLE_TIMEOUT_ENV):
            idle_timeout()
    monkeypatch.delenv(IDLE_TIMEOUT_ENV)
    for value in ("ten", True, 0, [1]):
        with pytest.raises(UsageError, match=IDLE_TIMEOUT_SETTING):
            idle_timeout({IDLE_TIMEOUT_SETTING: value})


def test_resolved_models_get_the_idle_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    model = resolve_model("claude-x", {IDLE_TIMEOUT_SETTING: 7})
    assert isinstance(model, AnthropicModel) and model.idle_timeout == 7
    monkeypatch.setenv(IDLE_TIMEOUT_ENV, "3")
    model = resolve_model("openai:m", {IDLE_TIMEOUT_SETTING: 7})
    assert isinstance(model, OpenAIModel) and model.idle_timeout == 3


def test_describe_never_leaves_the_detail_empty() -> None:
    import httpx

    try:
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except OSError as inner:
            raise httpx.ReadError("") from inner
    except httpx.ReadError as exc:
        assert describe(exc) == "ReadError: [Errno 104] Connection reset by peer"
    assert describe(httpx.ReadError("")) == "ReadError: connection lost, no reason given"
    try:
        try:
            raise KeyError
        except KeyError as inner:
            raise httpx.RemoteProtocolError("") from inner
    except httpx.RemoteProtocolError as exc:
        assert describe(exc) == "RemoteProtocolError: connection lost (KeyError)"
