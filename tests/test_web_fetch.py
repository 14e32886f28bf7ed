"""WebFetch against a local HTTP server (never the network): rules by domain, the small model's
answer, redirects, bounds, the cache, and a fetch the engine's cancel ends."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fake_servers import FakeAnthropicServer
from helpers import TIME_FACTOR, json_lines, run_cli, wait_until, write_turns
from taskloom.engine import Engine
from taskloom.engine_config import EngineConfig
from taskloom.events import ToolDone
from taskloom.messages import ToolResultBlock
from taskloom.models.base import WEB_FETCH_PURPOSE, ModelRequest
from taskloom.permissions import PermissionPolicy
from taskloom.permissions.rules import PermissionRequest
from taskloom.tasks.runtime import TaskRuntime
from taskloom.testing import FunctionModel, ScriptedModel, ToolCall, Turn
from taskloom.tools._fetch import (
    MAX_CONTENT_BYTES,
    FetchError,
    Page,
    PageCache,
    checked_url,
    same_site,
)
from taskloom.tools.web_fetch import INSTRUCTIONS, WebFetch
from web_server import Page as Reply
from web_server import WebServer

HTML = """<html><head><title>Widgets</title><style>h1 {color: red}</style>
<script>var secret = "not for the model";</script></head>
<body><h1>Widget manual</h1><p>Widgets turn <b>left</b>. See <a href="/more">more</a>.</p>
</body></html>"""


@pytest.fixture
def web() -> Iterator[WebServer]:
    routes = {
        "/page": Reply(HTML),
        "/plain": Reply("just text", "text/plain"),
        "/moved": Reply(status=301, location="/page"),
        "/away": Reply(status=302, location="/page"),  # made absolute to another host below
        "/missing": Reply("gone", "text/plain", 404),
        "/image": Reply(b"\x89PNG\r\n\x1a\n", "image/png"),
        "/huge": Reply(b"x" * (MAX_CONTENT_BYTES + 1), "text/plain"),
        "/slow": Reply(stall=True),
    }
    with WebServer(routes) as server:
        # A redirect from localhost to 127.0.0.1: the same server, another host for the rules.
        server.routes["/away"] = Reply(status=302, location=server.url("/page"))
        yield server


def fetch_call(url: str, prompt: str = "What do widgets do?") -> Turn:
    return Turn(tool_calls=(ToolCall("WebFetch", {"url": url, "prompt": prompt}),))


async def run_calls(cwd: Path, model: Any, **config: Any) -> list[str]:
    """Run ``model`` in one engine offering WebFetch; the text of each tool result."""
    config.setdefault("tools", [WebFetch(cache=PageCache())])
    async with TaskRuntime() as rt:
        engine = Engine(
            EngineConfig(model=model, system_prompt="", owner=rt.session_id, cwd=cwd, **config),
            rt,
        )
        return [e.result.content async for e in engine.run("go") if isinstance(e, ToolDone)]


# --- the URL's checks, the redirect rule, the cache ------------------------------------------


def test_http_is_upgraded_except_on_this_machine() -> None:
    assert checked_url("http://example.com/a?b=1") == "https://example.com/a?b=1"
    assert checked_url("http://example.com:8080/a") == "https://example.com:8080/a"
    assert checked_url("https://example.com/") == "https://example.com/"
    for local in ("http://localhost:8000/x", "http://127.0.0.1:9/x", "http://[::1]:9/x"):
        assert checked_url(local) == local


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://example.com/f", "http:// or https://"),
        ("example.com", "http:// or https://"),
        ("https://user:pw@example.com/", "user name or password"),
        ("https://example.com/" + "a" * 2000, "longer than 2000"),
        ("http://example.com:99999/", "Invalid URL"),
    ],
)
def test_bad_urls_are_refused_naming_why(url: str, says: str) -> None:
    with pytest.raises(FetchError, match=says):
        checked_url(url)


def test_redirects_are_followed_on_the_same_site_only() -> None:
    assert same_site("https://example.com/a", "https://EXAMPLE.com/b")
    # Rules name hosts exactly: www. added or dropped is another host (told, not followed).
    assert not same_site("https://example.com/a", "https://www.example.com/b")
    assert not same_site("https://www.example.com/a", "https://example.com/b")
    assert not same_site("https://example.com/a", "https://docs.example.com/b")
    assert not same_site("https://example.com/a", "http://example.com/b")
    assert not same_site("https://example.com/a", "https://example.com:8443/b")
    assert not same_site("https://example.com/a", "https://u:p@example.com/b")


def test_the_cache_forgets_after_its_time_and_past_its_size() -> None:
    now = [0.0]
    cache = PageCache(ttl=900, max_bytes=10, now=lambda: now[0])
    page = Page("https://a/", 200, "OK", 6, "text/plain", "123456")
    cache.put("https://a/", page)
    now[0] = 899.0
    assert cache.get("https://a/") is page
    now[0] = 900.0
    assert cache.get("https://a/") is None
    cache.put("https://a/", page)
    cache.put("https://b/", Page("https://b/", 200, "OK", 6, "text/plain", "abcdef"))
    # Twelve characters are over the ten kept: the least recently used went.
    assert cache.get("https://a/") is None
    assert cache.get("https://b/") is not None


# --- through a session: the rules by domain, the small model's answer ------------------------


async def test_an_allowed_domain_is_fetched_and_answered_a_denied_one_refused(
    tmp_path: Path, web: WebServer
) -> None:
    import taskloom

    allowed, denied = web.url("/page", host="localhost"), web.url("/page")
    asked: list[ModelRequest] = []
    results: list[str] = []
    offered: list[str] = []

    def respond(request: ModelRequest) -> Turn | str:
        if request.metadata.get("purpose") == WEB_FETCH_PURPOSE:
            asked.append(request)
            return "Widgets turn left."
        offered[:] = [t.name for t in request.tools]
        last = request.messages[-1]
        results.extend(b.text() for b in last.content if isinstance(b, ToolResultBlock))
        turns = [fetch_call(allowed), fetch_call(denied), fetch_call(allowed)]
        n = sum(1 for m in request.messages if m.role == "assistant")
        return turns[n] if n < len(turns) else "done"

    settings = (
        '{"permissions": {"allow": ["WebFetch(domain:localhost)"], '
        '"deny": ["WebFetch(domain:127.0.0.1)"]}}'
    )
    model = FunctionModel(respond)
    async with taskloom.Harness(model=model, cwd=tmp_path, settings=settings) as h:
        [e async for e in h.run("go")]

    assert "WebFetch" in offered and "WebSearch" not in offered  # no search on this model
    first, refused, again = results
    assert first == "Widgets turn left."
    assert "denied" in refused and "WebFetch(domain:127.0.0.1)" in refused
    assert again == "Widgets turn left."
    # The small model saw the page as Markdown (no markup, no script), the prompt, the rules.
    (question, *_) = asked
    text = question.messages[-1].text()
    assert "# Widget manual" in text and "Widgets turn **left**. See [more](/more)." in text
    assert "<h1>" not in text and "not for the model" not in text
    assert text.startswith("Web page content:\n---\n") and INSTRUCTIONS in text
    assert "What do widgets do?" in text
    # Fetched once from localhost (the third call came from the cache), never from 127.0.0.1.
    assert web.hits("/page", "localhost") == 1
    assert web.hits("/page", "127.0.0.1") == 0
    assert web.requests[0].headers["accept"] == "text/markdown, text/html, */*"


async def test_the_small_model_on_anthropic_is_haiku_with_the_sessions_credentials(
    tmp_path: Path, web: WebServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import taskloom

    with FakeAnthropicServer() as api:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.delenv("ANTHROPIC_SMALL_FAST_MODEL", raising=False)
        api.add_turn(tool_calls=[("WebFetch", {"url": web.url("/plain"), "prompt": "Say it"})])
        api.add_turn(text="It says: just text.")
        api.add_turn(text="done")
        settings = '{"permissions": {"allow": ["WebFetch(domain:127.0.0.1)"]}}'
        async with taskloom.Harness(model="sonnet", cwd=tmp_path, settings=settings) as h:
            events = [e async for e in h.run("go")]
            charged = h.runtime.usage.models()
        main, small, _ = (r.body for r in api.requests)
    names = [t["name"] for t in main["tools"]]
    assert "WebFetch" in names and "WebSearch" in names  # Anthropic: its own search too
    assert small["model"] == "claude-haiku-4-5" and "tools" not in small
    assert "just text" in small["messages"][0]["content"][0]["text"]
    assert api.requests[1].headers["x-api-key"] == "test-key"
    (done,) = [e for e in events if isinstance(e, ToolDone)]
    assert done.result.content == "It says: just text."
    assert done.result.response is not None
    assert done.result.response["code"] == 200 and done.result.response["bytes"] == 9
    # The small model's tokens are the session's too.
    assert charged["claude-haiku-4-5"].usage.output_tokens > 0


async def test_the_small_model_setting_names_another_model(
    tmp_path: Path, web: WebServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import taskloom

    with FakeAnthropicServer() as api:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
        monkeypatch.setenv("ANTHROPIC_SMALL_FAST_MODEL", "claude-from-env")
        api.add_turn(tool_calls=[("WebFetch", {"url": web.url("/plain"), "prompt": "?"})])
        api.add_turn(text="ok")
        api.add_turn(text="done")
        settings = (
            '{"smallFastModel": "claude-3-5-haiku-latest", '
            '"permissions": {"allow": ["WebFetch(domain:127.0.0.1)"]}}'
        )
        async with taskloom.Harness(model="sonnet", cwd=tmp_path, settings=settings) as h:
            [e async for e in h.run("go")]
        assert api.requests[1].body["model"] == "claude-3-5-haiku-latest"


# --- redirects, bounds, failures --------------------------------------------------------------


async def test_a_redirect_on_the_same_host_is_followed_another_host_reported(
    tmp_path: Path, web: WebServer
) -> None:
    model = ScriptedModel(
        [
            fetch_call(web.url("/moved", "localhost")),
            fetch_call(web.url("/away", "localhost")),
            "ok",
        ]
    )
    followed, reported = await run_calls(tmp_path, model)
    # A scripted model answers WebFetch's question with the page it was given.
    assert followed == "Widgets\n\n# Widget manual\n\nWidgets turn **left**. See [more](/more)."
    assert reported.startswith("REDIRECT DETECTED: The URL redirects to a different host.")
    assert f"Redirect URL: {web.url('/page')}" in reported
    assert "Status: 302 Found" in reported
    assert f'- url: "{web.url("/page")}"' in reported
    assert '- prompt: "What do widgets do?"' in reported
    assert web.hits("/page", "127.0.0.1") == 0  # not followed: the model must ask for it
    assert len(model.side_requests) == 1


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/missing", "Request failed with status code 404"),
        ("/image", "not image/png content"),
        ("/huge", "larger than the 10 MB WebFetch reads"),
    ],
)
async def test_failures_are_tool_errors_naming_why(
    tmp_path: Path, web: WebServer, path: str, says: str
) -> None:
    model = ScriptedModel([fetch_call(web.url(path)), "ok"])
    (result,) = await run_calls(tmp_path, model)
    assert result.startswith("<tool_use_error>") and says in result
    assert model.side_requests == []  # no model was asked about a page not read


async def test_a_refused_host_is_never_connected_to(tmp_path: Path, web: WebServer) -> None:
    policy = PermissionPolicy.from_settings(
        {"permissions": {"deny": ["WebFetch(domain:*.localhost)", "WebFetch(domain:localhost)"]}},
        project_root=tmp_path,
    )
    model = ScriptedModel([fetch_call(web.url("/page", "localhost")), "ok"])
    (result,) = await run_calls(tmp_path, model, permissions=policy)
    assert "denied" in result and web.requests == []


async def test_the_engines_cancel_ends_a_fetch_that_runs_on(tmp_path: Path, web: WebServer) -> None:
    model = ScriptedModel([fetch_call(web.url("/slow")), "ok"])
    run = asyncio.create_task(run_calls(tmp_path, model))
    await wait_until(web.stalled.is_set, what="the slow page to start")
    started = time.monotonic()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(run, 10 * TIME_FACTOR)
    assert time.monotonic() - started < 5 * TIME_FACTOR
    assert model.side_requests == []


# --- permissions: plan mode may fetch (it asks), a suggestion names the domain ----------------


def test_fetch_tools_ask_in_plan_mode_and_suggest_a_domain_rule(tmp_path: Path) -> None:
    url = "https://docs.example.com/a"
    request = PermissionRequest("WebFetch", "fetch", url, tmp_path, {"url": url})
    for mode in ("plan", "default"):
        decision = PermissionPolicy.from_settings({}, mode=mode, project_root=tmp_path).decide(
            request
        )
        assert decision.behavior == "ask", mode
        assert decision.suggestion == "WebFetch(domain:docs.example.com)"
    bash = PermissionRequest("Bash", "execute", "ls", tmp_path, {"command": "ls"})
    plan = PermissionPolicy.from_settings({}, mode="plan", project_root=tmp_path)
    assert plan.decide(bash).behavior == "deny"  # unchanged for what does act here


# --- end to end: taskloom -p with a rule by domain --------------------------------------------


@pytest.mark.e2e
def test_print_mode_fetches_the_allowed_domain_and_refuses_the_denied_one(
    tmp_path: Path, web: WebServer
) -> None:
    allowed, denied = web.url("/page", host="localhost"), web.url("/page")
    prompt = "What do widgets do?"
    calls = [{"name": "WebFetch", "input": {"url": u, "prompt": prompt}} for u in (allowed, denied)]
    model = write_turns(tmp_path / "turns.yaml", [{"tool_calls": calls}, {"text": "done"}])
    settings = json.dumps(
        {
            "permissions": {
                "allow": ["WebFetch(domain:localhost)"],
                "deny": ["WebFetch(domain:127.0.0.1)"],
            }
        }
    )
    done = run_cli(
        "-p", "go", "--output-format", "stream-json", "--verbose", "--model", model,
        "--settings", settings, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = {
        block["tool_use_id"]: block
        for line in json_lines(done.stdout)
        if line.get("type") == "user"
        for block in line["message"]["content"]
        if block.get("type") == "tool_result"
    }
    fetched, refused = results.values()
    # A scripted model answers WebFetch's question with the page as Markdown.
    assert "# Widget manual" in str(fetched["content"]) and not fetched.get("is_error")
    assert refused["is_error"] and "WebFetch(domain:127.0.0.1)" in str(refused["content"])
    assert web.hits("/page", "localhost") == 1 and web.hits("/page", "127.0.0.1") == 0
