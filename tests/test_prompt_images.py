"""Images in a prompt (a user message's own image blocks, not a tool result's): taken from
stream-json input and the Python Agent SDK, sent to both providers in their wire forms
(checked by the fake servers and the providers' SDK types), kept in the transcript."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from fake_servers import FakeAnthropicServer, FakeOpenAIServer, Turn
from helpers import TIME_FACTOR, LazyModule, clean_env
from taskloom.messages import ImageBlock, Message, TextBlock
from taskloom.models.anthropic import AnthropicModel
from taskloom.models.base import ModelRequest
from taskloom.models.openai import NO_PROMPT_IMAGES, OpenAIModel, to_chat_messages
from taskloom.transcript import TranscriptWriter, load_messages
from test_image_blocks import PICTURE_B64, expected_image, png_block, sdk_valid

sdk = LazyModule("claude_agent_sdk")

TIMEOUT = 60 * TIME_FACTOR


def asking() -> Message:
    """A prompt of text, an image, then text again."""
    return Message(
        role="user",
        content=[TextBlock(text="what is"), png_block(), TextBlock(text="in it?")],
    )


def test_stream_json_input_takes_a_prompts_own_images() -> None:
    from taskloom.cli.stream_input import BadLine, user_prompt

    line = {"type": "user", "message": {"role": "user", "content": [expected_image()]}}
    prompt = user_prompt(line)
    assert isinstance(prompt, Message) and isinstance(prompt.content[0], ImageBlock)
    assert prompt.wire()["content"] == [expected_image()]
    for source, said in [
        ({"media_type": "image/bmp", "data": "QQ=="}, r"source\.media_type: must be"),
        ({"media_type": "image/png", "data": ""}, r"source\.data: empty"),
        (
            {"media_type": "image/jpeg", "data": PICTURE_B64},
            r"source\.data: of type image/png, not the image/jpeg it is said to be",
        ),
    ]:
        bad = {"type": "image", "source": {"type": "base64", **source}}
        with pytest.raises(BadLine, match=said):
            user_prompt({"type": "user", "message": {"role": "user", "content": [bad]}})


async def test_anthropic_gets_the_prompts_image_as_it_is() -> None:
    import anthropic.types

    with FakeAnthropicServer() as server:
        server.add_turn(text="A blue rectangle.")
        async with (
            AnthropicModel("m", api_key="k", base_url=server.url) as model,
            model.stream(ModelRequest("m", "", [asking()])) as events,
        ):
            assert [e async for e in events][-1].message.text() == "A blue rectangle."
    sent = server.requests[0].body["messages"]
    assert [b["type"] for b in sent[0]["content"]] == ["text", "image", "text"]
    assert sent[0]["content"][1] == expected_image()
    sdk_valid(anthropic.types.MessageParam, sent)


async def test_openai_gets_the_prompts_image_among_its_text_parts() -> None:
    from openai.types.chat import ChatCompletionMessageParam

    with FakeOpenAIServer() as server:
        server.add_turn(text="A blue rectangle.")
        async with (
            OpenAIModel("m", base_url=server.url) as model,
            model.stream(ModelRequest("m", "", [asking()])) as events,
        ):
            assert [e async for e in events][-1].message.text() == "A blue rectangle."
    (sent,) = server.requests[0].body["messages"]
    assert sent == {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PICTURE_B64}"}},
            {"type": "text", "text": "in it?"},
        ],
    }
    sdk_valid(ChatCompletionMessageParam, [sent])


def test_a_model_without_images_is_told_one_was_attached() -> None:
    (sent,) = to_chat_messages("", [asking()], images_accepted=False)
    assert sent == {"role": "user", "content": f"what is\n\n{NO_PROMPT_IMAGES}\n\nin it?"}


def test_the_transcript_keeps_a_prompts_image(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    writer = TranscriptWriter(path, "s")
    writer.append(asking())
    writer.close()
    (loaded,) = load_messages(path)
    assert loaded.wire() == asking().wire()


@pytest.mark.e2e
async def test_an_sdk_program_sends_an_image_and_the_model_gets_it(tmp_path: Path) -> None:
    """The Python Agent SDK's streaming input, as a program sends a screenshot."""
    taskloom = str(Path(sys.executable).with_name("taskloom"))
    content = [{"type": "text", "text": "what is in it?"}, expected_image()]

    async def prompts() -> Any:
        yield {"type": "user", "message": {"role": "user", "content": content}}

    with FakeAnthropicServer() as server:
        server.add(Turn(text="A blue rectangle."))
        env = clean_env(
            ANTHROPIC_BASE_URL=server.url,
            ANTHROPIC_API_KEY="test",
            TASKLOOM_HOME=str(tmp_path / "home"),
        )
        options = sdk.ClaudeAgentOptions(cli_path=taskloom, cwd=str(tmp_path), env=env)
        said = [m async for m in sdk.query(prompt=prompts(), options=options)]
    result = said[-1]
    assert isinstance(result, sdk.ResultMessage) and result.result == "A blue rectangle."
    sent = server.requests[0].body["messages"][-1]["content"]
    assert [b["type"] for b in sent] == ["text", "image"]
    assert sent[1]["source"] == expected_image()["source"]  # (and the cache breakpoint)


async def test_a_commands_prompt_keeps_its_images_and_compact_refuses_them(
    tmp_path: Path,
) -> None:
    from helpers import harness
    from taskloom.errors import UserError
    from taskloom.testing import ScriptedModel
    from taskloom.testing import Turn as Scripted

    commands = tmp_path / ".claude" / "commands"
    commands.mkdir(parents=True)
    (commands / "look.md").write_text("Look closely at $ARGUMENTS.\n")
    model = ScriptedModel([Scripted(text="A blue rectangle.")])
    with_image = Message(role="user", content=[TextBlock(text="/look this"), png_block()])
    async with harness(tmp_path, model) as h:
        events = [e async for e in h.run(with_image)]
        assert events[-1].reason == "end_turn"
        compact = Message(role="user", content=[TextBlock(text="/compact"), png_block()])
        with pytest.raises(UserError, match="/compact takes no image"):
            _ = [e async for e in h.run(compact)]
    sent = model.requests[0].messages[-1]
    assert "Look closely at this." in sent.text()
    assert [b.type for b in sent.content][-1] == "image"


async def test_a_compaction_that_keeps_no_turn_keeps_the_prompts_image(tmp_path: Path) -> None:
    from helpers import harness
    from taskloom.testing import FunctionModel

    def summarize(request: ModelRequest) -> str:
        return "<summary>1. The user showed a picture.</summary>"

    model = FunctionModel(summarize, name="claude-sonnet-4-5")
    async with harness(tmp_path, model) as h:
        engine = h.session.engine
        # An answer too long for the turns a compaction keeps (a quarter of the window).
        engine.messages = [
            Message.user("start"),
            Message(role="assistant", content=[TextBlock(text="x" * 1_000_000)]),
            asking(),
        ]
        await h.session.compact()
        head = engine.messages[0]
    assert len(engine.messages) == 1  # nothing kept but the summary and the loose prompt
    assert [b.type for b in head.content][-3:] == ["text", "image", "text"]
    assert head.wire()["content"][-2] == expected_image()
