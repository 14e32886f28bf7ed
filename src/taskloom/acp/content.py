"""ACP content both ways: a prompt's blocks as the user message, a transcript as updates.

A prompt of text is a string, so that ``/name args`` runs a command as the REPL's does. A
resource link is named for the model (``@path``: it reads the file itself); an embedded
resource's text is given as context, in a ``<context ref="URI">`` element. A prompt with
images is a user message of text and image blocks in the prompt's order (an image in a format
or of a size the Messages API refuses is refused here, naming the block). Audio and binary
resources are refused: no provider taskloom speaks to takes them in a prompt.

:func:`replay` turns a recorded conversation back into the updates that showed it
(``session/load``): the user's prompts as ``user_message_chunk``, the answers as
``agent_message_chunk`` and ``agent_thought_chunk``, each tool call as ``tool_call`` and its
result as ``tool_call_update``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import acp
from acp.schema import (
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    ResourceContentBlock,
    TextContentBlock,
    TextResourceContents,
)

from taskloom.acp.updates import end_call, result_text, start_call
from taskloom.messages import (
    Base64Source,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    base64_image_problem,
)


class BadPrompt(ValueError):
    """A prompt block the session cannot take (the message says which and why)."""


def _text(block: Any, index: int) -> str:
    """What one prompt block says to the model."""
    if isinstance(block, TextContentBlock):
        return block.text
    if isinstance(block, ResourceContentBlock):
        return f"@{_path_of(block.uri)}"
    if isinstance(block, EmbeddedResourceContentBlock):
        resource = block.resource
        if isinstance(resource, TextResourceContents):
            ref = _path_of(resource.uri)
            return f'<context ref="{ref}">\n{resource.text}\n</context>'
        raise BadPrompt(f"prompt block {index}: a binary resource is not supported")
    kind = type(block).__name__
    raise BadPrompt(f"prompt block {index}: {kind} content is not supported")


def _path_of(uri: str) -> str:
    """A ``file://`` URI as its path; any other URI as it is."""
    return uri.removeprefix("file://") if uri.startswith("file://") else uri


def _image(block: ImageContentBlock, index: int) -> ImageBlock:
    """An ACP image as an image block, checked as the Messages API would check it."""
    problem = base64_image_problem(block.mime_type, block.data)
    if problem is not None:
        raise BadPrompt(f"prompt block {index}: the image's data is {problem}")
    source = Base64Source(media_type=block.mime_type, data=block.data)  # type: ignore[arg-type]
    return ImageBlock(source=source)


def prompt_of(blocks: Sequence[Any]) -> str | Message:
    """The prompt an ACP prompt's blocks are: their texts, one a line; with images, a message.

    Raises:
        BadPrompt: A block that cannot be taken, or no block at all.
    """
    if not blocks:
        raise BadPrompt("the prompt is empty")
    if not any(isinstance(block, ImageContentBlock) for block in blocks):
        return "\n".join(_text(block, i) for i, block in enumerate(blocks))
    content: list[TextBlock | ImageBlock] = []
    texts: list[str] = []
    for i, block in enumerate([*blocks, None]):
        if block is not None and not isinstance(block, ImageContentBlock):
            texts.append(_text(block, i))
            continue
        joined = "\n".join(texts)  # the texts before an image, as a prompt of text alone
        if joined.strip():  # the API refuses a blank text block
            content.append(TextBlock(text=joined))
        texts = []
        if block is not None:
            content.append(_image(block, i))
    return Message(role="user", content=list(content))


def replay(messages: Sequence[Message], cwd: Path) -> Iterator[Any]:
    """The updates that show ``messages`` (a recorded conversation), in order."""
    for message in messages:
        for block in message.content:
            yield from _replayed(message.role, block, cwd)


def _replayed(role: str, block: Any, cwd: Path) -> Iterator[Any]:
    said = acp.update_user_message if role == "user" else acp.update_agent_message
    if isinstance(block, TextBlock) and block.text:
        yield said(acp.text_block(block.text))
    elif isinstance(block, ImageBlock):
        source = block.source
        if isinstance(source, Base64Source):
            yield said(acp.image_block(source.data, source.media_type))
        else:  # ACP images carry their data: one by URL is named instead
            yield said(acp.text_block(f"[image: {source.url}]"))
    elif isinstance(block, ThinkingBlock) and block.thinking:
        yield acp.update_agent_thought_text(block.thinking)
    elif isinstance(block, ToolUseBlock):
        yield start_call(block, cwd, live=False)
    elif isinstance(block, ToolResultBlock):
        yield end_call(block.tool_use_id, result_text(block.content), block.is_error)


__all__ = ["BadPrompt", "prompt_of", "replay"]
