"""The cap on each model response: ``--max-output-tokens``, ``CLAUDE_CODE_MAX_OUTPUT_TOKENS``,
the setting ``maxOutputTokens`` (else 16,000: see test_model_openai) — for the main thread and
its agents, on both providers, as the request's ``max_tokens`` a local fake server receives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fake_servers import FakeAnthropicServer, FakeOpenAIServer, FakeServer
from helpers import clean_env, json_lines, run_cli

pytestmark = pytest.mark.e2e

ENV = "CLAUDE_CODE_MAX_OUTPUT_TOKENS"
AGENT_CALL = {"description": "look", "prompt": "Say hi.", "subagent_type": "general-purpose"}


def _session(
    server: FakeServer, cwd: Path, *args: str, **env: str
) -> tuple[list[int], dict[str, object]]:
    """Run a main thread that starts one agent; every request's max_tokens, and the result."""
    if isinstance(server, FakeAnthropicServer):
        env |= {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "test"}
        model = "claude-sonnet-4-5"
    else:
        env |= {"OPENAI_BASE_URL": server.url}
        model = "openai:local"
    server.add_turn(tool_calls=[("Agent", AGENT_CALL)])  # the main thread
    server.add_turn(text="hi")  # its agent
    server.add_turn(text="It said hi.")  # the main thread again
    proc = run_cli(
        "-p", "go", "--output-format", "json", "--model", model,
        "--dangerously-skip-permissions", *args,
        cwd=cwd,
        env=clean_env(**env),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (result,) = json_lines(proc.stdout)
    assert result["result"] == "It said hi.", result
    bodies = [r.body for r in server.requests]
    # The second request is the agent's: its prompt is the task it was given.
    assert [AGENT_CALL["prompt"] in json.dumps(b["messages"]) for b in bodies] == [
        False,
        True,
        True,  # the main thread sees the call's input
    ]
    return [b["max_tokens"] for b in bodies], result


@pytest.fixture(params=["anthropic", "openai"])
def server(request: pytest.FixtureRequest) -> FakeServer:
    return FakeAnthropicServer() if request.param == "anthropic" else FakeOpenAIServer()


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        pytest.param(("--settings", '{"maxOutputTokens": 900}'), {}, 900, id="setting"),
        pytest.param(
            ("--settings", '{"maxOutputTokens": 900}'), {ENV: "700"}, 700, id="env-over-setting"
        ),
        pytest.param(
            ("--max-output-tokens", "500", "--settings", '{"maxOutputTokens": 900}'),
            {ENV: "700"},
            500,
            id="flag-over-env",
        ),
    ],
)
def test_every_request_of_the_session_and_its_agents_follows_the_cap(
    server: FakeServer,
    tmp_path: Path,
    args: tuple[str, ...],
    env: dict[str, str],
    expected: int,
) -> None:
    with server:
        sent, _ = _session(server, tmp_path, *args, **env)
    assert sent == [expected] * 3  # the main thread, its agent, the main thread


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        pytest.param(("--max-output-tokens", "0"), {}, "--max-output-tokens", id="flag-zero"),
        pytest.param(("--max-output-tokens", "many"), {}, "--max-output-tokens", id="flag-text"),
        pytest.param((), {ENV: "16k"}, f"environment variable {ENV}", id="env"),
        pytest.param(
            ("--settings", json.dumps({"maxOutputTokens": -5})),
            {},
            "setting maxOutputTokens",
            id="setting",
        ),
        pytest.param(
            ("--settings", json.dumps({"maxOutputTokens": True})),
            {},
            "setting maxOutputTokens",
            id="setting-bool",
        ),
    ],
)
def test_a_bad_cap_is_a_usage_error_naming_where_it_came_from(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], named: str
) -> None:
    with FakeOpenAIServer() as server:
        proc = run_cli(
            "-p", "go", "--model", "openai:local", *args,
            cwd=tmp_path,
            env=clean_env(OPENAI_BASE_URL=server.url, **env),
        )  # fmt: skip
        assert server.requests == []  # refused before anything ran
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    last = proc.stderr.strip().splitlines()[-1]
    assert named in last and ("whole number" in last or "at least 1" in last), proc.stderr
