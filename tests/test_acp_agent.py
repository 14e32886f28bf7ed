"""``taskloom acp`` in process: the official ACP client library against the agent.

The agent (:class:`taskloom.acp.server.TaskloomAgent`) and a client (the library's
``ClientSideConnection`` with :class:`Editor`) are connected over the library's in-memory
transports; the model is a ScriptedModel. What is checked is what an editor sees: the
initialize answer, the session's modes and commands, streamed updates with tool calls (their
kinds, locations, diffs and results), permission requests, cancel, and a load's replay.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from helpers import TIME_FACTOR, needs, run_processes, wait_until
from taskloom.harness import Options
from taskloom.testing import ScriptedModel, ToolCall, Turn

pytestmark = [needs("acp")]

TIMEOUT = 30 * TIME_FACTOR


class Editor:
    """The client side: records updates; answers permission requests from a list of choices."""

    def __init__(self, choices: list[str] | None = None) -> None:
        self.updates: list[Any] = []
        self.asked: list[Any] = []
        self.choices = list(choices or [])

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> Any:
        import acp

        self.asked.append((tool_call, [o.option_id for o in options]))
        choice = self.choices.pop(0) if self.choices else "reject_once"
        return acp.RequestPermissionResponse(
            outcome=acp.schema.AllowedOutcome(outcome="selected", option_id=choice)
        )

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    def of(self, kind: str) -> list[Any]:
        """The updates of one kind (``agent_message_chunk``, ``tool_call``...)."""
        return [u for u in self.updates if u.session_update == kind]

    def text(self) -> str:
        """The agent's message text so far."""
        return "".join(u.content.text for u in self.of("agent_message_chunk"))


@contextlib.asynccontextmanager
async def connected(options: Options, editor: Editor) -> AsyncIterator[tuple[Any, Any]]:
    """A client connection to a TaskloomAgent built from ``options``, and the agent."""
    from acp._transport import memory_transport_pair
    from acp.agent.connection import AgentSideConnection
    from acp.client.connection import ClientSideConnection

    from taskloom.acp.server import TaskloomAgent

    agent = TaskloomAgent(options)
    left, right = memory_transport_pair()
    agent_side = AgentSideConnection(agent, left)  # type: ignore[arg-type]
    client = ClientSideConnection(editor, right)  # type: ignore[arg-type]
    try:
        yield client, agent
    finally:
        await agent.aclose()
        await client.close()
        await agent_side.close()


async def _new(client: Any, cwd: Path) -> Any:
    import acp

    await asyncio.wait_for(client.initialize(protocol_version=acp.PROTOCOL_VERSION), TIMEOUT)
    return await asyncio.wait_for(client.new_session(cwd=str(cwd), mcp_servers=[]), TIMEOUT)


async def test_initialize_says_what_taskloom_offers(tmp_path: Path) -> None:
    import acp

    async with connected(Options(model=ScriptedModel([])), Editor()) as (client, _agent):
        init = await asyncio.wait_for(
            client.initialize(protocol_version=acp.PROTOCOL_VERSION), TIMEOUT
        )
    caps = init.agent_capabilities
    assert init.protocol_version == acp.PROTOCOL_VERSION
    assert caps.load_session is True
    assert caps.prompt_capabilities.embedded_context is True
    assert caps.prompt_capabilities.image is True
    assert caps.mcp_capabilities.http is True
    assert init.agent_info.name == "taskloom"
    assert init.auth_methods == []


async def test_a_prompt_streams_its_text_and_ends_its_turn(tmp_path: Path) -> None:
    import acp

    editor = Editor()
    model = ScriptedModel([Turn(text="Hello from taskloom.")])
    async with connected(Options(model=model, cwd=tmp_path), editor) as (client, _agent):
        session = await _new(client, tmp_path)
        assert session.modes.current_mode_id == "default"
        assert {m.id for m in session.modes.available_modes} >= {"default", "plan", "acceptEdits"}
        said = await asyncio.wait_for(
            client.prompt(session_id=session.session_id, prompt=[acp.text_block("hi")]),
            TIMEOUT,
        )
        assert said.stop_reason == "end_turn"
        assert editor.text() == "Hello from taskloom."
        await wait_until(lambda: bool(editor.of("available_commands_update")), TIMEOUT)
        names = [c.name for c in editor.of("available_commands_update")[0].available_commands]
        assert "compact" in names


def _prompt(client: Any, session_id: str, text: str) -> Any:
    import acp

    return asyncio.wait_for(
        client.prompt(session_id=session_id, prompt=[acp.text_block(text)]), TIMEOUT
    )


async def test_read_and_edit_are_tool_calls_with_kinds_locations_and_a_diff(
    tmp_path: Path,
) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("alpha\nbeta\n")
    model = ScriptedModel(
        [
            Turn(tool_calls=(ToolCall("Read", {"file_path": str(target)}, id="read1"),)),
            Turn(
                tool_calls=(
                    ToolCall(
                        "Edit",
                        {"file_path": str(target), "old_string": "beta", "new_string": "gamma"},
                        id="edit1",
                    ),
                )
            ),
            Turn(
                tool_calls=(
                    ToolCall(
                        "TodoWrite",
                        {
                            "todos": [
                                {
                                    "content": "Check",
                                    "activeForm": "Checking",
                                    "status": "in_progress",
                                }
                            ]
                        },
                        id="todo1",
                    ),
                )
            ),
            Turn(text="Done."),
        ]
    )
    editor = Editor()
    options = Options(model=model, cwd=tmp_path, permission_mode="acceptEdits")
    async with connected(options, editor) as (client, _agent):
        session = await _new(client, tmp_path)
        said = await _prompt(client, session.session_id, "edit it")
    assert said.stop_reason == "end_turn"
    assert target.read_text() == "alpha\ngamma\n"
    starts = {u.tool_call_id: u for u in editor.of("tool_call")}
    assert starts["read1"].kind == "read"
    assert starts["read1"].locations[0].path == str(target)
    edit = starts["edit1"]
    assert edit.kind == "edit"
    (diff,) = edit.content
    assert (diff.type, diff.path, diff.old_text, diff.new_text) == (
        "diff",
        str(target),
        "beta",
        "gamma",
    )
    read_states = [u.status for u in editor.of("tool_call_update") if u.tool_call_id == "read1"]
    assert read_states == ["in_progress", "completed"]
    first = editor.updates.index(starts["read1"])
    assert first < next(
        i for i, u in enumerate(editor.updates) if getattr(u, "status", None) == "in_progress"
    )
    ends = {u.tool_call_id: u for u in editor.of("tool_call_update") if u.status}
    assert ends["read1"].status == "completed"
    assert "beta" in ends["read1"].content[0].content.text
    assert ends["edit1"].status == "completed"
    (plan,) = editor.of("plan")
    assert [(e.content, e.status) for e in plan.entries] == [("Check", "in_progress")]
    assert editor.text() == "Done."


async def test_permission_rejected_then_allowed_always_is_not_asked_again(
    tmp_path: Path,
) -> None:
    command = {"command": "echo hello-acp"}
    model = ScriptedModel(
        [
            Turn(tool_calls=(ToolCall("Bash", command, id="b1"),)),
            Turn(text="It was refused."),
            Turn(tool_calls=(ToolCall("Bash", command, id="b2"),)),
            Turn(text="It ran."),
            Turn(tool_calls=(ToolCall("Bash", command, id="b3"),)),
            Turn(text="It ran again."),
        ]
    )
    editor = Editor(choices=["reject_once", "allow_always"])
    (tmp_path / ".git").mkdir()  # the project root: where the rule is saved
    async with connected(Options(model=model, cwd=tmp_path), editor) as (client, _agent):
        session = await _new(client, tmp_path)
        await _prompt(client, session.session_id, "one")
        assert len(editor.asked) == 1
        (call, offered) = editor.asked[0]
        assert call.tool_call_id == "b1" and call.kind == "execute"
        assert offered == ["allow_once", "allow_always", "reject_once", "reject_always"]
        ends = {u.tool_call_id: u for u in editor.of("tool_call_update") if u.status}
        assert ends["b1"].status == "failed"
        await _prompt(client, session.session_id, "two")
        ends = {u.tool_call_id: u for u in editor.of("tool_call_update") if u.status}
        assert ends["b2"].status == "completed"
        assert "hello-acp" in ends["b2"].content[0].content.text
        await _prompt(client, session.session_id, "three")
    assert len(editor.asked) == 2  # the third call was allowed by the saved rule
    ends = {u.tool_call_id: u for u in editor.of("tool_call_update") if u.status}
    assert ends["b3"].status == "completed"
    assert "Bash(echo:*)" in (tmp_path / ".taskloom" / "settings.local.json").read_text()


LONG = "sleep 4317"


def _long() -> list[Any]:
    return run_processes(lambda p: LONG in " ".join(p.info.get("cmdline") or []))


async def test_cancel_ends_the_turn_and_kills_its_command(tmp_path: Path) -> None:
    model = ScriptedModel(
        [Turn(tool_calls=(ToolCall("Bash", {"command": LONG}, id="long"),)), Turn(text="after")]
    )
    editor = Editor()
    options = Options(model=model, cwd=tmp_path, permission_mode="bypassPermissions")
    async with connected(options, editor) as (client, _agent):
        session = await _new(client, tmp_path)
        running = asyncio.ensure_future(_prompt(client, session.session_id, "run it"))
        await wait_until(lambda: bool(_long()), TIMEOUT, "the long command to start")
        await client.cancel(session_id=session.session_id)
        said = await running
        assert said.stop_reason == "cancelled"
        await wait_until(lambda: not _long(), TIMEOUT, "the long command to be killed")
        said = await _prompt(client, session.session_id, "go on")
        assert said.stop_reason == "end_turn"
        assert editor.text().endswith("after")


async def test_a_finished_session_is_replayed_by_load(tmp_path: Path) -> None:
    target = tmp_path / "a.txt"
    target.write_text("content-of-a\n")
    model = ScriptedModel(
        [
            Turn(tool_calls=(ToolCall("Read", {"file_path": str(target)}, id="r1"),)),
            Turn(text="It says content-of-a."),
        ]
    )
    first = Editor()
    async with connected(Options(model=model, cwd=tmp_path), first) as (client, _agent):
        session = await _new(client, tmp_path)
        await _prompt(client, session.session_id, "read a.txt")
    second = Editor()
    async with connected(Options(model=ScriptedModel([]), cwd=tmp_path), second) as (client, _):
        import acp

        await client.initialize(protocol_version=acp.PROTOCOL_VERSION)
        loaded = await asyncio.wait_for(
            client.load_session(cwd=str(tmp_path), session_id=session.session_id, mcp_servers=[]),
            TIMEOUT,
        )
        assert loaded.modes.current_mode_id == "default"
    kinds = [
        u.session_update for u in second.updates if u.session_update != "available_commands_update"
    ]
    assert kinds == ["user_message_chunk", "tool_call", "tool_call_update", "agent_message_chunk"]
    assert second.updates[0].content.text == "read a.txt"
    assert second.of("tool_call")[0].tool_call_id == "r1"
    assert second.text() == "It says content-of-a."


async def test_set_mode_switches_the_permission_mode(tmp_path: Path) -> None:
    editor = Editor()
    async with connected(Options(model=ScriptedModel([]), cwd=tmp_path), editor) as (client, agent):
        session = await _new(client, tmp_path)
        await client.set_session_mode(session_id=session.session_id, mode_id="plan")
        assert str(agent.sessions[session.session_id].harness.policy.mode) == "plan"
        await wait_until(lambda: bool(editor.of("current_mode_update")), TIMEOUT)
        assert editor.of("current_mode_update")[0].current_mode_id == "plan"


async def test_commands_are_advertised_and_a_slash_prompt_runs_one(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    commands = tmp_path / ".claude" / "commands"
    commands.mkdir(parents=True)
    (commands / "greet.md").write_text(
        "---\ndescription: Greet someone\nargument-hint: NAME\n---\nSay hello to $ARGUMENTS.\n"
    )
    model = ScriptedModel([Turn(text="Hello, Ada.")])
    editor = Editor()
    async with connected(Options(model=model, cwd=tmp_path), editor) as (client, _agent):
        session = await _new(client, tmp_path)
        await wait_until(lambda: bool(editor.of("available_commands_update")), TIMEOUT)
        (update,) = editor.of("available_commands_update")
        advertised = {c.name: c for c in update.available_commands}
        assert advertised["greet"].description == "Greet someone"
        assert advertised["greet"].input.root.hint == "NAME"
        await _prompt(client, session.session_id, "/greet Ada")
    sent = str(model.requests[0].messages[-1].content)
    assert "Say hello to Ada." in sent


def test_the_clients_mcp_servers_become_the_sessions() -> None:
    import json

    from acp.schema import EnvVariable, HttpHeader, HttpMcpServer, McpServerStdio

    from taskloom.acp.server import mcp_config

    servers = [
        McpServerStdio(
            name="files",
            command="mcp-files",
            args=["--root", "/x"],
            env=[EnvVariable(name="A", value="1")],
        ),
        HttpMcpServer(
            type="http",
            name="web",
            url="http://localhost:9/mcp",
            headers=[HttpHeader(name="K", value="v")],
        ),
    ]
    (config,) = mcp_config(servers)
    assert json.loads(config) == {
        "mcpServers": {
            "files": {"command": "mcp-files", "args": ["--root", "/x"], "env": {"A": "1"}},
            "web": {"type": "http", "url": "http://localhost:9/mcp", "headers": {"K": "v"}},
        }
    }
    assert mcp_config([]) == []


async def test_stop_reasons_follow_the_model_and_the_turn_limit(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            Turn(text="I won't.", stop_reason="refusal"),
            Turn(tool_calls=(ToolCall("Glob", {"pattern": "*"}),)),
            Turn(text="never reached"),
        ]
    )
    options = Options(model=model, cwd=tmp_path, max_turns=1, permission_mode="bypassPermissions")
    async with connected(options, Editor()) as (client, _agent):
        session = await _new(client, tmp_path)
        assert (await _prompt(client, session.session_id, "a")).stop_reason == "refusal"
        assert (await _prompt(client, session.session_id, "b")).stop_reason == "max_turn_requests"


async def test_resources_are_given_as_context(tmp_path: Path) -> None:
    import acp

    model = ScriptedModel([Turn(text="Seen.")])
    async with connected(Options(model=model, cwd=tmp_path), Editor()) as (client, _agent):
        session = await _new(client, tmp_path)
        blocks = [
            acp.text_block("look"),
            acp.resource_link_block("a.py", f"file://{tmp_path}/a.py"),
            acp.resource_block(acp.embedded_text_resource("file:///b.py", "B = 2")),
        ]
        said = await asyncio.wait_for(
            client.prompt(session_id=session.session_id, prompt=blocks), TIMEOUT
        )
        assert said.stop_reason == "end_turn"
    sent = str(model.requests[0].messages[-1].content)
    assert f"@{tmp_path}/a.py" in sent
    assert '<context ref="/b.py">\nB = 2\n</context>' in sent.replace("\\n", "\n")


#: A 1x1 PNG, base64.
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


async def test_an_image_reaches_the_model_in_the_prompts_order(tmp_path: Path) -> None:
    import acp

    model = ScriptedModel([Turn(text="A red dot.")])
    async with connected(Options(model=model, cwd=tmp_path), Editor()) as (client, _agent):
        session = await _new(client, tmp_path)
        blocks = [acp.text_block("what is"), acp.image_block(PNG, "image/png"), acp.text_block("?")]
        said = await asyncio.wait_for(
            client.prompt(session_id=session.session_id, prompt=blocks), TIMEOUT
        )
        assert said.stop_reason == "end_turn"
    second = Editor()  # kept in the transcript: a load shows it again
    async with connected(Options(model=ScriptedModel([]), cwd=tmp_path), second) as (client, _):
        await client.initialize(protocol_version=acp.PROTOCOL_VERSION)
        await asyncio.wait_for(
            client.load_session(cwd=str(tmp_path), session_id=session.session_id, mcp_servers=[]),
            TIMEOUT,
        )
    shown = [u.content for u in second.of("user_message_chunk")]
    assert [c.type for c in shown] == ["text", "image", "text"]
    assert (shown[1].data, shown[1].mime_type) == (PNG, "image/png")
    sent = model.requests[0].messages[-1].wire()["content"]
    assert [b["type"] for b in sent] == ["text", "image", "text"]
    assert sent[1]["source"] == {"type": "base64", "media_type": "image/png", "data": PNG}
    assert (sent[0]["text"], sent[2]["text"]) == ("what is", "?")


@pytest.mark.parametrize(
    ("image", "named"),
    [
        ((PNG, "image/bmp"), "'image/bmp', which the API does not take"),
        (("not base64!", "image/png"), "not valid base64"),
        (("A" * (5 * 1024 * 1024 + 4), "image/png"), "over the API's limit of 5,242,880"),
        (("", "image/png"), "the image's data is empty"),  # a uri-only block has no data
        ((PNG, "image/jpeg"), "of type image/png, not the image/jpeg it is said to be"),
        (("QUJD", "image/png"), "not an image of type image/png"),
    ],
)
async def test_an_image_the_api_would_refuse_is_refused_and_the_session_goes_on(
    tmp_path: Path, image: tuple[str, str], named: str
) -> None:
    import acp

    model = ScriptedModel([Turn(text="Still here.")])
    async with connected(Options(model=model, cwd=tmp_path), Editor()) as (client, _agent):
        session = await _new(client, tmp_path)
        with pytest.raises(acp.RequestError) as refused:
            await asyncio.wait_for(
                client.prompt(
                    session_id=session.session_id,
                    prompt=[acp.text_block("see"), acp.image_block(*image)],
                ),
                TIMEOUT,
            )
        assert (await _prompt(client, session.session_id, "go on")).stop_reason == "end_turn"
    assert refused.value.code == -32602
    assert "prompt block 1" in str(refused.value.data)
    assert named in str(refused.value.data)
    assert len(model.requests) == 1  # the refused prompt never reached the model


async def test_loading_an_unknown_session_is_an_error_and_serving_goes_on(tmp_path: Path) -> None:
    import acp

    model = ScriptedModel([Turn(text="Still here.")])
    async with connected(Options(model=model, cwd=tmp_path), Editor()) as (client, _agent):
        await client.initialize(protocol_version=acp.PROTOCOL_VERSION)
        with pytest.raises(acp.RequestError) as refused:
            await asyncio.wait_for(
                client.load_session(cwd=str(tmp_path), session_id="no-such-one", mcp_servers=[]),
                TIMEOUT,
            )
        session = await asyncio.wait_for(
            client.new_session(cwd=str(tmp_path), mcp_servers=[]), TIMEOUT
        )
        assert (await _prompt(client, session.session_id, "hi")).stop_reason == "end_turn"
    assert refused.value.code == -32602
    assert "no-such-one" in str(refused.value.data)


async def test_cancelling_an_unknown_session_changes_nothing(tmp_path: Path) -> None:
    model = ScriptedModel(
        [Turn(tool_calls=(ToolCall("Bash", {"command": LONG}, id="long"),)), Turn(text="after")]
    )
    options = Options(model=model, cwd=tmp_path, permission_mode="bypassPermissions")
    async with connected(options, Editor()) as (client, _agent):
        session = await _new(client, tmp_path)
        running = asyncio.ensure_future(_prompt(client, session.session_id, "run it"))
        await wait_until(lambda: bool(_long()), TIMEOUT, "the long command to start")
        await client.cancel(session_id="task-no-such-child")  # a notification: no answer
        await client.cancel(session_id=session.session_id + "-not")
        # The running turn is untouched: the cancel of its own session is what ends it.
        assert not running.done() and _long()
        await client.cancel(session_id=session.session_id)
        assert (await running).stop_reason == "cancelled"
        await wait_until(lambda: not _long(), TIMEOUT, "the long command to be killed")


async def test_a_prompt_sent_during_a_turn_runs_after_it_in_order(tmp_path: Path) -> None:
    gate = asyncio.Event()

    async def first_turn_waits(request: Any) -> Any:
        if len(model.requests) == 1:
            await gate.wait()
        return Turn(text=f"answer {len(model.requests)}")

    from taskloom.testing import FunctionModel

    model = FunctionModel(first_turn_waits)
    editor = Editor()
    async with connected(Options(model=model, cwd=tmp_path), editor) as (client, _agent):
        session = await _new(client, tmp_path)
        first = asyncio.ensure_future(_prompt(client, session.session_id, "one"))
        await wait_until(lambda: len(model.requests) == 1, TIMEOUT, "the first request")
        second = asyncio.ensure_future(_prompt(client, session.session_id, "two"))
        await asyncio.sleep(0.2 * TIME_FACTOR)  # the second had its chance to jump the queue
        assert len(model.requests) == 1 and not second.done()
        gate.set()
        assert (await first).stop_reason == "end_turn"
        assert (await second).stop_reason == "end_turn"
    asked = [r.messages[-1].text() for r in model.requests]
    assert asked == ["one", "two"]
    assert editor.text() == "answer 1answer 2"
