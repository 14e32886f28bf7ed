"""The Model protocol: one streamed request in, typed events out, the full message last.

``async with model.stream(request) as events: async for event in events: ...`` yields
:class:`TextDelta`, :class:`ThinkingDelta`, :class:`ToolUseStart` and :class:`ToolInputDelta`
as they arrive, and always ends with one :class:`MessageComplete` carrying the assembled
assistant :class:`~taskloom.messages.Message` (content, ``stop_reason``, ``usage``: None
when the provider reported none, which is unknown, not 0). Leaving the ``async with`` early
closes the connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import field
from typing import Any, Protocol

from taskloom._dataclass import dataclass
from taskloom.messages import INVALID_INPUT_KEY, Message
from taskloom.models.caching import CacheTtl
from taskloom.settings import DEFAULT_MAX_OUTPUT_TOKENS

__all__ = ["INVALID_INPUT_KEY"]  # re-exported: tools import it from here


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as offered to the model.

    ``input_schema`` may be shared by every request that offers the tool: read it, never
    change it (copy it to send something else).
    """

    name: str
    description: str
    input_schema: dict[str, Any]


#: ``ModelRequest.metadata["purpose"]`` of a compaction's summary request: test models answer
#: it apart from their script (see :mod:`taskloom.context.compaction`).
SUMMARY_PURPOSE = "compact"
#: ``ModelRequest.metadata["purpose"]`` of WebFetch's question about a page (the page and the
#: prompt in one user message): a scripted model answers it apart from its script.
WEB_FETCH_PURPOSE = "web_fetch"
#: ``ModelRequest.metadata["purpose"]`` of WebSearch's request running the provider's search.
WEB_SEARCH_PURPOSE = "web_search"


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Everything one model call needs.

    Attributes:
        model: The provider's model id.
        system: The system prompt.
        messages: The conversation so far (user first, alternating).
        tools: The tools offered.
        max_tokens: Cap on the response length.
        agent_id: Who is asking (``None`` for the main thread); lets test models route.
        metadata: Free-form extras (e.g. the agent type, or ``purpose``: see
            :data:`SUMMARY_PURPOSE`) for test models and logs.
        deltas: Whether the caller wants the deltas as they arrive. Without them it sees only
            the final message, so a stream that fails midway can still be retried.
        cache_ttl: How long the provider should cache the request's prefix (``"5m"`` or
            ``"1h"``, see :mod:`taskloom.models.caching`); None: no cache breakpoints.
        server_tools: Tools the provider runs itself, in its own form (the Anthropic API's
            ``{"type": "web_search_20250305", "name": "web_search", ...}``); providers
            without them leave them out.
    """

    model: str
    system: str
    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    max_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
    agent_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    deltas: bool = True
    cache_ttl: CacheTtl | None = None
    server_tools: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of text in content block ``index``."""

    index: int
    text: str


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    """A piece of visible reasoning in content block ``index``."""

    index: int
    thinking: str


@dataclass(frozen=True, slots=True)
class ToolUseStart:
    """The model began a tool call in content block ``index``."""

    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolInputDelta:
    """A chunk of a tool call's JSON input (concatenate the chunks, then parse)."""

    index: int
    partial_json: str


@dataclass(frozen=True, slots=True)
class MessageComplete:
    """The last event: the whole assistant message with its stop reason and usage."""

    message: Message


StreamEvent = TextDelta | ThinkingDelta | ToolUseStart | ToolInputDelta | MessageComplete


class Model(Protocol):
    """A language model provider.

    Attributes:
        name: The model id requests are made for by default.
    """

    name: str

    def stream(
        self, request: ModelRequest
    ) -> AbstractAsyncContextManager[AsyncIterator[StreamEvent]]:
        """Open a streamed response to ``request``.

        Raises:
            ModelError: The provider refused or failed (after retries where they apply).
        """
        ...

    async def aclose(self) -> None:
        """Release what the model holds (its HTTP client); a no-op for models holding none."""
        ...
