"""The canonical messages as plain classes: their JSON forms, the parser of data from outside.

The expected forms are what the pydantic models gave (``model_dump(exclude_none=True)``)
when messages were pydantic models: transcripts and stream-json written before must read the
same, and what is sent must stay byte for byte what it was (prompt caching depends on it).
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from taskloom.cli.stream_input import BadLine, user_prompt
from taskloom.messages import (
    Base64Source,
    CacheCreation,
    ImageBlock,
    Message,
    MessageError,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UrlSource,
    Usage,
    WebSearchResultBlock,
)
from taskloom.transcript import TranscriptWriter, load_messages


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


_SANITIZED = "text: 1 unpaired surrogate(s) replaced with U+FFFD"
_ASSISTANT_CONTENT = (
    '[{"type":"thinking","thinking":"t","signature":""},{"type":"text","text":"a"},'
    '{"type":"tool_use","id":"t1","name":"Bash","input":{"x":null}},'
    '{"type":"server_tool_use","id":"s1","name":"web_search","input":{"query":"q"}},'
    '{"type":"web_search_tool_result","tool_use_id":"s1",'
    '"content":{"type":"web_search_tool_result_error"}}]'
)
_RESULTS = (
    '{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok",'
    '"is_error":false},{"type":"tool_result","tool_use_id":"t2","content":[{"type":"text",'
    '"text":"shot"},{"type":"image","source":{"type":"base64","media_type":"image/png",'
    '"data":"QQ=="}},{"type":"image","source":{"type":"url","url":"https://e/a.png"}}],'
    '"is_error":true}]}'
)

#: (message, its wire form, its full form), the forms as the pydantic models dumped them.
FORMS: list[tuple[Message, str, str]] = [
    (
        Message.user("line\nwith \u00e9 and \U0001f600"),
        '{"role":"user","content":[{"type":"text","text":"line\\nwith \u00e9 and \U0001f600"}]}',
        '{"role":"user","content":[{"type":"text","text":"line\\nwith \u00e9 and \U0001f600"}]}',
    ),
    (
        Message(role="user", content=[TextBlock(text="a", cache_control={"type": "ephemeral"})]),
        '{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]}',
        '{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]}',
    ),
    (
        Message(role="user", content=[TextBlock(text="a", citations=None)], note="x", gone=None),
        '{"role":"user","content":[{"type":"text","text":"a"}]}',
        '{"role":"user","content":[{"type":"text","text":"a"}],"note":"x"}',
    ),
    (
        Message(
            role="assistant",
            content=[
                ThinkingBlock(thinking="t"),
                TextBlock(text="a"),
                ToolUseBlock(id="t1", name="Bash", input={"x": None}, defect="cut off"),
                ServerToolUseBlock(id="s1", name="web_search", input={"query": "q"}),
                WebSearchResultBlock(
                    tool_use_id="s1", content={"type": "web_search_tool_result_error"}
                ),
            ],
            id="msg_1",
            model="m",
            stop_reason="tool_use",
            usage=Usage(input_tokens=3),
            sanitized=[_SANITIZED],
        ),
        f'{{"role":"assistant","content":{_ASSISTANT_CONTENT}}}',
        f'{{"id":"msg_1","type":"message","role":"assistant","content":{_ASSISTANT_CONTENT},'
        '"model":"m","stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":0,'
        '"cache_creation_input_tokens":0,"cache_read_input_tokens":0},'
        f'"sanitized":["{_SANITIZED}"]}}',
    ),
    (
        Message(
            role="assistant",
            content=[TextBlock(text="a")],
            usage=Usage(
                cache_creation_input_tokens=5,
                cache_creation=CacheCreation(ephemeral_1h_input_tokens=5),
            ),
        ),
        '{"role":"assistant","content":[{"type":"text","text":"a"}]}',
        '{"id":null,"type":"message","role":"assistant","content":[{"type":"text","text":"a"}],'
        '"usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":5,'
        '"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,'
        '"ephemeral_1h_input_tokens":5}}}',
    ),
    (
        Message(
            role="user",
            content=[
                ToolResultBlock(tool_use_id="t1", content="ok"),
                ToolResultBlock(
                    tool_use_id="t2",
                    content=[
                        TextBlock(text="shot"),
                        ImageBlock(source=Base64Source(media_type="image/png", data="QQ==")),
                        ImageBlock(source=UrlSource(url="https://e/a.png")),
                    ],
                    is_error=True,
                ),
            ],
        ),
        _RESULTS,
        _RESULTS,
    ),
]


@pytest.mark.parametrize(("message", "wire", "full"), FORMS)
def test_the_json_forms_are_the_pydantic_models_byte_for_byte(
    message: Message, wire: str, full: str
) -> None:
    assert _dumps(message.wire()) == wire
    assert _dumps(message.full()) == full


#: A message as it may come from outside: fields undeclared at every level (a provider's).
WITH_EXTRAS: dict[str, Any] = {
    "role": "assistant",
    "id": "msg_9",
    "content": [
        {"type": "text", "text": "a", "citations": [{"type": "x", "cited_text": "c"}]},
        {"type": "tool_use", "id": "t1", "name": "Read", "input": {}, "caller": {"k": "v"}},
        {
            "type": "tool_result",
            "tool_use_id": "t0",
            "content": [
                {"type": "text", "text": "shot", "q": 1},
                {"type": "image", "source": {"type": "url", "url": "u", "x": 1}, "y": 2},
            ],
            "cache_control": {"type": "ephemeral"},
        },
    ],
    "container": {"id": "c"},
    "stop_sequence": None,
}


def test_undeclared_fields_go_back_out_where_they_came_from(tmp_path: Path) -> None:
    message = Message.from_dict(WITH_EXTRAS)
    assert message.extra == {"container": {"id": "c"}, "stop_sequence": None}
    assert message.content[0].extra == {"citations": [{"type": "x", "cited_text": "c"}]}
    full = message.full()
    assert full["container"] == {"id": "c"} and "stop_sequence" not in full  # exclude_none
    result = full["content"][2]
    assert result["cache_control"] == {"type": "ephemeral"}
    assert result["content"] == WITH_EXTRAS["content"][2]["content"]
    assert message.wire()["content"] == full["content"]
    again = Message.from_dict(full)
    assert again.full() == full
    writer = TranscriptWriter(tmp_path / "t.jsonl", "s1")
    writer.append(message)
    writer.close()
    [loaded] = load_messages(tmp_path / "t.jsonl")
    assert loaded == again and _dumps(loaded.full()) == _dumps(full)


@pytest.mark.parametrize(
    ("raw", "problems"),
    [
        ({"role": "system", "content": []}, {"role": "Input should be 'user' or 'assistant'"}),
        ({"content": "x"}, {"role": "Field required", "content": "Input should be a valid list"}),
        (
            {"role": "user", "content": [{"type": "text"}, {"type": "bogus"}, {"text": "x"}]},
            {
                "content[0].text": "Field required",
                "content[1]": "Input tag 'bogus' found using 'type' does not match any of the "
                "expected tags: 'text', 'image', 'thinking', 'tool_use', 'tool_result', "
                "'server_tool_use', 'web_search_tool_result'",
                "content[2]": "Unable to extract tag using discriminator 'type'",
            },
        ),
        (
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/bmp"}},
                    {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text"}]},
                ],
            },
            {
                "content[0].source.media_type": "Input should be 'image/png', 'image/jpeg', "
                "'image/gif' or 'image/webp'",
                "content[0].source.data": "Field required",
                "content[1].content[0].text": "Field required",
            },
        ),
        (
            {"role": "assistant", "content": [], "usage": {"input_tokens": 1.5}, "id": 3},
            {
                "id": "Input should be a valid string",
                "usage.input_tokens": "Input should be a valid integer, got a number with a "
                "fractional part",
            },
        ),
        ([], {"": "Input should be a valid dictionary"}),
    ],
)
def test_bad_data_names_the_path_of_every_problem(raw: Any, problems: dict[str, str]) -> None:
    with pytest.raises(MessageError) as caught:
        Message.from_dict(raw)
    assert dict(caught.value.errors) == problems
    assert isinstance(caught.value, ValueError)
    for path in problems:
        assert path in str(caught.value)


def test_data_from_outside_is_read_as_pydantic_read_it() -> None:
    # Its lax mode: integral floats and digit strings are counts, 1 and "true" are true.
    usage = Usage.from_dict({"input_tokens": 3.0, "output_tokens": "4", "service_tier": "x"})
    assert usage == Usage(input_tokens=3, output_tokens=4)  # undeclared usage fields dropped
    raw = {"type": "tool_result", "tool_use_id": "t", "is_error": "true"}
    assert ToolResultBlock.from_dict(raw).is_error is True
    assert ToolResultBlock.from_dict({**raw, "is_error": 0}).is_error is False
    block = WebSearchResultBlock.from_dict({"tool_use_id": "s"})
    assert block == WebSearchResultBlock(tool_use_id="s") and block.content == []
    with pytest.raises(MessageError, match=r"type: Input should be 'web_search_tool_result'"):
        WebSearchResultBlock.from_dict({"type": "text", "tool_use_id": "s"})
    message = Message.user("hi")
    assert Message.from_dict(message) is message
    with pytest.raises(MessageError, match=r"content\[0\]\.text"):
        Message.user(3)  # type: ignore[arg-type]


def test_a_bad_block_in_stream_json_input_is_named() -> None:
    line = {"type": "user", "message": {"content": [{"type": "text"}, {"type": "tool_result"}]}}
    with pytest.raises(BadLine) as caught:
        user_prompt(line)
    assert str(caught.value) == "message.content[0].text: Field required (and 1 more)"


def test_the_marks_of_taskloom_and_nones_are_never_written() -> None:
    call = ToolUseBlock(id="t", name="Bash", defect="cut off")
    assert call.dump() == {"type": "tool_use", "id": "t", "name": "Bash", "input": {}}
    assert call != ToolUseBlock(id="t", name="Bash")  # but it is part of the block
    assert "cache_creation" not in Usage().dump()
    assert Message(role="user", content=[], model=None).full() == {"role": "user", "content": []}


def test_copies_equality_and_construction() -> None:
    text = TextBlock(text="a", cache_control={"type": "ephemeral"})
    copied = text.replace(text="b")
    assert copied.text == "b" and copied.extra == text.extra and text.text == "a"
    assert text == TextBlock(text="a", cache_control={"type": "ephemeral"})
    assert text != TextBlock(text="a") and text != "a"
    with pytest.raises(TypeError, match="no field 'txt'"):
        text.replace(txt="b")
    blocks: list[Any] = [text]
    message = Message(role="user", content=blocks)
    blocks.append(TextBlock(text="later"))
    assert message.content == [text]  # the list given is the caller's, as pydantic copied it
    assert isinstance(message.content[0], TextBlock)
    assert repr(TextBlock(text="a")) == "TextBlock(text='a')"
    with pytest.raises(TypeError):
        hash(text)


def test_messages_pickle_as_they_are() -> None:
    # Remote agents and forked workers may carry messages across a process boundary.
    message = Message.from_dict(WITH_EXTRAS)
    assert pickle.loads(pickle.dumps(message)) == message


def test_importing_messages_and_untrusted_loads_no_pydantic() -> None:
    code = (
        "import sys, taskloom.messages, taskloom.untrusted\n"
        "m = taskloom.messages.Message.user('hi'); m.wire(); m.full()\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] in ('pydantic', "
        "'pydantic_core')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == "[]"
