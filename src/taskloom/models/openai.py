"""OpenAI-compatible Chat Completions, streamed over SSE with httpx (no SDK: ~0.6 s at import).

Works with OpenAI and the local servers that copy its API (vLLM, Ollama, llama.cpp server,
LM Studio). Canonical (Anthropic-shaped) messages are mapped to chat messages on the way out
and the streamed chunks are assembled back into one canonical assistant message. Transport,
retries and errors are shared with :mod:`taskloom.models.anthropic`.

Content block indices are given in order of first appearance (reasoning, text and each tool
call get the next free index when their first piece arrives), so every event's ``index`` is
the position of its block in the final message's ``content``.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import field
from typing import Any
from urllib.parse import urlsplit

import httpx
from httpx_sse import ServerSentEvent

from taskloom._dataclass import dataclass
from taskloom.errors import ModelError, UsageError
from taskloom.messages import (
    ContentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    UrlSource,
    Usage,
)
from taskloom.models._http import (
    EventParser,
    HttpModel,
    env_default,
    load_event,
    stream_error,
)
from taskloom.models.base import (
    MessageComplete,
    ModelRequest,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStart,
)
from taskloom.untrusted import tool_use_block

DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: Set to 0, false, no or off for a server whose model takes no images (a text-only local
#: model): a tool result's image is then described in words instead of sent.
IMAGES_ENV = "TASKLOOM_OPENAI_IMAGES"
IMAGES_FOLLOW = "\n(The image is in the next message.)"
NO_IMAGES = "\n(An image was returned, but this model takes no images, so it is not shown.)"
NO_PROMPT_IMAGES = "(An image was attached, but this model takes no images, so it is not shown.)"

STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


def to_chat_messages(
    system: str, messages: list[Message], *, images_accepted: bool = True
) -> list[dict[str, Any]]:
    """Canonical messages as Chat Completions messages.

    Assistant text and tool calls become one assistant message with ``tool_calls``; each
    tool result becomes a ``tool`` message (placed first, as the API requires them right
    after the call), the rest of a user message a ``user`` message. Thinking is not sent back:
    chat APIs take no reasoning input.

    A ``tool`` message holds text only, so a tool result's images (a Read of a PNG) go in
    the ``user`` message that follows the tool messages, as ``image_url`` parts with a
    ``data:`` URL; the tool message says they follow. With ``images_accepted`` False (a
    server without vision) the tool message says instead that the image cannot be shown.
    A prompt's own images (a user message's image blocks) are ``image_url`` parts among its
    text parts, in their order; without vision each is a line saying it was left out.

    No ``content`` is ever ``null``: an assistant message with tool calls and no text says
    ``""``, which every compatible server takes, while some refuse ``null`` (llama-cpp-python's
    server answers it with a 500).
    """
    chat: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        texts = [b.text for b in message.content if isinstance(b, TextBlock)]
        if message.role == "assistant":
            calls = [
                {
                    "id": b.id,
                    "type": "function",
                    "function": {"name": b.name, "arguments": json.dumps(b.input)},
                }
                for b in message.tool_uses()
            ]
            out: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
            if calls:
                out["tool_calls"] = calls
            chat.append(out)
            continue
        images: list[dict[str, Any]] = []
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                # Chat has no error flag on tool results: say it in the text the model reads.
                text = f"Error: {block.text()}" if block.is_error else block.text()
                pictures = block.images()
                if pictures and images_accepted:
                    text += IMAGES_FOLLOW
                    images += _image_parts(block.tool_use_id, pictures)
                elif pictures:
                    text += NO_IMAGES
                chat.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": text})
        own = _user_parts(message, images_accepted)
        if images or any(part["type"] == "image_url" for part in own):
            # A tool message takes text only: the images come in a user message right after
            # the tool messages (the API wants those straight after the call), before any text.
            chat.append({"role": "user", "content": [*images, *own]})
        elif own:
            chat.append({"role": "user", "content": "\n\n".join(p["text"] for p in own)})
    return chat


def _user_parts(message: Message, images_accepted: bool) -> list[dict[str, Any]]:
    """A user message's own text and images (not its tool results) as chat parts, in order.

    Without vision, an image is a line saying it was left out, so the model knows of it.
    """
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock) and images_accepted:
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block)}})
        elif isinstance(block, ImageBlock):
            parts.append({"type": "text", "text": NO_PROMPT_IMAGES})
    return parts


def _image_url(image: ImageBlock) -> str:
    """Where the server finds an image: its URL, or a ``data:`` URL of its bytes."""
    source = image.source
    if isinstance(source, UrlSource):
        return source.url
    return f"data:{source.media_type};base64,{source.data}"


def _images_from_env() -> bool:
    raw = os.environ.get(IMAGES_ENV) or ""
    if raw.strip().lower() in ("", "1", "true", "yes", "on"):
        return True
    if raw.strip().lower() in ("0", "false", "no", "off"):
        return False
    raise UsageError(f"{IMAGES_ENV} must be 1, true, yes, on or 0, false, no, off; got {raw!r}")


def _image_parts(call_id: str, images: list[ImageBlock]) -> list[dict[str, Any]]:
    """Chat content parts for a tool result's images: a label, then each image's data URL."""
    label = "image" if len(images) == 1 else f"{len(images)} images"
    parts: list[dict[str, Any]] = [
        {"type": "text", "text": f"The {label} from tool call {call_id}:"}
    ]
    for image in images:
        parts.append({"type": "image_url", "image_url": {"url": _image_url(image)}})
    return parts


def to_usage(raw: Any) -> Usage:
    """OpenAI usage in Anthropic terms: cached prompt tokens count as cache reads."""
    if not isinstance(raw, dict):
        return Usage()
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    cached = cached if isinstance(cached, int) else 0
    # Read as data from outside: a count a server sends as 12.0 or "12" is an integer.
    usage = Usage.from_dict(
        {
            "input_tokens": raw.get("prompt_tokens") or 0,
            "output_tokens": raw.get("completion_tokens") or 0,
        }
    )
    usage.input_tokens = max(0, usage.input_tokens - cached)
    usage.cache_read_input_tokens = cached
    return usage


@dataclass(slots=True, eq=False)  # identity: calls are keys in the block order
class _Call:
    index: int
    id: str
    name: str = ""
    started: bool = False
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Assembly:
    """The message being put together from the chunks of one stream."""

    model: str
    message_id: str | None = None
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    order: list[str | _Call] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage | None = None  # None until the server reports some (some never do)

    def _index(self, key: str | _Call) -> int:
        if key not in self.order:
            self.order.append(key)
        return self.order.index(key)

    def feed(self, chunk: dict[str, Any]) -> Iterator[StreamEvent]:
        """Take one chunk; yield what the caller should see of it."""
        self.message_id = self.message_id or chunk.get("id")
        self.model = chunk.get("model") or self.model
        if chunk.get("usage"):
            self.usage = to_usage(chunk["usage"])
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue  # we never ask for n > 1
            delta = choice.get("delta") or {}
            # Local servers stream reasoning under one of these names.
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self.reasoning.append(reasoning)
                yield ThinkingDelta(self._index("thinking"), reasoning)
            if delta.get("content"):
                self.text.append(delta["content"])
                yield TextDelta(self._index("text"), delta["content"])
            for raw in delta.get("tool_calls") or ():
                yield from self._tool_delta(raw)
            self.finish_reason = choice.get("finish_reason") or self.finish_reason

    def _tool_delta(self, raw: dict[str, Any]) -> Iterator[StreamEvent]:
        function = raw.get("function") or {}
        call = self.calls.get(raw.get("index", 0))
        if call is None:
            # Some local servers send no id; the next turn needs one to pair the result.
            call = _Call(raw.get("index", 0), raw.get("id") or f"call_{secrets.token_hex(12)}")
            self.calls[call.index] = call
        call.name = call.name or function.get("name") or ""
        # Start once the name is known, or at the latest before the first argument chunk.
        if not call.started and (call.name or function.get("arguments")):
            call.started = True
            yield ToolUseStart(self._index(call), call.id, call.name)
        if function.get("arguments"):
            call.arguments.append(function["arguments"])
            yield ToolInputDelta(self._index(call), function["arguments"])

    def message(self) -> Message:
        """The assembled assistant message."""
        stop = STOP_REASONS.get(self.finish_reason or "", self.finish_reason)
        if self.calls and stop == "end_turn":
            stop = "tool_use"  # some local servers say "stop" even when they called tools
        content: list[ContentBlock] = []
        for key in self.order:
            if key == "thinking":
                content.append(ThinkingBlock(thinking="".join(self.reasoning)))
            elif key == "text":
                content.append(TextBlock(text="".join(self.text)))
            elif isinstance(key, _Call):
                raw, last = "".join(key.arguments), key is self.order[-1]
                content.append(tool_use_block(key.id, key.name, raw, stop_reason=stop, last=last))
        return Message(
            role="assistant",
            content=content,
            id=self.message_id,
            model=self.model,
            stop_reason=stop,
            usage=self.usage,
        )


class OpenAIModel(HttpModel):
    """A model behind an OpenAI-compatible Chat Completions endpoint.

    Args:
        name: Default model id (a request's own ``model`` wins when set).
        api_key: Sent as ``Authorization: Bearer``; defaults to ``OPENAI_API_KEY``. Optional,
            as local servers usually need none.
        base_url: Defaults to ``OPENAI_BASE_URL``, else the public API (includes ``/v1``).
        max_retries: Retries after the first try for retryable failures.
        idle_timeout: Seconds without a byte from the server (waiting for the headers
            included) before a try is abandoned and retried; default
            ``TASKLOOM_STREAM_IDLE_TIMEOUT``, else 90 (connect capped at 30 s).
        client: An httpx client to use (and not close); one is created lazily otherwise.
        retry_base_delay: First backoff in seconds (doubles, capped at 30 s, jittered).
        images: Whether the model takes images (tool results' images are sent as
            ``image_url`` parts, else described in words); default ``TASKLOOM_OPENAI_IMAGES``,
            else true.

    Raises:
        UsageError: ``TASKLOOM_OPENAI_IMAGES`` is neither a yes nor a no.
    """

    provider = "OpenAI"

    def __init__(
        self,
        name: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 4,
        idle_timeout: float | None = None,
        client: httpx.AsyncClient | None = None,
        retry_base_delay: float = 0.5,
        images: bool | None = None,
    ) -> None:
        self.name = name
        self.api_key = env_default(api_key, "OPENAI_API_KEY")
        base = env_default(base_url, "OPENAI_BASE_URL") or DEFAULT_BASE_URL
        self.base_url = base.rstrip("/")
        self.images = images if images is not None else _images_from_env()
        self._init_transport(max_retries, retry_base_delay, idle_timeout, client)

    def headers(self) -> dict[str, str]:
        """The request headers (credentials included)."""
        headers = {"content-type": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        return headers

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request``."""
        # OpenAI's newer models refuse the deprecated max_tokens; many local servers only
        # know that one.
        official = urlsplit(self.base_url).hostname == "api.openai.com"
        body: dict[str, Any] = {
            "model": request.model or self.name,
            "messages": to_chat_messages(
                request.system, request.messages, images_accepted=self.images
            ),
            "stream": True,
            "stream_options": {"include_usage": True},
            ("max_completion_tokens" if official else "max_tokens"): request.max_tokens,
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    },
                }
                for t in request.tools
            ]
        return body

    @asynccontextmanager
    async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[StreamEvent]]:
        """Stream the response to ``request`` (see :class:`taskloom.models.base.Model`)."""
        body = self.request_body(request)
        url = f"{self.base_url}/chat/completions"
        parser = self._parser(body["model"])
        events = self._transport.stream(url, self.headers(), body, parser, deltas=request.deltas)
        async with aclosing(events):
            yield events

    def _parser(self, model: str) -> EventParser:
        async def parse(sse: AsyncIterator[ServerSentEvent]) -> AsyncGenerator[StreamEvent, None]:
            msg = _Assembly(model=model)
            async for raw in sse:
                if raw.data.strip() == "[DONE]":
                    break
                if not raw.data:
                    continue
                chunk = load_event(self.provider, raw.data)
                if chunk.get("error"):
                    raise stream_error(self.provider, chunk)
                for event in msg.feed(chunk):
                    yield event
            # Without [DONE] (some servers omit it) a finish reason still proves completeness.
            if msg.finish_reason is None:
                raise ModelError(
                    f"{self.provider}: stream ended without a finish reason", retryable=True
                )
            if msg.usage is None:
                self._no_usage(msg.model)
            yield MessageComplete(msg.message())

        return parse
