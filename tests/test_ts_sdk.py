"""The real TypeScript Agent SDK drives taskloom against a fake Anthropic server.

Each test runs ``tests/ts/sdk_session.mjs`` once: a node program that calls the SDK's
``query()`` with ``pathToClaudeCodeExecutable`` pointed at taskloom (as tests/test_sdk.py points
the Python SDK at it), does the steps the test gives (send a prompt, wait for a message, call
a ``Query`` method) and prints, one JSON object a line, every message the program received,
every callback it served and every method's answer. The test asserts on those lines and on
what the model server received.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fake_servers import FakeAnthropicServer, ToolCall
from helpers import TIME_FACTOR, alive, clean_env, node_modules, wait_until

pytestmark = pytest.mark.e2e

TASKLOOM = str(Path(sys.executable).with_name("taskloom"))
SCRIPT = Path(__file__).resolve().parent / "ts" / "sdk_session.mjs"
MODEL = "claude-sonnet-4-5"


@dataclass
class Run:
    """What the node program printed."""

    lines: list[dict[str, Any]]

    def kind(self, kind: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line["kind"] == kind]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [line["message"] for line in self.kind("message")]

    def of(self, type_: str, subtype: str | None = None) -> list[dict[str, Any]]:
        return [
            m
            for m in self.messages
            if m["type"] == type_ and (subtype is None or m.get("subtype") == subtype)
        ]

    @property
    def results(self) -> list[dict[str, Any]]:
        return self.of("result")

    def calls(self, name: str) -> list[dict[str, Any]]:
        return [c for c in self.kind("call") if c["name"] == name]

    def call(self, name: str) -> dict[str, Any]:
        (call,) = self.calls(name)
        return call


def drive(
    server: FakeAnthropicServer,
    cwd: Path,
    *,
    prompt: str | None = None,
    steps: list[dict[str, Any]] | None = None,
    options: dict[str, Any] | None = None,
    **extra: Any,
) -> Run:
    """Run one SDK session on taskloom; the lines printed (the program must have finished)."""
    env = {
        **clean_env(),
        "ANTHROPIC_BASE_URL": server.url,
        "ANTHROPIC_API_KEY": "test",
        "TASKLOOM_HOME": str(cwd / "home"),
    }
    config = {
        "nodeModules": str(node_modules()),
        "options": {
            "pathToClaudeCodeExecutable": TASKLOOM,
            "cwd": str(cwd),
            "env": env,
            "model": MODEL,
            **(options or {}),
        },
        "steps": steps or [],
        "timeoutMs": int(20_000 * TIME_FACTOR),
        **({"prompt": prompt} if prompt is not None else {}),
        **extra,
    }
    proc = subprocess.run(
        ["node", str(SCRIPT), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=90 * TIME_FACTOR,
        cwd=cwd,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines and lines[-1]["kind"] == "done", (proc.stdout[-4000:], proc.stderr[-4000:])
    return Run(lines)


def tool_results(server: FakeAnthropicServer) -> list[dict[str, Any]]:
    """Every tool result the model was sent, in order (each request's newest message)."""
    return [
        block
        for request in server.requests
        for block in request.body["messages"][-1]["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]


def system_text(request: Any) -> str:
    system = request.body.get("system") or ""
    if isinstance(system, list):
        return "\n\n".join(block["text"] for block in system)
    return str(system)


async def test_query_yields_init_the_answer_and_a_success_result(tmp_path: Path) -> None:
    with FakeAnthropicServer() as server:
        server.add_turn(text="hello from taskloom")
        run = drive(server, tmp_path, prompt="hi", steps=[{"call": "initializationResult"}])
    (init,) = run.of("system", "init")
    (assistant,) = run.of("assistant")
    (result,) = run.results
    assert init["claude_code_version"] == "2.1.328" and "Bash" in init["tools"]
    assert [b["text"] for b in assistant["message"]["content"]] == ["hello from taskloom"]
    assert (result["subtype"], result["is_error"], result["result"]) == (
        "success",
        False,
        "hello from taskloom",
    )
    assert result["session_id"] == init["session_id"]
    answer = run.call("initializationResult")["value"]
    assert answer["claude_code_version"] == "2.1.328"
    assert {a["name"] for a in answer["agents"]} >= {"Explore", "general-purpose"}
    assert {"default", "opus", "sonnet", "haiku"} <= {m["value"] for m in answer["models"]}
    assert answer["account"]["apiKeySource"] == "ANTHROPIC_API_KEY"
    assert isinstance(answer["commands"], list)
    # No system prompt of the program's own ([""]): a short one, not a coding agent's.
    assert "coding agent" not in system_text(server.requests[0])
    assert "taskloom" in system_text(server.requests[0])


async def test_two_turns_from_an_async_iterable_are_one_session(tmp_path: Path) -> None:
    with FakeAnthropicServer() as server:
        server.add_turn(text="one")
        server.add_turn(text="two")
        steps = [
            {"send": "first"},
            {"wait": {"type": "result"}},
            {"send": "second"},
            {"wait": {"type": "result"}},
        ]
        run = drive(server, tmp_path, steps=steps)
    first, second = run.results
    assert [first["result"], second["result"]] == ["one", "two"]
    assert first["session_id"] == second["session_id"]
    history = server.requests[1].body["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "user"]


async def test_can_use_tool_allows_denies_and_rewrites_input(tmp_path: Path) -> None:
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[ToolCall("Bash", {"command": "echo asked"}, id="toolu_a")])
        refused_write = {"file_path": str(tmp_path / "no.txt"), "content": "x"}
        server.add_turn(tool_calls=[ToolCall("Write", refused_write, id="toolu_w")])
        server.add_turn(text="done")
        rules = {
            "Bash": {"behavior": "allow", "updatedInput": {"command": "echo rewritten"}},
            "Write": {"behavior": "deny", "message": "no writing, says the program"},
        }
        run = drive(server, tmp_path, prompt="go", canUseTool=rules)
    asked = run.kind("can_use_tool")
    assert [(a["name"], a["tool_use_id"]) for a in asked] == [
        ("Bash", "toolu_a"),
        ("Write", "toolu_w"),
    ]
    ran, refused = tool_results(server)
    assert "rewritten" in str(ran["content"]) and "asked" not in str(ran["content"])
    assert refused["is_error"] and "no writing, says the program" in str(refused["content"])
    assert not (tmp_path / "no.txt").exists()
    (result,) = run.results
    assert result["result"] == "done"
    assert [d["tool_name"] for d in result["permission_denials"]] == ["Write"]


async def test_an_in_process_mcp_tool_is_offered_called_and_listed(tmp_path: Path) -> None:
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("mcp__calc__add", {"a": 2, "b": 3})])
        server.add_turn(text="five")
        steps = [{"send": "add"}, {"wait": {"type": "result"}}, {"call": "mcpServerStatus"}]
        run = drive(
            server,
            tmp_path,
            steps=steps,
            sdkMcp=True,
            options={"allowedTools": ["mcp__calc__add"]},
        )
    offered = [t["name"] for t in server.requests[0].body["tools"]]
    assert "mcp__calc__add" in offered
    assert [c["args"] for c in run.kind("tool_called")] == [{"a": 2, "b": 3}]
    (result,) = tool_results(server)
    assert "sum is 5" in str(result["content"]) and not result.get("is_error")
    (status,) = run.call("mcpServerStatus")["value"]
    assert (status["name"], status["status"]) == ("calc", "connected")
    assert [t["name"] for t in status["tools"]] == ["add"]


async def test_interrupt_stops_a_long_command_and_the_session_goes_on(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    command = f"echo $$ > {pid_file}; exec sleep 30"
    with FakeAnthropicServer() as server:
        server.add_turn(text="Waiting.", tool_calls=[("Bash", {"command": command})])
        server.add_turn(text="after the interrupt")
        steps = [
            {"send": "run it"},
            {"wait": {"type": "system", "subtype": "task_started"}},
            {"call": "interrupt"},
            {"wait": {"type": "result"}},
            {"send": "go on"},
            {"wait": {"type": "result"}},
        ]
        run = drive(server, tmp_path, steps=steps, options={"allowedTools": ["Bash"]})
    stopped, after = run.results
    assert stopped["subtype"] == "error_during_execution" and stopped["is_error"]
    assert stopped["errors"] and "result" not in stopped
    asked = run.call("interrupt")["t"] - run.call("interrupt")["ms"]
    stopped_at = next(
        line["t"] for line in run.kind("message") if line["message"]["type"] == "result"
    )
    assert stopped_at - asked < 2000 * TIME_FACTOR, stopped_at - asked
    pid = int(pid_file.read_text())
    await wait_until(lambda: not alive(pid), 5, "the interrupted command's process to go")
    assert after["result"] == "after the interrupt"
    (answer,) = tool_results(server)
    assert answer["is_error"]  # the interrupted call was answered: the conversation is valid


@pytest.mark.parametrize(
    ("options", "subtype", "error"),
    [
        ({"maxTurns": 1}, "error_max_turns", "Reached maximum number of turns (1)"),
        ({"maxBudgetUsd": 0.0001}, "error_max_budget_usd", "Reached maximum budget ($0.0001)"),
    ],
)
async def test_limits_end_the_query_with_their_error_result(
    tmp_path: Path, options: dict[str, Any], subtype: str, error: str
) -> None:
    with FakeAnthropicServer() as server:
        server.add_turn(text="x", tool_calls=[("Bash", {"command": "echo hi"})])
        server.add_turn(text="never")
        run = drive(server, tmp_path, prompt="go", options={"allowedTools": ["Bash"], **options})
    (result,) = run.results
    assert (result["subtype"], result["is_error"], result["errors"]) == (subtype, True, [error])
    assert "result" not in result
    # The SDK hands the result over, then ends the query with its error (not a TypeError).
    (thrown,) = run.kind("query_error")
    assert error in thrown["error"]


async def test_a_system_prompt_string_replaces_ours(tmp_path: Path) -> None:
    with FakeAnthropicServer() as server:
        server.add_turn(text="arr")
        drive(server, tmp_path, prompt="hi", options={"systemPrompt": "You are a pirate."})
    assert system_text(server.requests[0]) == "You are a pirate."


async def test_the_preset_system_prompt_is_ours_with_the_appended_text(tmp_path: Path) -> None:
    with FakeAnthropicServer() as server:
        server.add_turn(text="ok")
        preset = {"type": "preset", "preset": "claude_code", "append": "Always say arr."}
        drive(server, tmp_path, prompt="hi", options={"systemPrompt": preset})
    system = system_text(server.requests[0])
    assert system.startswith("You are taskloom, a coding agent")
    assert system.endswith("Always say arr.") and str(tmp_path) in system


async def test_a_programmatic_agent_is_called_by_the_model(tmp_path: Path) -> None:
    agents = {
        "counter": {"description": "Counts numbers", "prompt": "You count.", "tools": ["Read"]}
    }
    call = {"description": "count", "prompt": "count to 3", "subagent_type": "counter"}
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("Agent", call)])
        server.add_turn(text="1 2 3")
        server.add_turn(text="it counted")
        steps = [{"call": "supportedAgents"}]
        run = drive(server, tmp_path, prompt="go", steps=steps, options={"agents": agents})
    listed = {a["name"]: a["description"] for a in run.call("supportedAgents")["value"]}
    assert listed["counter"] == "Counts numbers"
    agent_request = server.requests[1].body
    assert system_text(server.requests[1]).startswith("You count.")
    assert [t["name"] for t in agent_request["tools"]] == ["Read"]
    (answer,) = tool_results(server)
    assert "1 2 3" in str(answer["content"])
    assert run.results[-1]["result"] == "it counted"


async def test_set_model_and_set_permission_mode_take_effect(tmp_path: Path) -> None:
    def write(name: str) -> dict[str, Any]:
        return {"tool_calls": [("Write", {"file_path": str(tmp_path / name), "content": "x"})]}

    with FakeAnthropicServer() as server:
        for turn in (write("before.txt"), {"text": "one"}, write("after.txt"), {"text": "two"}):
            server.add_turn(**turn)
        steps = [
            {"send": "write before"},
            {"wait": {"type": "result"}},
            {"call": "setPermissionMode", "args": ["acceptEdits"]},
            {"call": "setModel", "args": ["claude-haiku-4-5"]},
            {"send": "write after"},
            {"wait": {"type": "result"}},
        ]
        refuse = {"Write": {"behavior": "deny", "message": "asked and refused"}}
        run = drive(server, tmp_path, steps=steps, canUseTool=refuse)
    # Before: the program was asked, and said no. After acceptEdits: no question, written.
    assert [a["input"]["file_path"] for a in run.kind("can_use_tool")] == [
        str(tmp_path / "before.txt")
    ]
    assert not (tmp_path / "before.txt").exists() and (tmp_path / "after.txt").exists()
    assert [r.body["model"] for r in server.requests] == [MODEL, MODEL, *["claude-haiku-4-5"] * 2]
    (status,) = run.of("system", "status")
    assert status["permissionMode"] == "acceptEdits"


async def test_stop_task_ends_a_background_command_as_stopped(tmp_path: Path) -> None:
    command = {"command": "sleep 30", "run_in_background": True}
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("Bash", command)])
        server.add_turn(text="started it")
        server.add_turn(text="it was stopped")
        steps = [
            {"send": "start it"},
            {"wait": {"type": "system", "subtype": "task_started"}},
            {"call": "stopTask", "args": ["$task"]},
            {"wait": {"type": "system", "subtype": "task_notification"}},
        ]
        run = drive(server, tmp_path, steps=steps, options={"allowedTools": ["Bash"]})
    (started,) = run.of("system", "task_started")
    (note,) = run.of("system", "task_notification")
    assert (note["task_id"], note["status"]) == (started["task_id"], "stopped")
    updates = [u for u in run.of("system", "task_updated") if u["task_id"] == note["task_id"]]
    assert updates[-1]["patch"]["status"] == "killed"
    assert isinstance(updates[-1]["patch"]["end_time"], int)


async def test_mcp_servers_sent_in_initialize_are_started_from_it(tmp_path: Path) -> None:
    echo = Path(__file__).resolve().parent / "mcp_echo_server.py"
    servers = {
        "echo": {
            "type": "stdio",
            "command": sys.executable,
            "args": [str(echo)],
            "env": {"ECHO_SECRET": "kept off the command line"},
        }
    }
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("mcp__echo__getenv", {"name": "ECHO_SECRET"})])
        server.add_turn(text="read it")
        options = {
            "mcpServers": servers,
            "mcpServersDelivery": "initialize",  # --await-initialize, servers in initialize
            "allowedTools": ["mcp__echo__getenv"],
        }
        steps = [{"call": "initializationResult"}]
        run = drive(server, tmp_path, prompt="go", steps=steps, options=options)
    assert run.call("initializationResult")["value"]["mcp_servers_applied"] is True
    (init,) = run.of("system", "init")
    assert {"name": "echo", "status": "connected"} in init["mcp_servers"]
    (result,) = tool_results(server)
    assert "kept off the command line" in str(result["content"])
    assert run.results[-1]["result"] == "read it"


def texts(request: Any) -> list[str]:
    """Every text the request's messages hold, in order (string contents and text blocks)."""
    out: list[str] = []
    for message in request.body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            out.append(content)
            continue
        out.extend(b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text")
    return out


async def test_hooks_block_a_tool_and_add_context_to_the_prompt(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    hooks = {
        "UserPromptSubmit": [
            {
                "answer": {
                    "hookSpecificOutput": {
                        "hookEventName": "UserPromptSubmit",
                        "additionalContext": "The sky is green today.",
                    }
                }
            }
        ],
        "PreToolUse": [
            {
                "matcher": "Bash",
                "answer": {
                    "hookSpecificOutput": {
                        "hookEventName": "PreToolUse",
                        "permissionDecision": "deny",
                        "permissionDecisionReason": "no shell, says the hook",
                    }
                },
            }
        ],
    }
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("Bash", {"command": f"touch {marker}"})])
        server.add_turn(text="blocked")
        run = drive(server, tmp_path, prompt="go", hooks=hooks, options={"allowedTools": ["Bash"]})
    # query("go"): the SDK sends the prompt as content blocks; the hook still gets its text.
    submitted, pre = run.kind("hook")
    assert (submitted["event"], submitted["input"]["prompt"]) == ("UserPromptSubmit", "go")
    assert submitted["input"]["hook_event_name"] == "UserPromptSubmit"
    (init,) = run.of("system", "init")
    assert {h["input"]["session_id"] for h in (submitted, pre)} == {init["session_id"]}
    assert Path(pre["input"]["transcript_path"]).is_file()
    assert any("The sky is green today." in text for text in texts(server.requests[0]))
    assert pre["event"] == "PreToolUse" and pre["input"]["tool_name"] == "Bash"
    assert pre["input"]["tool_input"] == {"command": f"touch {marker}"}
    (refused,) = tool_results(server)
    assert refused["is_error"] and "no shell, says the hook" in str(refused["content"])
    assert not marker.exists()
    assert run.results[-1]["result"] == "blocked"


async def test_a_post_tool_use_hook_reads_the_commands_stdout(tmp_path: Path) -> None:
    hooks = {"PostToolUse": [{"matcher": "Bash"}]}
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[ToolCall("Bash", {"command": "echo from-bash"}, id="toolu_b")])
        server.add_turn(text="seen")
        run = drive(server, tmp_path, prompt="go", hooks=hooks, options={"allowedTools": ["Bash"]})
    (post,) = run.kind("hook")
    assert post["event"] == "PostToolUse" and post["tool_use_id"] == "toolu_b"
    assert post["input"]["tool_name"] == "Bash"
    assert post["input"]["tool_response"]["stdout"].strip() == "from-bash"
    assert run.results[-1]["result"] == "seen"


async def test_a_background_commands_turn_ends_before_it_and_its_notice_gets_a_turn(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    command = {"command": f"read word < {gate}; echo released $word", "run_in_background": True}
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("Bash", command)])
        server.add_turn(text="started it")
        server.add_turn(text="it finished")
        steps = [
            {"send": "start it"},
            {"wait": {"type": "result"}},
            {"release": str(gate), "text": "now"},
            {"wait": {"type": "system", "subtype": "task_notification"}},
            {"wait": {"type": "result"}},
        ]
        run = drive(server, tmp_path, steps=steps, options={"allowedTools": ["Bash"]})
    first, second = run.results
    # The first turn's result came while the command was held on the gate.
    (released,) = run.kind("released")
    first_at = next(line["t"] for line in run.kind("message") if line["message"] is first)
    assert first_at <= released["t"]
    assert (first["result"], second["result"]) == ("started it", "it finished")
    assert first["session_id"] == second["session_id"]
    (note,) = run.of("system", "task_notification")
    assert note["status"] == "completed"
    assert "released now" in Path(note["output_file"]).read_text()
    # The notification's turn: the model is told, in the request after the first result.
    notice = texts(server.requests[2])[-1]
    assert f"<task-id>{note['task_id']}</task-id>" in notice and "completed" in notice


async def test_list_sessions_and_get_session_messages_find_the_session(tmp_path: Path) -> None:
    assert os.environ["CLAUDE_CONFIG_DIR"].startswith(str(tmp_path))  # conftest's, per test
    with FakeAnthropicServer() as server:
        server.add_turn(text="hello back")
        steps = [
            {"wait": {"type": "result"}},
            {"sdk": "listSessions", "args": [{"dir": str(tmp_path)}]},
            {"sdk": "getSessionMessages", "args": ["$session", {"dir": str(tmp_path)}]},
            {"sdk": "listSessions", "args": [{"dir": str(tmp_path), "includeProgrammatic": False}]},
        ]
        run = drive(server, tmp_path, prompt="hello there", steps=steps)
    (init,) = run.of("system", "init")
    listed, interactive_only = (call["value"] for call in run.calls("listSessions"))
    # The SDK ran taskloom (CLAUDE_CODE_ENTRYPOINT=sdk-ts): a program's session, which a
    # picker of interactive sessions leaves out.
    assert interactive_only == []
    (session,) = listed
    assert session["sessionId"] == init["session_id"]
    assert session["firstPrompt"] == "hello there"
    messages = run.call("getSessionMessages")["value"]
    assert [m["type"] for m in messages] == ["user", "assistant"]
    assert {m["session_id"] for m in messages} == {init["session_id"]}
    assert messages[1]["message"]["content"][0]["text"] == "hello back"
    assert Path(os.environ["CLAUDE_CONFIG_DIR"], "projects").is_dir()


@pytest.mark.parametrize(
    ("how", "same_id"),
    [
        ({"resume": "$first"}, True),
        ({"resume": "$first", "forkSession": True}, False),
        ({"continue": True}, True),
    ],
    ids=["resume", "fork", "continue"],
)
async def test_a_second_query_takes_up_the_first_sessions_messages(
    tmp_path: Path, how: dict[str, Any], same_id: bool
) -> None:
    with FakeAnthropicServer() as server:
        server.add_turn(text="noted: 42")
        server.add_turn(text="it was 42")
        first = drive(server, tmp_path, prompt="remember 42")
        (session_id,) = {r["session_id"] for r in first.results}
        options = {k: session_id if v == "$first" else v for k, v in how.items()}
        steps = [
            {"wait": {"type": "result"}},
            {"sdk": "getSessionMessages", "args": ["$session", {"dir": str(tmp_path)}]},
        ]
        second = drive(server, tmp_path, prompt="what was it?", steps=steps, options=options)
    history = server.requests[1].body["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "user"]
    assert texts(server.requests[1])[-3:] == ["remember 42", "noted: 42", "what was it?"]
    (result,) = second.results
    assert result["result"] == "it was 42"
    (init,) = second.of("system", "init")
    assert (init["session_id"] == session_id) is same_id
    assert result["session_id"] == init["session_id"]
    # The second session's transcript holds both turns (a fork's copies the first one's).
    stored = second.call("getSessionMessages")["value"]
    assert [m["type"] for m in stored] == ["user", "assistant"] * 2
    assert {m["session_id"] for m in stored} == {init["session_id"]}
