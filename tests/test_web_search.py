"""WebSearch: the Anthropic API's server-side search (through the fake server), a configured
endpoint (a local server), and not offered with neither."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fake_web_search import SERVER_TOOL, FakeSearchingServer
from taskloom.events import ToolDone
from taskloom.messages import Message, ServerToolUseBlock, TextBlock, WebSearchResultBlock
from taskloom.models.anthropic import AnthropicModel
from taskloom.models.base import WEB_SEARCH_PURPOSE, MessageComplete, ModelRequest
from taskloom.testing import FunctionModel, ToolCall, Turn
from taskloom.tools.web_search import REMINDER, formatted
from web_server import Page, WebServer

RESULTS = [
    ("asyncio — Python docs", "https://docs.python.org/3/library/asyncio.html"),
    ("asyncio tutorial", "https://realpython.com/async-io-python/"),
]


@pytest.fixture(autouse=True)
def _anthropic_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSearchingServer]:
    with FakeSearchingServer(RESULTS, commentary="asyncio is in the standard library.") as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
        yield server


def search_call(**fields: Any) -> dict[str, Any]:
    return {"tool_calls": [("WebSearch", {"query": "python asyncio docs", **fields})]}


async def run_session(cwd: Path, model: Any, settings: dict[str, Any]) -> list[ToolDone]:
    import taskloom

    allowed = {"permissions": {"allow": ["WebSearch"]}, **settings}
    async with taskloom.Harness(model=model, cwd=cwd, settings=json.dumps(allowed)) as h:
        return [e async for e in h.run("go") if isinstance(e, ToolDone)]


# --- the server-side search ------------------------------------------------------------------


async def test_the_api_search_answer_keeps_its_server_tool_blocks(
    api: FakeSearchingServer,
) -> None:
    request = ModelRequest(
        model="claude-sonnet-4-5",
        system="s",
        messages=[Message.user("Perform a web search for the query: asyncio")],
        server_tools=[{"type": SERVER_TOOL, "name": "web_search", "max_uses": 8}],
    )
    async with AnthropicModel("claude-sonnet-4-5") as model, model.stream(request) as events:
        (done,) = [e async for e in events if isinstance(e, MessageComplete)]
    text, call, found, cited = done.message.content
    assert isinstance(text, TextBlock) and isinstance(cited, TextBlock)
    assert cited.text == "asyncio is in the standard library."
    assert isinstance(call, ServerToolUseBlock) and call.input == {"query": "asyncio"}
    assert isinstance(found, WebSearchResultBlock) and found.tool_use_id == call.id
    assert isinstance(found.content, list) and found.content[0]["url"] == RESULTS[0][1]
    # Sent back (a conversation going on from it), the blocks are as the API gave them.
    wire = done.message.wire()["content"]
    assert wire[1] == {"type": "server_tool_use", "id": call.id, "name": "web_search",
                       "input": {"query": "asyncio"}}  # fmt: skip
    assert wire[2]["type"] == "web_search_tool_result" and wire[2]["content"][0]["page_age"]
    assert api.requests[0].body["tools"] == [
        {"type": SERVER_TOOL, "name": "web_search", "max_uses": 8}
    ]


async def test_websearch_runs_the_apis_search_and_answers_in_claude_codes_format(
    tmp_path: Path, api: FakeSearchingServer
) -> None:
    api.add_turn(**search_call(allowed_domains=["docs.python.org"]))
    api.add_turn(text="done")
    (done,) = await run_session(tmp_path, "sonnet", {})
    main, search, _ = (r.body for r in api.requests)
    assert "WebSearch" in [t["name"] for t in main["tools"]]
    assert search["tools"] == [
        {
            "type": SERVER_TOOL,
            "name": "web_search",
            "max_uses": 8,
            "allowed_domains": ["docs.python.org"],
        }
    ]
    assert search["messages"][0]["content"][0]["text"] == (
        "Perform a web search for the query: python asyncio docs"
    )
    assert search["system"] == "You are an assistant for performing a web search tool use"
    links = [{"title": RESULTS[0][0], "url": RESULTS[0][1]}]
    assert done.result.content == (
        'Web search results for query: "python asyncio docs"\n\n'
        "Let me search.\n\n"
        f"Links: {json.dumps(links, ensure_ascii=False, separators=(',', ':'))}\n\n"
        "asyncio is in the standard library.\n\n"
        f"\n{REMINDER}"
    )
    response = done.result.response
    assert response is not None and response["query"] == "python asyncio docs"
    assert response["results"][1]["content"] == links


async def test_a_search_error_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeSearchingServer(RESULTS, error_code="max_uses_exceeded") as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
        server.add_turn(**search_call())
        server.add_turn(text="done")
        (done,) = await run_session(tmp_path, "sonnet", {})
    assert "Web search error: max_uses_exceeded" in done.result.content


def test_no_links_is_said() -> None:
    text = formatted("q", [{"tool_use_id": "x", "content": []}])
    assert "No links found." in text


# --- a configured endpoint --------------------------------------------------------------------


async def test_a_configured_endpoint_is_searched_and_its_results_filtered(tmp_path: Path) -> None:
    reply = {
        "results": [
            {"title": title, "url": url, "content": f"about {title}"} for title, url in RESULTS
        ]
    }
    asked: list[ModelRequest] = []

    def respond(request: ModelRequest) -> Any:
        asked.append(request)
        if len(asked) == 1:
            return Turn(
                tool_calls=(
                    ToolCall(
                        "WebSearch",
                        {"query": "python asyncio", "blocked_domains": ["realpython.com"]},
                    ),
                )
            )
        return "done"

    with WebServer({"/search": Page(json.dumps(reply), "application/json")}) as web:
        settings = {"webSearchUrl": web.url("/search")}
        (done,) = await run_session(tmp_path, FunctionModel(respond), settings)
        (hit,) = web.requests
    assert "WebSearch" in [t.name for t in asked[0].tools]
    assert "q=python+asyncio" in hit.path and "format=json" in hit.path
    text = done.result.content
    assert RESULTS[0][1] in text and RESULTS[1][1] not in text  # blocked
    assert f"- {RESULTS[0][0]}: about {RESULTS[0][0]}" in text
    assert all(r.metadata.get("purpose") != WEB_SEARCH_PURPOSE for r in asked)


async def test_websearch_is_not_offered_with_neither(tmp_path: Path) -> None:
    asked: list[ModelRequest] = []
    model = FunctionModel(lambda request: asked.append(request) or "done")
    await run_session(tmp_path, model, {})
    names = [t.name for t in asked[0].tools]
    assert "WebFetch" in names and "WebSearch" not in names


async def test_both_domain_lists_at_once_are_an_error(tmp_path: Path) -> None:
    asked: list[ModelRequest] = []

    def respond(request: ModelRequest) -> Any:
        asked.append(request)
        if len(asked) == 1:
            both = {"query": "x y", "allowed_domains": ["a.com"], "blocked_domains": ["b.com"]}
            return Turn(tool_calls=(ToolCall("WebSearch", both),))
        return "done"

    settings = {"webSearchUrl": "http://127.0.0.1:9/search"}
    (done,) = await run_session(tmp_path, FunctionModel(respond), settings)
    assert done.result.is_error
    assert "Cannot specify both allowed_domains and blocked_domains" in done.result.content


async def test_a_bad_endpoint_setting_is_named(tmp_path: Path) -> None:
    asked: list[ModelRequest] = []

    def respond(request: ModelRequest) -> Any:
        asked.append(request)
        if len(asked) == 1:
            return Turn(tool_calls=(ToolCall("WebSearch", {"query": "x y"}),))
        return "done"

    (done,) = await run_session(tmp_path, FunctionModel(respond), {"webSearchUrl": "ftp://x"})
    assert done.result.is_error and "webSearchUrl must be an http(s) URL" in done.result.content
