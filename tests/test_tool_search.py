"""ToolSearch and deferred tools: many MCP tools offered by name, their schemas found on demand.

The acceptance runs a real MCP server of 200 tools (tests/mcp_many_server.py) in a real
session; only the model is a function.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import harness
from mcp_many_server import tool_name
from taskloom.errors import UserError
from taskloom.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from taskloom.models.base import ModelRequest
from taskloom.testing import FunctionModel, ToolCall, Turn
from taskloom.tools.base import Tool, ToolContext, ToolResult
from taskloom.tools.deferral import (
    DEFERRED_BUILTINS,
    loaded_tools,
    request_messages,
    request_tools,
    tool_search_mode,
    with_tool_search,
)
from taskloom.tools.registry import core_tools
from taskloom.tools.tool_search import NO_MATCH, ToolSearchTool, defined_names

SERVER = Path(__file__).with_name("mcp_many_server.py")


def mcp_config(tmp_path: Path, count: int = 200) -> None:
    servers = {"many": {"command": sys.executable, "args": [str(SERVER), str(count)]}}
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": servers}))


def results(request: ModelRequest) -> list[ToolResultBlock]:
    last = request.messages[-1]
    return [b for b in last.content if isinstance(b, ToolResultBlock)]


def call(name: str, args: dict[str, Any]) -> Turn:
    return Turn(tool_calls=(ToolCall(name, args),))


async def test_two_hundred_mcp_tools_are_found_and_called_with_few_schemas_sent(
    tmp_path: Path,
) -> None:
    mcp_config(tmp_path)
    requests: list[ModelRequest] = []
    picked = f"mcp__many__{tool_name(137)}"
    never_searched = f"mcp__many__{tool_name(199)}"

    def respond(request: ModelRequest) -> Turn | str:
        requests.append(request)
        step = len(requests)
        if step == 1:
            return call("ToolSearch", {"query": f"select:{picked}"})
        if step == 2:
            return call(picked, {"value": "one"})
        if step == 3:
            return call("ToolSearch", {"query": "+slack archive", "max_results": 3})
        if step == 4:
            found = defined_names(results(request)[0].text())
            return Turn(tool_calls=tuple(ToolCall(n, {"value": "two"}) for n in found))
        if step == 5:
            return call(never_searched, {"value": "three"})
        return "done"

    async with harness(tmp_path, FunctionModel(respond)) as h:
        [event async for event in h.run("use the workspace tools")]

    assert len(requests) == 6
    # Every request carries fewer than 20 schemas, ToolSearch among them; no MCP tool but
    # those found.
    assert all(len(r.tools) < 20 for r in requests), [len(r.tools) for r in requests]
    first = requests[0]
    assert "ToolSearch" in {t.name for t in first.tools}
    assert not [t.name for t in first.tools if t.name.startswith("mcp__")]
    assert not {t.name for t in first.tools} & DEFERRED_BUILTINS
    # The deferred tools are named in the first user message, sorted, and it stays the same.
    announced = first.messages[0].content[0]
    assert isinstance(announced, TextBlock)
    names = announced.text.split("\n")
    assert names[0] == "<available-deferred-tools>" and names[-1] == "</available-deferred-tools>"
    mcp_names = [n for n in names if n.startswith("mcp__many__")]
    assert len(mcp_names) == 200 and names[1:-1] == sorted(names[1:-1])
    assert {"NotebookEdit", "WebFetch"} <= set(names)
    assert all(r.messages[0] == first.messages[0] for r in requests)
    # select: defines the tool; from the next request on its schema is sent, after the others.
    answer = results(requests[1])[0]
    assert answer.text().startswith("<functions>\n<function>{")
    assert defined_names(answer.text()) == [picked]
    assert requests[1].tools[-1].name == picked
    assert requests[1].tools[-1].input_schema["required"] == ["value"]
    # The model could call it: the server answered.
    assert results(requests[2])[0].text() == f"{tool_name(137)} got one"
    # A keyword search finds slack's archive tools only (+slack is required).
    found = defined_names(results(requests[3])[0].text())
    assert len(found) == 3 and all(re.match(r"mcp__many__slack_archive_\d+$", n) for n in found)
    assert [b.text() for b in results(requests[4])] == [
        f"{n[len('mcp__many__') :]} got two" for n in found
    ]
    # A deferred tool called before any search found it runs, and is sent from then on.
    assert results(requests[5])[0].text() == f"{tool_name(199)} got three"
    assert requests[5].tools[-1].name == never_searched
    # Each request's tools begin with the previous request's, byte for byte: the cached
    # prefix only grows at its end.
    for before, after in itertools.pairwise(requests):
        assert after.tools[: len(before.tools)] == before.tools
    assert [t.name for t in requests[-1].tools][-5:] == [picked, *found, never_searched]


async def test_a_few_mcp_tools_are_sent_whole(tmp_path: Path) -> None:
    mcp_config(tmp_path, count=5)
    seen: list[ModelRequest] = []

    def respond(request: ModelRequest) -> str:
        seen.append(request)
        return "done"

    async with harness(tmp_path, FunctionModel(respond)) as h:
        [event async for event in h.run("hi")]

    names = {t.name for t in seen[0].tools}
    assert "ToolSearch" not in names and f"mcp__many__{tool_name(4)}" in names
    assert "<available-deferred-tools>" not in str(seen[0].messages[0].content)


async def test_the_setting_turns_it_off_and_the_environment_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mcp_config(tmp_path, count=200)
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps({"toolSearch": False}))
    seen: list[ModelRequest] = []

    def respond(request: ModelRequest) -> str:
        seen.append(request)
        return "done"

    async with harness(tmp_path, FunctionModel(respond)) as h:
        [event async for event in h.run("hi")]
    monkeypatch.setenv("ENABLE_TOOL_SEARCH", "true")
    async with harness(tmp_path, FunctionModel(respond)) as h:
        [event async for event in h.run("hi")]

    off, on = seen
    assert len([t for t in off.tools if t.name.startswith("mcp__")]) == 200
    assert "ToolSearch" in {t.name for t in on.tools} and len(on.tools) < 20


def test_modes_and_bad_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENABLE_TOOL_SEARCH", raising=False)
    assert tool_search_mode({}) == 10.0
    assert tool_search_mode({"toolSearch": "auto:5"}) == 5.0
    assert tool_search_mode({"toolSearch": True}) is True
    assert tool_search_mode({"toolSearch": "false"}) is False
    with pytest.raises(UserError, match=r"the setting toolSearch must be .* got 'sometimes'"):
        tool_search_mode({"toolSearch": "sometimes"})
    monkeypatch.setenv("ENABLE_TOOL_SEARCH", "auto:200")
    with pytest.raises(UserError, match="the environment variable ENABLE_TOOL_SEARCH"):
        tool_search_mode({"toolSearch": True})


class Fake(Tool[Any]):
    """A tool with a given name and description (the search reads only those)."""

    Input = ToolSearchTool.Input

    def __init__(self, name: str, description: str) -> None:
        self.name = name  # type: ignore[misc]
        self.description = description  # type: ignore[misc]

    async def call(self, params: Any, ctx: ToolContext) -> ToolResult:
        return ToolResult("")


def searcher() -> ToolSearchTool:
    tools = [
        Fake("Read", "Reads a file."),
        Fake("NotebookEdit", "Edit Jupyter notebook cells."),
        Fake("mcp__slack__send_message", "Send a message to a channel."),
        Fake("mcp__slack__list_channels", "List the channels."),
        Fake("mcp__email__send_message", "Send an email message."),
        Fake("mcp__github__create_issue", "Open an issue; messages welcome."),
    ]
    return ToolSearchTool(tools, [t.name for t in tools if t.name != "Read"])


def test_keyword_scores_and_query_forms() -> None:
    search = searcher()
    # A word of the name counts more than a word of the description.
    assert search.search("send message", 5)[:2] == [
        "mcp__slack__send_message",
        "mcp__email__send_message",
    ]
    # +slack: only slack's tools, ranked by the other words.
    assert search.search("+slack send", 5) == [
        "mcp__slack__send_message",
        "mcp__slack__list_channels",
    ]
    assert search.search("+slack channels", 5)[0] == "mcp__slack__list_channels"
    assert search.search("+github send", 5) == ["mcp__github__create_issue"]
    assert search.search("notebook jupyter", 5) == ["NotebookEdit"]
    assert search.search("mcp__github", 5) == ["mcp__github__create_issue"]
    assert search.search("NOTEBOOKEDIT", 5) == ["NotebookEdit"]
    assert search.search("send", 1) == ["mcp__slack__send_message"]
    assert search.search("weather", 5) == []
    # select: finds tools by name (a tool already offered too), each once, ignoring case.
    assert search.select(["notebookedit", " Read ", "NotebookEdit", "nope"]) == [
        "NotebookEdit",
        "Read",
    ]


async def test_answers_and_errors(ctx: ToolContext) -> None:
    search = searcher()

    found = await search.call(search.validate({"query": "select:mcp__slack__list_channels"}), ctx)
    none = await search.call(search.validate({"query": "select:nothing"}), ctx)
    empty = await search.call(search.validate({"query": "  "}), ctx)
    bad = search.validate({"query": "x", "max_results": 0})

    body = json.loads(
        found.content.split("\n")[1].removeprefix("<function>").removesuffix("</function>")
    )
    assert list(body) == ["description", "name", "parameters"]
    assert body["name"] == "mcp__slack__list_channels"
    assert found.data == {
        "matches": ["mcp__slack__list_channels"],
        "query": "select:mcp__slack__list_channels",
        "total_deferred_tools": 5,
    }
    assert none.content == NO_MATCH and not none.is_error
    assert empty.is_error and "query must not be empty" in empty.content
    assert isinstance(bad, ToolResult) and "max_results" in bad.content


def test_loaded_tools_come_from_search_answers_and_calls_in_order() -> None:
    deferred = {"mcp__a__x", "mcp__a__y", "mcp__a__z"}

    def use(id_: str, name: str) -> Message:
        return Message(role="assistant", content=[ToolUseBlock(id=id_, name=name, input={})])

    def answer(id_: str, text: str, error: bool = False) -> Message:
        block = ToolResultBlock(tool_use_id=id_, content=text, is_error=error)
        return Message(role="user", content=[block])

    line = '<function>{"description": "", "name": "%s", "parameters": {}}</function>'
    messages = [
        Message.user("go"),
        use("1", "ToolSearch"),
        answer("1", f"<functions>\n{line % 'mcp__a__y'}\n</functions>"),
        use("2", "mcp__a__z"),
        answer("2", "ok"),
        use("3", "ToolSearch"),
        answer("3", f"<functions>\n{line % 'mcp__a__x'}\n</functions>", error=True),
        use("4", "Read"),
        answer("4", f"<functions>\n{line % 'mcp__a__x'}\n</functions>"),  # not a search's
    ]
    assert loaded_tools(messages, deferred) == ["mcp__a__y", "mcp__a__z"]


def test_without_tool_search_requests_are_as_they_were() -> None:
    tools = core_tools()
    messages = [Message.user("hi")]

    assert request_tools(tools, messages) == [t.spec() for t in tools]
    assert request_messages(tools, messages) == messages
    # Always on: the built-in tools Claude Code defers are deferred even without MCP tools.
    searched = with_tool_search(tools, "claude-sonnet-4-5", {"toolSearch": True})
    sent = {s.name for s in request_tools(searched, messages)}
    assert "ToolSearch" in sent and "NotebookEdit" not in sent and "Bash" in sent
    first = request_messages(searched, messages)[0]
    assert first.content[1:] == messages[0].content  # the conversation's own, kept as it is
    assert messages[0].content == [TextBlock(text="hi")]


def test_the_written_out_schema_is_the_generated_one() -> None:
    from taskloom.tools.base import generated_schema, input_key

    assert ToolSearchTool.static_schema is not None
    model, schema = ToolSearchTool.static_schema
    assert model == input_key(ToolSearchTool)
    dumps = json.dumps  # key order included: the request body is serialised in this order
    assert dumps(schema) == dumps(generated_schema(ToolSearchTool.Input))


async def test_a_subagent_with_the_sessions_many_mcp_tools_searches_them_too(
    tmp_path: Path,
) -> None:
    from helpers import main_context
    from taskloom.agents.service import SpawnRequest

    mcp_config(tmp_path)
    requests: list[ModelRequest] = []
    wanted = f"mcp__many__{tool_name(42)}"

    def respond(request: ModelRequest) -> Turn | str:
        requests.append(request)
        if len(requests) == 1:
            return call("ToolSearch", {"query": f"select:{wanted}"})
        if len(requests) == 2:
            return call(wanted, {"value": "sub"})
        return "reported"

    async with harness(tmp_path, FunctionModel(respond)) as h:
        result = await h.agents.spawn(
            SpawnRequest(description="d", prompt="use the tools", subagent_type="general-purpose"),
            main_context(h),
        )

    assert result.status == "completed"
    assert all(len(r.tools) < 20 for r in requests), [len(r.tools) for r in requests]
    assert "ToolSearch" in {t.name for t in requests[0].tools}
    assert requests[1].tools[-1].name == wanted
    assert results(requests[2])[0].text() == f"{tool_name(42)} got sub"


def test_a_search_within_fewer_tools_finds_only_those() -> None:
    narrowed = searcher().within({"Read", "mcp__slack__send_message", "NotebookEdit"})

    assert narrowed.deferred == ("NotebookEdit", "mcp__slack__send_message")
    assert narrowed.search("send message", 5) == ["mcp__slack__send_message"]
    assert narrowed.select(["mcp__email__send_message", "Read"]) == ["Read"]


@pytest.mark.e2e
def test_a_print_run_finds_and_calls_a_deferred_mcp_tool(tmp_path: Path) -> None:
    import subprocess

    import yaml

    from helpers import clean_env, scripted_argv

    mcp_config(tmp_path)
    wanted = f"mcp__many__{tool_name(13)}"  # drive_get_013
    turns = [
        {"tool_calls": [{"name": "ToolSearch", "input": {"query": "+drive get"}}]},
        {"tool_calls": [{"name": wanted, "input": {"value": "cli"}}]},
        {"text": "done"},
    ]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"turns": turns}))
    proc = subprocess.run(
        scripted_argv(tmp_path / "s.yaml", "--allowedTools", "mcp__many"),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=clean_env(),
    )

    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert "ToolSearch" in events[0]["tools"] and wanted in events[0]["tools"]
    answers = [
        block
        for event in events
        if event["type"] == "user"
        for block in event["message"]["content"]
        if block.get("type") == "tool_result"
    ]
    assert wanted in defined_names(answers[0]["content"])
    assert answers[1]["content"] == f"{tool_name(13)} got cli" and not answers[1]["is_error"]
    assert events[-1]["result"] == "done"
