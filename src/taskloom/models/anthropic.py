"""The Anthropic Messages API, streamed over SSE with httpx (no SDK: it costs ~1 s at import).

The transport (retries, errors) is in :mod:`taskloom.models._http`; this is the wire format.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import field
from typing import Any

import httpx
from httpx_sse import ServerSentEvent

from taskloom._dataclass import dataclass
from taskloom.errors import ModelError
from taskloom.messages import (
    ContentBlock,
    Message,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    Usage,
    WebSearchResultBlock,
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
from taskloom.models.caching import place_breakpoints
from taskloom.untrusted import tool_use_block

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"


@dataclass(slots=True)
class _Block:
    kind: str
    parts: list[str] = field(default_factory=list)
    signature: str = ""
    tool_id: str = ""
    tool_name: str = ""
    #: A block that came whole in its start event (a web search's results).
    whole: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class _Assembly:
    """The message being put together from the events of one stream."""

    model: str
    message_id: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    blocks: dict[int, _Block] = field(default_factory=dict)
    stop_reason: str | None = None

    def merge_usage(self, usage: Any) -> None:
        # message_delta repeats or extends message_start's counts; null means "unchanged".
        if isinstance(usage, dict):
            self.usage.update({k: v for k, v in usage.items() if isinstance(v, int)})
            # The writes split by cache lifetime (a one-hour write costs more).
            split = usage.get("cache_creation")
            if isinstance(split, dict):
                counts = {k: v for k, v in split.items() if isinstance(v, int) and v >= 0}
                self.usage["cache_creation"] = {**self.usage.get("cache_creation", {}), **counts}

    def feed(self, kind: str, data: dict[str, Any]) -> Iterator[StreamEvent]:
        """Take one event; yield what the caller should see of it."""
        index = data.get("index", 0)
        block = self.blocks.get(index)
        delta = data.get("delta") or {}
        if kind == "message_start":
            start = data.get("message") or {}
            self.message_id = start.get("id")
            self.model = start.get("model") or self.model
            self.merge_usage(start.get("usage"))
        elif kind == "content_block_start":
            yield from self._start(index, data.get("content_block") or {})
        elif kind == "content_block_delta" and block is not None:
            yield from self._delta(index, block, delta)
        elif kind == "message_delta":
            self.stop_reason = delta.get("stop_reason") or self.stop_reason
            self.merge_usage(data.get("usage"))
        elif kind == "message_stop":
            # Blocks are built here, not at content_block_stop: whether a call's input was cut
            # off is known only with the stop reason, and a block the output limit left open
            # (no content_block_stop) must still reach the model, as a tool error.
            blocks = [b for _, b in sorted(self.blocks.items())]
            content = [self._build(b, last=b is blocks[-1]) for b in blocks]
            # A proxy that reports nothing leaves it unknown (None), not 0.
            usage = Usage.from_dict(self.usage) if self.usage else None
            yield MessageComplete(
                Message(
                    role="assistant",
                    content=content,
                    id=self.message_id,
                    model=self.model,
                    stop_reason=self.stop_reason,
                    usage=usage,
                )
            )
        # "ping" and event types newer than this client are skipped on purpose.

    def _build(self, block: _Block, *, last: bool) -> ContentBlock:
        text = "".join(block.parts)
        if block.kind == "text":
            return TextBlock(text=text)
        if block.kind == "thinking":
            return ThinkingBlock(thinking=text, signature=block.signature)
        if block.kind == "server_tool_use":
            return ServerToolUseBlock(id=block.tool_id, name=block.tool_name, input=_object(text))
        if block.kind == "web_search_tool_result":
            return WebSearchResultBlock.from_dict(block.whole)
        return tool_use_block(
            block.tool_id, block.tool_name, text, stop_reason=self.stop_reason, last=last
        )

    def _start(self, index: int, start: dict[str, Any]) -> Iterator[StreamEvent]:
        kind = start.get("type")
        # Block types we cannot represent (redacted_thinking...) are dropped: the canonical
        # message has no place for them. A server tool's call and results are kept (the
        # WebSearch tool reads them); they are the provider's to run, so no ToolUseStart.
        if kind == "text":
            self.blocks[index] = _Block("text", [start.get("text", "")])
            if start.get("text"):
                yield TextDelta(index, start["text"])
        elif kind == "thinking":
            self.blocks[index] = _Block("thinking", [start.get("thinking", "")])
            self.blocks[index].signature = start.get("signature", "")
            if start.get("thinking"):
                yield ThinkingDelta(index, start["thinking"])
        elif kind == "tool_use":
            block = _Block("tool_use", tool_id=start.get("id", ""), tool_name=start.get("name", ""))
            self.blocks[index] = block
            yield ToolUseStart(index, block.tool_id, block.tool_name)
        elif kind == "server_tool_use":
            self.blocks[index] = _Block(
                "server_tool_use", tool_id=start.get("id", ""), tool_name=start.get("name", "")
            )
        elif kind == "web_search_tool_result":
            self.blocks[index] = _Block("web_search_tool_result", whole=start)

    @staticmethod
    def _delta(index: int, block: _Block, delta: dict[str, Any]) -> Iterator[StreamEvent]:
        kind = delta.get("type")
        if kind == "text_delta":
            block.parts.append(delta.get("text", ""))
            yield TextDelta(index, block.parts[-1])
        elif kind == "thinking_delta":
            block.parts.append(delta.get("thinking", ""))
            yield ThinkingDelta(index, block.parts[-1])
        elif kind == "signature_delta":
            block.signature += delta.get("signature", "")
        elif kind == "input_json_delta" and delta.get("partial_json"):
            block.parts.append(delta["partial_json"])
            yield ToolInputDelta(index, block.parts[-1])


def _object(text: str) -> dict[str, Any]:
    """A server tool call's streamed input, as an object ({} when it is not one)."""
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class AnthropicModel(HttpModel):
    """A Claude model over the Anthropic Messages API (or a compatible proxy).

    Args:
        name: Default model id (a request's own ``model`` wins when set).
        api_key: Sent as ``x-api-key``; defaults to ``ANTHROPIC_API_KEY``.
        auth_token: Sent as ``Authorization: Bearer``; defaults to ``ANTHROPIC_AUTH_TOKEN``.
        base_url: Defaults to ``ANTHROPIC_BASE_URL``, else the public API.
        max_retries: Retries after the first try for retryable failures.
        idle_timeout: Seconds without a byte from the server (waiting for the headers
            included) before a try is abandoned and retried; default
            ``TASKLOOM_STREAM_IDLE_TIMEOUT``, else 90 (connect capped at 30 s).
        client: An httpx client to use (and not close); one is created lazily otherwise.
        retry_base_delay: First backoff in seconds (doubles, capped at 30 s, jittered).
    """

    provider = "Anthropic"

    def __init__(
        self,
        name: str,
        *,
        api_key: str | None = None,
        auth_token: str | None = None,
        base_url: str | None = None,
        max_retries: int = 4,
        idle_timeout: float | None = None,
        client: httpx.AsyncClient | None = None,
        retry_base_delay: float = 0.5,
    ) -> None:
        self.name = name
        self.api_key = env_default(api_key, "ANTHROPIC_API_KEY")
        self.auth_token = env_default(auth_token, "ANTHROPIC_AUTH_TOKEN")
        base = env_default(base_url, "ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
        self.base_url = base.rstrip("/")
        self._init_transport(max_retries, retry_base_delay, idle_timeout, client)

    def headers(self) -> dict[str, str]:
        """The request headers (credentials included)."""
        headers = {"anthropic-version": API_VERSION, "content-type": "application/json"}
        if self.api_key:
            headers["x-api-key"] = self.api_key
        if self.auth_token:
            headers["authorization"] = f"Bearer {self.auth_token}"
        return headers

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request``."""
        body: dict[str, Any] = {
            "model": request.model or self.name,
            "max_tokens": request.max_tokens,
            "stream": True,
            "messages": [m.wire() for m in request.messages],
        }
        if request.system:
            body["system"] = request.system
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in request.tools
            ]
        if request.server_tools:
            body.setdefault("tools", []).extend(request.server_tools)
        if request.cache_ttl is not None:
            place_breakpoints(body, request.cache_ttl)
        return body

    @asynccontextmanager
    async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[StreamEvent]]:
        """Stream the response to ``request`` (see :class:`taskloom.models.base.Model`)."""
        body = self.request_body(request)
        url = f"{self.base_url}/v1/messages"
        parser = self._parser(body["model"])
        events = self._transport.stream(url, self.headers(), body, parser, deltas=request.deltas)
        async with aclosing(events):
            yield events

    def _parser(self, model: str) -> EventParser:
        async def parse(sse: AsyncIterator[ServerSentEvent]) -> AsyncGenerator[StreamEvent, None]:
            msg = _Assembly(model=model)
            async for raw in sse:
                if not raw.data:
                    continue
                data = load_event(self.provider, raw.data)
                kind = data.get("type") or raw.event
                if kind == "error":
                    raise stream_error(self.provider, data)
                for event in msg.feed(kind, data):
                    if isinstance(event, MessageComplete) and event.message.usage is None:
                        self._no_usage(msg.model)
                    yield event
                if kind == "message_stop":
                    return
            raise ModelError(f"{self.provider}: stream ended before message_stop", retryable=True)

        return parse
