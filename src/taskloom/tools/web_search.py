"""WebSearch: search the web, answer with the results' titles and links.

Two ways to search, in this order:

1. **A configured endpoint** (setting ``webSearchUrl``): a search service answering
   ``GET URL?q=QUERY&format=json`` with ``{"results": [{"title", "url", "content"}]}`` (SearXNG's
   JSON API, which other services copy). The domain lists filter its results here.
2. **The Anthropic API's own search** (the session's model is on it): as Claude Code does, a
   request of its own to the calling agent's model offering only the server tool
   ``web_search_20250305`` (at most 8 searches, the domain lists passed on); the answer's
   ``web_search_tool_result`` blocks hold the results and its text the model's commentary.

With neither, the tool is not offered (:func:`web_search_available`). The result is Claude
Code's text: ``Web search results for query: "Q"``, the commentary and one ``Links: [...]``
line of ``{"title", "url"}`` objects per search, then a reminder to cite the sources.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from taskloom.errors import ModelError
from taskloom.messages import Message, TextBlock, WebSearchResultBlock
from taskloom.models.base import WEB_SEARCH_PURPOSE, Model, ModelRequest
from taskloom.tools import responses
from taskloom.tools._web import agent_model, anthropic, ask, offers_server_search
from taskloom.tools.base import Tool, ToolContext, ToolKind, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.tools.inputs.web_search import WebSearchInput

#: The setting naming a search endpoint (see the module docstring).
ENDPOINT_SETTING = "webSearchUrl"
SERVER_TOOL = "web_search_20250305"
MAX_USES = 8
ENDPOINT_RESULTS = 10
ENDPOINT_TIMEOUT_S = 30.0
SEARCH_SYSTEM = "You are an assistant for performing a web search tool use"
SEARCH_MAX_TOKENS = 8192
REMINDER = (
    "REMINDER: You MUST include the sources above in your response to the user using "
    "markdown hyperlinks."
)

DESCRIPTION = """\
- Allows Claude to search the web and use the results to inform responses
- Provides up-to-date information for current events and recent data
- Returns search result information formatted as search result blocks, including links as \
markdown hyperlinks
- Use this tool for accessing information beyond Claude's knowledge cutoff
- Searches are performed automatically within a single API call

CRITICAL REQUIREMENT - You MUST follow this:
  - After answering the user's question, you MUST include a "Sources:" section at the end of \
your response
  - In the Sources section, list all relevant URLs from the search results as markdown \
hyperlinks: [Title](URL)
  - This is MANDATORY - never skip including sources in your response

Usage notes:
  - Domain filtering is supported to include or block specific websites
  - Use the current year from the environment when searching for recent information"""


_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "WebSearch's input.",
    "properties": {
        "query": {"description": "The search query to use", "minLength": 2, "type": "string"},
        "allowed_domains": {
            "items": {"type": "string"},
            "type": "array",
            "description": "Only include search results from these domains",
        },
        "blocked_domains": {
            "items": {"type": "string"},
            "type": "array",
            "description": "Never include search results from these domains",
        },
    },
    "required": ["query"],
    "type": "object",
}

Found = list[str | dict[str, Any]]


def web_search_available(model: Model, settings: Mapping[str, Any]) -> bool:
    """Whether WebSearch is offered: an endpoint is configured, or ``model`` is on Anthropic."""
    return bool(settings.get(ENDPOINT_SETTING)) or offers_server_search(model)


class WebSearch(Tool["WebSearchInput"]):
    """Search the web through a configured endpoint or the Anthropic API's own search."""

    name = "WebSearch"
    description = DESCRIPTION
    input_model = "taskloom.tools.inputs.web_search:WebSearchInput"
    kind: ClassVar[ToolKind] = "fetch"
    concurrency_safe = True
    static_schema = (input_model, _SCHEMA)

    async def call(self, params: WebSearchInput, ctx: ToolContext) -> ToolResult:
        """Search, then format the results as Claude Code does."""
        if params.allowed_domains and params.blocked_domains:
            return tool_error(
                "Error: Cannot specify both allowed_domains and blocked_domains in the same request"
            )
        started = time.monotonic()
        endpoint = ctx.settings.get(ENDPOINT_SETTING)
        try:
            if endpoint:
                found = await _endpoint_search(endpoint, params)
            else:
                found = await _server_search(ctx, params)
        except (SearchError, ModelError) as exc:
            return tool_error(f"Web search failed: {exc}")
        seconds = round(time.monotonic() - started, 3)
        return ToolResult(
            formatted(params.query, found),
            response=responses.web_search(params.query, found, seconds),
        )


class SearchError(Exception):
    """The search could not be made (the message says why)."""


def formatted(query: str, found: Sequence[str | Mapping[str, Any]]) -> str:
    """What the model is shown: Claude Code's layout of the commentary and the links."""
    out = f'Web search results for query: "{query}"\n\n'
    for item in found:
        if isinstance(item, str):
            out += item + "\n\n"
        elif item.get("content"):
            links = json.dumps(item["content"], ensure_ascii=False, separators=(",", ":"))
            out += f"Links: {links}\n\n"
        else:
            out += "No links found.\n\n"
    return out + "\n" + REMINDER


async def _server_search(ctx: ToolContext, params: WebSearchInput) -> Found:
    model = anthropic(agent_model(ctx))
    if model is None:
        raise SearchError(
            "WebSearch needs the Anthropic API (its server-side search) or the setting "
            f"{ENDPOINT_SETTING}, and this agent's model is on neither"
        )
    tool: dict[str, Any] = {"type": SERVER_TOOL, "name": "web_search", "max_uses": MAX_USES}
    if params.allowed_domains:
        tool["allowed_domains"] = params.allowed_domains
    if params.blocked_domains:
        tool["blocked_domains"] = params.blocked_domains
    request = ModelRequest(
        model=model.name,
        system=SEARCH_SYSTEM,
        messages=[Message.user(f"Perform a web search for the query: {params.query}")],
        max_tokens=SEARCH_MAX_TOKENS,
        agent_id=ctx.agent_id,
        metadata={"purpose": WEB_SEARCH_PURPOSE},
        deltas=False,
        server_tools=[tool],
    )
    return results_of(await ask(ctx, model, request))


def results_of(answer: Message) -> Found:
    """The commentary (text between searches) and each search's links, in order."""
    found: Found = []
    text: list[str] = []

    def flush() -> None:
        joined = "".join(text).strip()
        if joined:
            found.append(joined)
        text.clear()

    for block in answer.content:
        if isinstance(block, TextBlock):
            text.append(block.text)
        elif isinstance(block, WebSearchResultBlock):
            flush()
            if isinstance(block.content, dict):  # the search failed
                code = block.content.get("error_code", "unknown")
                found.append(f"Web search error: {code}")
                continue
            links = [
                {"title": r.get("title", ""), "url": r.get("url", "")}
                for r in block.content
                if isinstance(r, dict)
            ]
            found.append({"tool_use_id": block.tool_use_id, "content": links})
    flush()
    return found


async def _endpoint_search(endpoint: Any, params: WebSearchInput) -> Found:
    import httpx

    if not isinstance(endpoint, str) or urlsplit(endpoint).scheme not in ("http", "https"):
        raise SearchError(f"the setting {ENDPOINT_SETTING} must be an http(s) URL: {endpoint!r}")
    try:
        async with httpx.AsyncClient(timeout=ENDPOINT_TIMEOUT_S) as client:
            reply = await client.get(endpoint, params={"q": params.query, "format": "json"})
            reply.raise_for_status()
            body = reply.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise SearchError(f"{endpoint}: {exc or type(exc).__name__}") from None
    raw = body.get("results") if isinstance(body, dict) else None
    if not isinstance(raw, list):
        raise SearchError(f"{endpoint} answered without a results list")
    kept = [
        r
        for r in raw
        if isinstance(r, dict)
        and isinstance(r.get("url"), str)
        and _wanted(r["url"], params.allowed_domains, params.blocked_domains)
    ][:ENDPOINT_RESULTS]
    links = [{"title": str(r.get("title") or ""), "url": r["url"]} for r in kept]
    found: Found = [{"tool_use_id": "endpoint", "content": links}]
    snippets = [f"- {r.get('title') or r['url']}: {r['content']}" for r in kept if r.get("content")]
    if snippets:
        found.append("\n".join(snippets))
    return found


def _wanted(url: str, allowed: list[str] | None, blocked: list[str] | None) -> bool:
    host = (urlsplit(url).hostname or "").lower()

    def within(domain: str) -> bool:
        domain = domain.lower().strip().removeprefix("*.").rstrip(".")
        return host == domain or host.endswith("." + domain)

    if allowed and not any(within(d) for d in allowed):
        return False
    return not (blocked and any(within(d) for d in blocked))
