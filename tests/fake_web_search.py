"""The fake Anthropic server with the API's server-side web search (``web_search_20250305``).

A request offering that server tool is answered as the real API streams a search: a text
block, a ``server_tool_use`` block (its input streamed as ``input_json_delta``), a
``web_search_tool_result`` block whole in its start event (each result with ``title``, ``url``,
``encrypted_content``, ``page_age``), then a text block with a ``citations_delta``; usage
carries ``server_tool_use.web_search_requests``. The results are those given, filtered by the
request's ``allowed_domains`` / ``blocked_domains``; ``error_code`` answers with the API's
error object instead. A search takes no scripted reply: queue replies only for the other
requests, which are served from the queue as usual.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from fake_servers import FakeAnthropicServer, Reply, Turn, _sse

SERVER_TOOL = "web_search_20250305"


class FakeSearchingServer(FakeAnthropicServer):
    """A :class:`FakeAnthropicServer` that also runs the web search server tool."""

    def __init__(
        self,
        results: list[tuple[str, str]],
        *,
        commentary: str = "Here is what I found.",
        error_code: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.results = results
        self.commentary = commentary
        self.error_code = error_code
        #: The server tool specs of the search requests served, in order.
        self.searches: list[dict[str, Any]] = []

    async def _next_reply(self, body: dict[str, Any]) -> Reply:
        if _server_tool(body) is not None:
            return Turn()  # answered by _stream from the results, not from the queue
        return await super()._next_reply(body)

    def _stream(self, turn: Turn, request: dict[str, Any], n: int) -> list[bytes]:
        tool = _server_tool(request)
        if tool is None:
            return super()._stream(turn, request, n)
        self.searches.append(tool)
        return self._search(tool, request, n)

    def _search(self, tool: dict[str, Any], request: dict[str, Any], n: int) -> list[bytes]:
        asked = request["messages"][-1]["content"]
        asked = asked if isinstance(asked, str) else asked[0]["text"]
        query = asked.rpartition(": ")[2]
        usage = {"input_tokens": 50, "output_tokens": 1}
        events = [self._start(request, n, usage)]
        use_id = f"srvtoolu_fake_{n:06d}"
        content: Any
        if self.error_code is not None:
            content = {"type": "web_search_tool_result_error", "error_code": self.error_code}
        else:
            content = [
                {
                    "type": "web_search_result",
                    "title": title,
                    "url": url,
                    "encrypted_content": "EqgfCioIARgBIiQ3YTAw",
                    "page_age": "April 30, 2025",
                }
                for title, url in self.results
                if _kept(url, tool.get("allowed_domains"), tool.get("blocked_domains"))
            ]
        blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = [
            ({"type": "text", "text": ""}, [{"type": "text_delta", "text": "Let me search."}]),
            (
                {"type": "server_tool_use", "id": use_id, "name": "web_search", "input": {}},
                [{"type": "input_json_delta", "partial_json": json.dumps({"query": query})}],
            ),
            ({"type": "web_search_tool_result", "tool_use_id": use_id, "content": content}, []),
            (
                {"type": "text", "text": "", "citations": []},
                [
                    {
                        "type": "citations_delta",
                        "citation": {"type": "web_search_result_location", "url": "u"},
                    },
                    {"type": "text_delta", "text": self.commentary},
                ],
            ),
        ]
        for index, (block, deltas) in enumerate(blocks):
            events += self._block(index, block, deltas)
            events.append(
                _sse("content_block_stop", {"type": "content_block_stop", "index": index})
            )
        final = {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 20, "server_tool_use": {"web_search_requests": 1}},
        }
        return [
            *events,
            _sse("message_delta", final),
            _sse("message_stop", {"type": "message_stop"}),
        ]


def _kept(url: str, allowed: list[str] | None, blocked: list[str] | None) -> bool:
    host = urlsplit(url).hostname or ""

    def within(domain: str) -> bool:
        return host == domain or host.endswith("." + domain)

    if allowed:
        return any(within(d) for d in allowed)
    return not (blocked and any(within(d) for d in blocked))


def _server_tool(body: dict[str, Any]) -> dict[str, Any] | None:
    tools = body.get("tools") or []
    return next((t for t in tools if t.get("type") == SERVER_TOOL), None)
