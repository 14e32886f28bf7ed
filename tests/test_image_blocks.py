"""Tool results with images: canonical blocks, both providers' wire forms (checked by the fake
servers, which refuse what the real APIs refuse, and by the SDKs' own types), transcripts and
stream-json input."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter

from fake_servers import FakeAnthropicServer, FakeOpenAIServer
from read_files import png
from taskloom import messages as canonical
from taskloom.errors import ModelError
from taskloom.messages import (
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from taskloom.models.anthropic import AnthropicModel
from taskloom.models.base import ModelRequest
from taskloom.models.openai import OpenAIModel, to_chat_messages
from taskloom.transcript import TranscriptWriter, load_messages

PICTURE = png(32, 24, (0, 128, 255))
PICTURE_B64 = base64.b64encode(PICTURE).decode()


@pytest.fixture(autouse=True)
def _images_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TASKLOOM_OPENAI_IMAGES", raising=False)


def png_block() -> Any:
    source = canonical.Base64Source(media_type="image/png", data=PICTURE_B64)
    return canonical.ImageBlock(source=source)


def expected_image() -> dict[str, Any]:
    source = {"type": "base64", "media_type": "image/png", "data": PICTURE_B64}
    return {"type": "image", "source": source}


def materialised(value: Any) -> Any:
    """``value`` with pydantic's lazily validated iterables run through (so they validate)."""
    if isinstance(value, dict):
        return {k: materialised(v) for k, v in value.items()}
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return [materialised(v) for v in value]


def sdk_valid(param_type: Any, messages: list[dict[str, Any]]) -> None:
    """Each message is valid as the provider SDK's own request type (TypedDicts) declares."""
    adapter: TypeAdapter[Any] = TypeAdapter(param_type)
    for message in messages:
        materialised(adapter.validate_python(message))


def history(*results: ToolResultBlock, text: str = "") -> list[Message]:
    """A conversation waiting on calls ``a`` and ``b``, answered with ``results``."""
    calls = [ToolUseBlock(id="a", name="Read", input={}), ToolUseBlock(id="b", name="Read")]
    answer: list[Any] = [*results, *([TextBlock(text=text)] if text else [])]
    return [
        Message.user("look"),
        Message(role="assistant", content=calls),
        Message(role="user", content=answer),
    ]


# --- the wire forms ---------------------------------------------------------------------------


async def test_anthropic_gets_the_image_block_in_the_tool_result_as_it_is() -> None:
    import anthropic.types

    image = png_block()
    result = ToolResultBlock(tool_use_id="a", content=[TextBlock(text="shot"), image])
    other = ToolResultBlock(tool_use_id="b", content="plain")
    with FakeAnthropicServer() as server:
        server.add_turn(text="A blue rectangle.")
        request = ModelRequest("m", "", history(result, other))
        async with (
            AnthropicModel("m", api_key="k", base_url=server.url) as model,
            model.stream(request) as events,
        ):
            assert [e async for e in events][-1].message.text() == "A blue rectangle."
    sent = server.requests[0].body["messages"]
    assert sent[2]["content"][0]["content"] == [{"type": "text", "text": "shot"}, expected_image()]
    sdk_valid(anthropic.types.MessageParam, sent)


async def test_openai_gets_the_image_in_a_user_message_after_the_tool_messages() -> None:
    from openai.types.chat import ChatCompletionMessageParam

    result = ToolResultBlock(tool_use_id="a", content=[TextBlock(text="shot"), png_block()])
    other = ToolResultBlock(tool_use_id="b", content="plain")
    with FakeOpenAIServer() as server:
        server.add_turn(text="A blue rectangle.")
        request = ModelRequest("m", "", history(result, other, text="and?"))
        async with (
            OpenAIModel("m", base_url=server.url) as model,
            model.stream(request) as events,
        ):
            assert [e async for e in events][-1].message.text() == "A blue rectangle."
    sent = server.requests[0].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool", "user"]
    assert sent[2]["content"] == "shot\n(The image is in the next message.)"
    assert sent[4]["content"] == [
        {"type": "text", "text": "The image from tool call a:"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PICTURE_B64}"}},
        {"type": "text", "text": "and?"},
    ]
    sdk_valid(ChatCompletionMessageParam, sent)


def test_a_model_without_images_gets_a_note_instead(monkeypatch: pytest.MonkeyPatch) -> None:
    result = ToolResultBlock(tool_use_id="a", content=[TextBlock(text="shot"), png_block()])
    chat = to_chat_messages("", history(result), images_accepted=False)
    assert chat[-1] == {
        "role": "tool",
        "tool_call_id": "a",
        "content": "shot\n(An image was returned, but this model takes no images, so it is "
        "not shown.)",
    }
    monkeypatch.setenv("TASKLOOM_OPENAI_IMAGES", "off")
    assert OpenAIModel("local", base_url="http://127.0.0.1:9").images is False
    monkeypatch.setenv("TASKLOOM_OPENAI_IMAGES", "perhaps")
    from taskloom.errors import UsageError

    with pytest.raises(UsageError, match=r"TASKLOOM_OPENAI_IMAGES must be .*got 'perhaps'"):
        OpenAIModel("local", base_url="http://127.0.0.1:9")


def test_tool_results_images_follow_every_tool_message_before_any_text() -> None:
    image = png_block()
    result = ToolResultBlock(tool_use_id="a", content=[TextBlock(text="one"), image, image])
    other = ToolResultBlock(tool_use_id="b", content="plain")
    chat = to_chat_messages("", history(result, other, text="and this"))
    assert [m["role"] for m in chat] == ["user", "assistant", "tool", "tool", "user"]
    parts = chat[-1]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url", "image_url", "text"]
    assert parts[0]["text"] == "The 2 images from tool call a:"
    assert parts[-1] == {"type": "text", "text": "and this"}


def test_image_blocks_round_trip_through_messages_and_transcripts(tmp_path: Path) -> None:
    image = png_block()
    result = ToolResultBlock(tool_use_id="t1", content=[TextBlock(text="Image 32x24"), image])
    assert result.text() == "Image 32x24" and result.images() == [image]
    message = Message(role="user", content=[result])
    assert message.wire()["content"][0]["content"][1] == expected_image()
    assert Message.from_dict(message.full()) == message
    writer = TranscriptWriter(tmp_path / "t.jsonl", "s1")
    writer.append(Message(role="assistant", content=[ToolUseBlock(id="t1", name="Read")]))
    writer.append(message)
    writer.close()
    loaded = load_messages(tmp_path / "t.jsonl")
    assert loaded[1] == message and isinstance(loaded[1].content[0], ToolResultBlock)
    assert loaded[1].content[0].images() == [image]


# --- stream-json input ------------------------------------------------------------------------


def _line(content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": content}}


def _result(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": "t1", "content": list(parts)}


def _image(**source: Any) -> dict[str, Any]:
    return {"type": "image", "source": source}


def test_stream_json_input_takes_tool_results_with_images() -> None:
    from taskloom.cli.stream_input import user_prompt

    good = _image(type="base64", media_type="image/png", data=PICTURE_B64)
    prompt = user_prompt(_line([_result({"type": "text", "text": "shot"}, good)]))
    assert isinstance(prompt, Message)
    block = prompt.content[0]
    assert isinstance(block, ToolResultBlock) and block.images()[0].dump() == good
    by_url = user_prompt(_line([_result(_image(type="url", url="https://example.com/a.png"))]))
    assert isinstance(by_url, Message)


@pytest.mark.parametrize(
    ("part", "said"),
    [
        (
            _image(type="base64", media_type="image/png", data="not base64!"),
            "message.content[0].content[0].source.data: not valid base64",
        ),
        (
            _image(type="base64", media_type="image/png", data="QQ==", name="x"),
            "message.content[0].content[0].source: a base64 source takes no field 'name'",
        ),
        (
            _image(type="file", file_id="f"),
            'message.content[0].content[0].source: must be {"type": "base64", ...}',
        ),
        (
            _image(type="base64", media_type="image/bmp", data="QQ=="),
            "source.media_type: must be image/png, image/jpeg, image/gif, image/webp, got "
            "'image/bmp'",
        ),
        (
            {"type": "image", "source": {"type": "url", "url": "u"}, "alt": "x"},
            "message.content[0].content[0]: a image block takes no field 'alt'",
        ),
        (
            {"type": "tool_use", "id": "x", "name": "y", "input": {}},
            "blocks are text or image, not 'tool_use'",
        ),
    ],
)
def test_stream_json_input_refuses_images_the_api_would_refuse(
    part: dict[str, Any], said: str
) -> None:
    from taskloom.cli.stream_input import BadLine, user_prompt

    with pytest.raises(BadLine) as caught:
        user_prompt(_line([_result(part)]))
    assert said in str(caught.value), str(caught.value)


def test_stream_json_input_refuses_an_image_over_5mb() -> None:
    from taskloom.cli.stream_input import BadLine, user_prompt

    data = "A" * (5 * 1024 * 1024 + 4)
    with pytest.raises(BadLine, match=r"over the API's limit of 5,242,880 for one image"):
        user_prompt(_line([_result(_image(type="base64", media_type="image/png", data=data))]))


# --- the fake servers refuse what the APIs refuse --------------------------------------------


async def test_the_fake_apis_refuse_images_the_real_ones_refuse() -> None:
    """So the tests above prove something: a wrong image would have been refused."""
    jpeg_named_png = canonical.ImageBlock(
        source=canonical.Base64Source(media_type="image/jpeg", data=PICTURE_B64)  # it is a PNG
    )
    result = ToolResultBlock(tool_use_id="a", content=[jpeg_named_png])
    conversation = history(result, ToolResultBlock(tool_use_id="b", content="plain"))
    with FakeAnthropicServer() as server:
        async with AnthropicModel("m", api_key="k", base_url=server.url) as model:
            with pytest.raises(ModelError, match="specified using the image/jpeg media type"):
                async with model.stream(ModelRequest("m", "", conversation)) as events:
                    [e async for e in events]
    naive = to_chat_messages("", conversation)
    # The image in the tool message itself, as a naive adapter would put it.
    naive[2]["content"] = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,"}}]
    with FakeOpenAIServer() as server:
        async with httpx.AsyncClient() as client:
            body = {"model": "m", "stream": True, "messages": naive}
            answer = await client.post(f"{server.url}/chat/completions", json=body)
    assert answer.status_code == 400
    assert "Image URLs are only allowed for messages with role 'user'" in answer.text
