"""WebFetch: fetch a URL, read it as Markdown, and have the small model answer a prompt about it.

The model never sees the page itself, only the small model's answer (as in Claude Code): a
page is untrusted text, and a long one would fill the context. The page (its first 100,000
characters) goes to the session's small model (:func:`taskloom.tools._web.small_model`) with
Claude Code's instructions; that model's answer is the result. Permission rules match the
URL's host: ``WebFetch(domain:example.com)``; without one, a call asks (kind ``fetch``).

A fetch is bounded (60 s, 10 MiB, see :mod:`taskloom.tools._fetch`) and runs inside the call,
so the engine's cancel (an interrupt, a stopped agent) ends it at once; it is not a task of its
own, since the turn needs its answer and the bounds keep it short.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar

from taskloom.errors import ModelError
from taskloom.messages import Message
from taskloom.models.base import WEB_FETCH_PURPOSE, ModelRequest
from taskloom.tools import responses
from taskloom.tools._web import agent_model, ask, small_model
from taskloom.tools.base import Tool, ToolContext, ToolKind, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.tools._fetch import Page, PageCache, Redirect
    from taskloom.tools.inputs.web_fetch import WebFetchInput

#: Characters of the page the small model is given (Claude Code's bound).
MAX_MARKDOWN_CHARS = 100_000
TRUNCATED = "\n\n[Content truncated due to length...]"
ANSWER_MAX_TOKENS = 4096
#: Every session's fetches share it, as Claude Code's process does (made at the first fetch).
_pages: PageCache | None = None

DESCRIPTION = """\
- Fetches content from a specified URL and processes it using an AI model
- Takes a URL and a prompt as input
- Fetches the URL content, converts HTML to markdown
- Processes the content with the prompt using a small, fast model
- Returns the model's response about the content
- Use this tool when you need to retrieve and analyze web content

Usage notes:
  - IMPORTANT: If an MCP-provided web fetch tool is available, prefer using that tool instead \
of this one, as it may have fewer restrictions. All MCP-provided tools start with "mcp__".
  - The URL must be a fully-formed valid URL
  - HTTP URLs will be automatically upgraded to HTTPS
  - The prompt should describe what information you want to extract from the page
  - This tool is read-only and does not modify any files
  - Results may be summarized if the content is very large
  - Includes a self-cleaning 15-minute cache for faster responses when repeatedly accessing \
the same URL
  - When a URL redirects to a different host, the tool will inform you and provide the \
redirect URL in a special format. You should then make a new WebFetch request with the \
redirect URL to fetch the content."""

INSTRUCTIONS = """\
Provide a concise response based only on the content above. In your response:
 - Enforce a strict 125-character maximum for quotes from any source document. Open Source \
Software is ok as long as we respect the license.
 - Use quotation marks for exact language from articles; any language outside of the \
quotation marks should never be word-for-word the same.
 - You are not a lawyer and never comment on the legality of your own prompts and responses.
 - Never produce or reproduce exact song lyrics."""


_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "WebFetch's input.",
    "properties": {
        "url": {"description": "The URL to fetch content from", "type": "string"},
        "prompt": {"description": "The prompt to run on the fetched content", "type": "string"},
    },
    "required": ["url", "prompt"],
    "type": "object",
}


class WebFetch(Tool["WebFetchInput"]):
    """Fetch a URL and answer a prompt about it with the session's small model.

    Args:
        cache: Where fetched pages are kept (default: the process's shared one).
    """

    name = "WebFetch"
    description = DESCRIPTION
    input_model = "taskloom.tools.inputs.web_fetch:WebFetchInput"
    kind: ClassVar[ToolKind] = "fetch"
    concurrency_safe = True
    static_schema = (input_model, _SCHEMA)

    def __init__(self, cache: PageCache | None = None) -> None:
        self._cache = cache

    @property
    def cache(self) -> PageCache:
        """Where fetched pages are kept: the one given, else the process's shared cache."""
        global _pages
        if self._cache is not None:
            return self._cache
        if _pages is None:
            from taskloom.tools._fetch import PageCache  # the fetcher loads at first use

            _pages = PageCache()
        return _pages

    def permission_target(self, params: WebFetchInput, ctx: ToolContext) -> str | None:
        """The URL: ``WebFetch(domain:…)`` rules match its host."""
        return params.url

    async def call(self, params: WebFetchInput, ctx: ToolContext) -> ToolResult:
        """Fetch (or take from the cache), then ask the small model."""
        from taskloom.tools._fetch import FetchError, Redirect, checked_url, fetch

        started = time.monotonic()
        model = agent_model(ctx)
        if model is None:
            return tool_error("WebFetch needs the calling agent's model: call it from a session")
        try:
            url = checked_url(params.url)
            page = self.cache.get(url)
            if page is None:
                fetched = await fetch(url)
                if isinstance(fetched, Redirect):
                    return _redirected(fetched, params.prompt, started)
                page = fetched
                self.cache.put(url, page)
        except FetchError as exc:
            return tool_error(str(exc))
        try:
            answer = await _answer(ctx, model, page, params.prompt)
        except ModelError as exc:
            return tool_error(f"WebFetch fetched {page.url} but the model failed: {exc}")
        return ToolResult(
            answer,
            response=responses.web_fetch(
                size=page.bytes,
                code=page.code,
                code_text=page.code_text,
                result=answer,
                duration_ms=_ms(started),
                url=params.url,
            ),
        )


async def _answer(ctx: ToolContext, model: Any, page: Page, prompt: str) -> str:
    content = page.content
    if len(content) > MAX_MARKDOWN_CHARS:
        content = content[:MAX_MARKDOWN_CHARS] + TRUNCATED
    text = f"Web page content:\n---\n{content}\n---\n\n{prompt}\n\n{INSTRUCTIONS}"
    reader, owned = small_model(model, ctx.settings)
    request = ModelRequest(
        model=reader.name,
        system="",
        messages=[Message.user(text)],
        max_tokens=ANSWER_MAX_TOKENS,
        agent_id=ctx.agent_id,
        metadata={"purpose": WEB_FETCH_PURPOSE, "url": page.url},
        deltas=False,
    )
    try:
        answer = await ask(ctx, reader, request)
    finally:
        if owned:
            await reader.aclose()
    return answer.text().strip() or "No response from model"


def _redirected(redirect: Redirect, prompt: str, started: float) -> ToolResult:
    # Claude Code's words: the model fetches the new URL itself, so rules see its host.
    text = (
        "REDIRECT DETECTED: The URL redirects to a different host.\n\n"
        f"Original URL: {redirect.original_url}\n"
        f"Redirect URL: {redirect.redirect_url}\n"
        f"Status: {redirect.code} {redirect.code_text}\n\n"
        "To complete your request, I need to fetch content from the redirected URL. Please use "
        "WebFetch again with these parameters:\n"
        f'- url: "{redirect.redirect_url}"\n'
        f'- prompt: "{prompt}"'
    )
    response = responses.web_fetch(
        size=len(text.encode()),
        code=redirect.code,
        code_text=redirect.code_text,
        result=text,
        duration_ms=_ms(started),
        url=redirect.original_url,
    )
    return ToolResult(text, response=response)


def _ms(started: float) -> int:
    return round((time.monotonic() - started) * 1000)
