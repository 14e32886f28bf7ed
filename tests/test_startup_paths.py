"""What start-up leaves out of the first request's path, without changing what is sent.

Tool input models are built lazily and the core tools' schemas are written out; the request
body for the core tools must stay byte for byte what it was when the schemas were generated
(``request_body_core_tools.json`` holds that body).
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import clean_env
from taskloom.messages import Message
from taskloom.models import _http
from taskloom.models.anthropic import AnthropicModel
from taskloom.models.base import ModelRequest
from taskloom.tools.base import Tool, generated_schema, input_key
from taskloom.tools.registry import core_tools

STORED_BODY = Path(__file__).with_name("request_body_core_tools.json")
#: Tools whose schemas are written out (at least these).
STATIC = ("Bash", "Glob", "Grep", "Read", "Edit", "Write")


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _offered_tool_classes() -> list[type[Tool[Any]]]:
    """Every built-in tool class a session offers (core tools of both profiles, agents,
    worktrees, the web tools)."""
    from taskloom.agents.agent_tool import AgentTool
    from taskloom.agents.send_message import SendMessageTool
    from taskloom.agents.workflow_tool import WorkflowTool
    from taskloom.tools.web_fetch import WebFetch
    from taskloom.tools.web_search import WebSearch
    from taskloom.tools.worktree_tools import EnterWorktreeTool, ExitWorktreeTool

    core = [type(t) for t in [*core_tools(), *core_tools("jobs")]]
    worktrees = [EnterWorktreeTool, ExitWorktreeTool]
    return [*core, AgentTool, WorkflowTool, SendMessageTool, *worktrees, WebFetch, WebSearch]


def test_static_schemas_are_the_generated_ones_byte_for_byte() -> None:
    classes = _offered_tool_classes()
    # Every tool offered at start-up has its schema written out.
    assert [c.name for c in classes if c.static_schema is None] == []
    assert set(STATIC) <= {c.name for c in classes}
    for tool in classes:
        assert tool.static_schema is not None
        model, schema = tool.static_schema
        assert model == input_key(tool)
        # Key order included: the request body is serialised in this order.
        assert _dumps(schema) == _dumps(generated_schema(tool.Input)), tool.name


def test_request_body_for_the_core_tools_is_unchanged() -> None:
    model = AnthropicModel("claude-sonnet-4-5", api_key="test", base_url="http://127.0.0.1:9")
    tools = [t.spec() for t in core_tools() if t.name in STATIC]
    request = ModelRequest(
        model="", system="You are a test.", messages=[Message.user("hi")], tools=tools
    )
    body = model.request_body(request)
    assert _dumps(body) + "\n" == STORED_BODY.read_text(encoding="utf-8")


def test_a_static_schema_is_not_used_for_another_input_model() -> None:
    bash = next(t for t in core_tools() if t.name == "Bash")
    write = next(t for t in core_tools() if t.name == "Write")

    class Renamed(type(bash)):  # type: ignore[misc]
        Input = write.Input

    assert _dumps(Renamed().input_schema()) == _dumps(generated_schema(write.Input))


def test_input_schema_returns_a_copy() -> None:
    tool = next(t for t in core_tools() if t.name == "Read")
    tool.input_schema()["properties"].clear()
    assert tool.input_schema()["properties"]


def test_offering_the_core_tools_builds_no_input_model() -> None:
    code = (
        "from taskloom.tools.registry import core_tools\n"
        "tools = core_tools()\n"
        "specs = [t.spec() for t in tools if t.static_schema is not None]\n"
        "built = [t.name for t in tools if t.static_schema is not None"
        " and t.Input.__pydantic_complete__]\n"
        "print(built)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_a_whole_run_without_tool_calls_builds_no_input_model(tmp_path: Path) -> None:
    # Through the Harness, with every tool of a session offered in the request: offering
    # them must not build a model (only validating a call does).
    code = (
        "import asyncio, taskloom\n"
        "from taskloom.testing import ScriptedModel, Turn\n"
        "from taskloom.tools.base import ToolInput\n"
        "def every(cls):\n"
        "    for sub in cls.__subclasses__():\n"
        "        yield sub\n"
        "        yield from every(sub)\n"
        "model = ScriptedModel([Turn(text='done')])\n"
        "print(asyncio.run(taskloom.run('hi', model=model, cwd='.')))\n"
        "print(sorted(model.requests[0].tools and {t.name for t in model.requests[0].tools}))\n"
        "print(sorted(c.__name__ for c in every(ToolInput) if c.__pydantic_complete__))\n"
    )
    env = {**clean_env(), "TASKLOOM_HOME": str(tmp_path / "home")}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    answer, offered, built = proc.stdout.splitlines()
    assert answer == "done"
    assert {"Agent", "SendMessage", "TaskOutput", "TaskStop", "EnterWorktree"} <= set(eval(offered))
    assert built == "[]"


def test_lazily_built_input_models_still_validate() -> None:
    tool = next(t for t in core_tools() if t.name == "Bash")
    ok = tool.validate({"command": "ls", "timeout": 5})
    assert not isinstance(ok, Tool) and getattr(ok, "command", None) == "ls"
    bad = tool.validate({"command": "ls", "timeout": 0, "extra": 1})
    assert getattr(bad, "is_error", False)
    assert "timeout" in bad.content and "extra: unexpected field" in bad.content  # type: ignore[union-attr]


def test_tls_context_is_prefetched_for_the_first_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_http, "_tls_prefetch", None)
    model = AnthropicModel("claude-sonnet-4-5", api_key="test", base_url="http://127.0.0.1:9")
    pending = _http._tls_prefetch
    assert pending is not None
    context = pending.take()
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    client = model._transport.get_client()
    assert _http._tls_prefetch is None  # taken by that client; the next one builds its own
    assert isinstance(client, httpx.AsyncClient)


def test_a_model_given_a_client_prefetches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_http, "_tls_prefetch", None)
    client = httpx.AsyncClient()
    AnthropicModel("claude-sonnet-4-5", api_key="test", client=client)
    assert _http._tls_prefetch is None


def test_a_failed_prefetch_leaves_the_context_to_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_http, "_tls_prefetch", None)

    def broken(*args: object, **kwargs: object) -> ssl.SSLContext:
        raise OSError("no CA bundle")

    monkeypatch.setattr(httpx, "create_ssl_context", broken)
    _http.prefetch_tls_context()
    assert _http._take_tls_context() is True
    assert _http._take_tls_context() is True  # nothing pending: httpx's default


def test_the_platform_line_is_what_platform_says() -> None:
    import platform

    from taskloom.prompts import environment

    assert f"Platform: {platform.system().lower()}\n" in environment(Path.cwd())
