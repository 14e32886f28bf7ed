"""An image Read returns reaches the model through the real engine and provider adapters, and
survives the transcript: resumed, the session sends it again as it was."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from fake_cache import without_breakpoints
from fake_servers import FakeAnthropicServer, FakeOpenAIServer
from helpers import clean_env, json_lines, run_cli
from read_files import png
from taskloom.engine import Engine, EngineConfig, Finished
from taskloom.models.anthropic import AnthropicModel
from taskloom.models.openai import OpenAIModel
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tools.read import Read

PICTURE = png(32, 24, (0, 128, 255))
PICTURE_B64 = base64.b64encode(PICTURE).decode()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("TASKLOOM_OPENAI_IMAGES", raising=False)


async def run_engine(model: Any, cwd: Path, prompt: str = "what is in shot.png?") -> list[Any]:
    async with TaskRuntime() as rt:
        config = EngineConfig(
            model=model, system_prompt="test", tools=[Read()], owner=rt.session_id, cwd=cwd
        )
        return [event async for event in Engine(config, rt).run(prompt)]


def expected_image() -> dict[str, Any]:
    source = {"type": "base64", "media_type": "image/png", "data": PICTURE_B64}
    return {"type": "image", "source": source}


async def test_a_png_reaches_the_anthropic_api_as_an_image_block(tmp_path: Path) -> None:
    (tmp_path / "shot.png").write_bytes(PICTURE)
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("Read", {"file_path": "shot.png"})])
        server.add_turn(text="A blue rectangle.")
        async with AnthropicModel("claude-test", api_key="k", base_url=server.url) as model:
            events = await run_engine(model, tmp_path)
    assert isinstance(events[-1], Finished) and events[-1].result == "A blue rectangle."
    assert len(server.requests) == 2  # the fake refuses images the API would refuse
    messages = server.requests[1].body["messages"]
    result = messages[-1]["content"][0]
    assert result["type"] == "tool_result" and result["is_error"] is False
    text, image = result["content"]
    said = f"Image 32x24 png, {len(PICTURE)} bytes: {tmp_path}/shot.png"
    assert text == {"type": "text", "text": said}
    assert image == expected_image()


async def test_a_png_reaches_the_openai_api_as_an_image_part(tmp_path: Path) -> None:
    (tmp_path / "shot.png").write_bytes(PICTURE)
    with FakeOpenAIServer() as server:
        server.add_turn(tool_calls=[("Read", {"file_path": "shot.png"})])
        server.add_turn(text="A blue rectangle.")
        async with OpenAIModel("gpt-test", api_key="k", base_url=server.url) as model:
            events = await run_engine(model, tmp_path)
    assert isinstance(events[-1], Finished) and events[-1].result == "A blue rectangle."
    assert len(server.requests) == 2
    messages = server.requests[1].body["messages"]
    call_id = messages[2]["tool_calls"][0]["id"]
    tool, user = messages[3], messages[4]
    assert tool["role"] == "tool" and tool["tool_call_id"] == call_id
    said = f"Image 32x24 png, {len(PICTURE)} bytes: {tmp_path}/shot.png"
    assert tool["content"] == f"{said}\n(The image is in the next message.)"
    assert user == {
        "role": "user",
        "content": [
            {"type": "text", "text": f"The image from tool call {call_id}:"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PICTURE_B64}"}},
        ],
    }
    assert len(messages) == 5


@pytest.mark.e2e
def test_a_session_resumed_sends_the_image_again_and_stream_json_shows_it(
    tmp_path: Path,
) -> None:
    """Through the CLI: the transcript keeps the image, and resume sends it as it was."""
    (tmp_path / "shot.png").write_bytes(PICTURE)
    home = tmp_path / "home"
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("Read", {"file_path": "shot.png"})])
        server.add_turn(text="A blue rectangle.")
        server.add_turn(text="Still blue.")
        env = clean_env(
            ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="k", TASKLOOM_HOME=str(home)
        )
        common = ("--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions")
        first = run_cli("-p", "look at shot.png", *common, cwd=tmp_path, env=env)
        assert first.returncode == 0, first.stderr
        events = json_lines(first.stdout)
        session = events[-1]["session_id"]
        second = run_cli("-p", "and now?", "--resume", session, *common, cwd=tmp_path, env=env)
        assert second.returncode == 0, second.stderr
    shown = [
        block
        for event in events
        if event["type"] == "user"
        for block in event["message"]["content"]
        if block.get("type") == "tool_result"
    ]
    assert [part["type"] for part in shown[0]["content"]] == ["text", "image"]
    assert shown[0]["content"][1] == expected_image()
    before, resumed = server.requests[1].body, server.requests[2].body
    # The same conversation, but for the cache breakpoints, which move to the new end.
    n = len(before["messages"])
    assert without_breakpoints(resumed["messages"][:n]) == without_breakpoints(before["messages"])
    assert resumed["messages"][2]["content"][0]["content"][1] == expected_image()


async def test_a_post_tool_use_hooks_context_keeps_the_image(tmp_path: Path) -> None:
    # The hook's feedback is added to the result's text; the image goes to the model all the same.
    import json

    from helpers import harness
    from taskloom.messages import ToolResultBlock
    from taskloom.testing import FunctionModel, ToolCall, Turn

    (tmp_path / "shot.png").write_bytes(PICTURE)
    said = {"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "noted"}}
    record = {"hooks": [{"type": "command", "command": f"echo '{json.dumps(said)}'"}]}
    settings = json.dumps({"hooks": {"PostToolUse": [record]}})
    seen: list[ToolResultBlock] = []

    def respond(request: Any) -> Any:
        if len(request.messages) == 1:
            return Turn(tool_calls=(ToolCall("Read", {"file_path": "shot.png"}),))
        seen.extend(b for b in request.messages[-1].content if isinstance(b, ToolResultBlock))
        return "blue"

    async with harness(tmp_path, FunctionModel(respond), settings=settings) as h:
        [e async for e in h.run("look")]
    (result,) = seen
    assert isinstance(result.content, list)
    assert "<hook-feedback>noted</hook-feedback>" in result.content[0].text  # type: ignore[union-attr]
    assert result.content[1].dump() == expected_image()
