"""Streaming input: a turn ends when the model ends it, while the tasks it started run on.

What a background task delivers later (its notification) starts a turn of its own, with its own
result; one that lands while a turn runs is delivered in that turn, with no extra turn. When
the program closes its input, the session waits for its own tasks, each notification a turn,
then ends. Driven by the real ``claude-agent-sdk`` (``ClaudeSDKClient``) and, at the protocol
level, over taskloom's stdin and stdout.

Each background command here blocks reading a FIFO until the test writes to it: when it ends is
the test's choice, with no timing guessed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from fake_servers import FakeAnthropicServer, ToolCall
from helpers import TIME_FACTOR, LazyModule, clean_env

sdk = LazyModule("claude_agent_sdk")

pytestmark = pytest.mark.e2e

TASKLOOM = str(Path(sys.executable).with_name("taskloom"))
SUBAGENT = "You are a subagent"
NOTIFICATION = "<task-notification>"


def options(server: FakeAnthropicServer, cwd: Path) -> Any:
    env = {
        **clean_env(),
        "ANTHROPIC_BASE_URL": server.url,
        "ANTHROPIC_API_KEY": "test",
        "TASKLOOM_HOME": str(cwd / "home"),
    }
    return sdk.ClaudeAgentOptions(
        cli_path=TASKLOOM,
        cwd=str(cwd),
        env=env,
        model="claude-sonnet-4-5",
        permission_mode="bypassPermissions",
    )


class Gate:
    """A FIFO a command blocks on (``read line < FIFO``) until :meth:`release` writes a line."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "gate.fifo"
        os.mkfifo(self.path)
        self._writer: threading.Thread | None = None

    @property
    def command(self) -> str:
        return f"read line < {self.path}; echo released"

    def release(self) -> None:
        """Let the command go on: open the FIFO for writing (once it has a reader) in a thread."""

        def write() -> None:
            with open(self.path, "w") as fifo:  # blocks until the command opens it
                fifo.write("go\n")

        self._writer = threading.Thread(target=write, daemon=True)
        self._writer.start()

    def released(self) -> None:
        """Wait until the command has read the line."""
        assert self._writer is not None
        self._writer.join(30 * TIME_FACTOR)
        assert not self._writer.is_alive(), "the command never opened its FIFO"


def last_user_text(body: dict[str, Any]) -> str:
    """The last user message of a request, as text (blocks joined)."""
    content = body["messages"][-1]["content"]
    return content if isinstance(content, str) else json.dumps(content)


def system_text(body: dict[str, Any]) -> str:
    system = body.get("system") or ""
    return system if isinstance(system, str) else json.dumps(system)


def status_of(message: Any) -> str | None:
    """A ``task_updated`` message's status (in its ``patch``, as the SDKs type it)."""
    status: str | None = message.data["patch"].get("status")
    return status


def notifications(messages: list[Any]) -> list[Any]:
    return [
        m for m in messages if isinstance(m, sdk.SystemMessage) and m.subtype == "task_notification"
    ]


def results(messages: list[Any]) -> list[str]:
    return [m.result for m in messages if isinstance(m, sdk.ResultMessage)]


async def test_a_background_commands_turn_ends_before_it_and_its_end_starts_a_turn(
    tmp_path: Path,
) -> None:
    gate = Gate(tmp_path)

    def respond(body: dict[str, Any]) -> Any:
        last = last_user_text(body)
        if NOTIFICATION in last:
            return "it finished"
        if "tool_result" in last:
            return "started it"
        call = {"command": gate.command, "description": "gated", "run_in_background": True}
        return {"tool_calls": [ToolCall("Bash", call)]}

    with FakeAnthropicServer(respond) as server:
        async with sdk.ClaudeSDKClient(options=options(server, tmp_path)) as client:
            await client.query("start it")
            first = [m async for m in client.receive_response()]
            # The turn is over, the command still blocked on its FIFO: nothing says it ended.
            assert results(first) == ["started it"]
            assert not notifications(first)
            (started,) = [m for m in first if isinstance(m, sdk.TaskStartedMessage)]
            updates = [m for m in first if isinstance(m, sdk.TaskUpdatedMessage)]
            assert all(status_of(m) == "running" for m in updates)
            gate.release()
            # Its end starts a turn by itself: no prompt is sent.
            second = [m async for m in client.receive_response()]
            gate.released()
    assert results(second) == ["it finished"]
    (note,) = notifications(second)
    assert note.data["task_id"] == started.task_id and note.data["status"] == "completed"
    ended = [m for m in second if isinstance(m, sdk.TaskUpdatedMessage)]
    assert ended and status_of(ended[0]) == "completed"
    assert second.index(ended[0]) < second.index(note)
    # Three requests, the last one told of the command's end, once.
    assert len(server.requests) == 3
    told = [r for r in server.requests if NOTIFICATION in json.dumps(r.body["messages"])]
    assert told == [server.requests[2]]


async def test_a_background_agents_turn_ends_before_it_and_its_end_starts_a_turn(
    tmp_path: Path,
) -> None:
    gate = Gate(tmp_path)

    def respond(body: dict[str, Any]) -> Any:
        last = last_user_text(body)
        if SUBAGENT in system_text(body):  # the agent: one command on the gate, then its answer
            if "tool_result" in last:
                return "the agent answered"
            return {"tool_calls": [ToolCall("Bash", {"command": gate.command})]}
        if NOTIFICATION in last:
            return "the agent finished"
        if "tool_result" in last:
            return "the agent runs"
        spawn = {
            "description": "gated agent",
            "prompt": "wait at the gate",
            "subagent_type": "general-purpose",
            "run_in_background": True,
        }
        return {"tool_calls": [ToolCall("Agent", spawn)]}

    with FakeAnthropicServer(respond) as server:
        async with sdk.ClaudeSDKClient(options=options(server, tmp_path)) as client:
            await client.query("start the agent")
            first = [m async for m in client.receive_response()]
            assert results(first) == ["the agent runs"]
            assert not notifications(first)
            (started,) = [
                m
                for m in first
                if isinstance(m, sdk.TaskStartedMessage) and m.task_type == "local_agent"
            ]
            gate.release()
            second = [m async for m in client.receive_response()]
            gate.released()
    assert results(second) == ["the agent finished"]
    (note,) = notifications(second)
    assert note.data["task_id"] == started.task_id and note.data["status"] == "completed"
    # The agent's answer reached the main thread in the notification that started the turn.
    last = server.requests[-1].body
    assert SUBAGENT not in system_text(last)
    assert NOTIFICATION in last_user_text(last) and "the agent answered" in last_user_text(last)


async def test_a_notification_landing_during_a_turn_is_delivered_in_it_with_no_extra_turn(
    tmp_path: Path,
) -> None:
    gate = Gate(tmp_path)
    ended = threading.Event()  # the program saw the command end (the turn still running)

    def respond(body: dict[str, Any]) -> Any:
        last = last_user_text(body)
        if "next prompt" in last:
            return "the next turn"
        if NOTIFICATION in last:
            return "noted its end"
        if "tool_result" in last:
            # The command ends while this request is in flight: the model's answer comes
            # once the program has seen it end, so the notification waits for the turn.
            gate.release()
            assert ended.wait(30 * TIME_FACTOR), "the command's end was never printed"
            return "answered while it ended"
        call = {"command": gate.command, "description": "gated", "run_in_background": True}
        return {"tool_calls": [ToolCall("Bash", call)]}

    with FakeAnthropicServer(respond) as server:
        async with sdk.ClaudeSDKClient(options=options(server, tmp_path)) as client:
            await client.query("start it")
            first = []
            async for message in client.receive_response():
                first.append(message)
                if (
                    isinstance(message, sdk.TaskUpdatedMessage)
                    and status_of(message) == "completed"
                ):
                    ended.set()
            gate.released()
            await client.query("next prompt")
            second = [m async for m in client.receive_response()]
    # One turn held the command's start, its end and the model's word on it; the prompt
    # that followed got its own turn, and nothing started one in between.
    assert results(first) == ["noted its end"]
    assert len(notifications(first)) == 1
    assert results(second) == ["the next turn"] and not notifications(second)
    told = [r for r in server.requests if NOTIFICATION in last_user_text(r.body)]
    assert told == [server.requests[2]]
    assert len(server.requests) == 4


# -- the protocol, without an SDK ----------------------------------------------------------------


def start(
    tmp_path: Path, turns: list[Any], subagents: dict[str, Any] | None = None, **env: str
) -> subprocess.Popen[str]:
    script = tmp_path / "turns.yaml"
    script.write_text(yaml.safe_dump({"turns": turns, "subagents": subagents or {}}))
    argv = [sys.executable, "-m", "taskloom", "--input-format", "stream-json"]
    argv += ["--output-format", "stream-json", "--model", f"scripted:{script}"]
    argv += ["--dangerously-skip-permissions"]
    environ = clean_env(TASKLOOM_HOME=str(tmp_path / "home"))
    for name in ("CLAUDE_CODE_SDK_READS_SESSION_STATE", "CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS"):
        environ.pop(name, None)  # only what the test asks for
    return subprocess.Popen(
        argv,
        cwd=tmp_path,
        env={**environ, **env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def next_event(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "the output ended"
    return dict(json.loads(line))


def finish(proc: subprocess.Popen[str]) -> str:
    """Close stdin (if open), wait for the exit code 0; what stdout still held."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    if not proc.stdin.closed:
        proc.stdin.close()
    code = proc.wait(timeout=30 * TIME_FACTOR)
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    assert code == 0, err
    return out


def read_until_result(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    """Lines up to and with the next result (bounded by the test's timeout)."""
    assert proc.stdout is not None
    events: list[dict[str, Any]] = []
    while not events or events[-1]["type"] != "result":
        line = proc.stdout.readline()
        assert line, f"output ended before a result; saw {events}"
        events.append(json.loads(line))
    return events


def user(text: str) -> str:
    return json.dumps({"type": "user", "message": {"role": "user", "content": text}}) + "\n"


@pytest.mark.parametrize("close_early", [False, True], ids=["input-open", "input-closed"])
def test_each_turn_prints_its_own_result_and_the_task_events_between_them(
    tmp_path: Path, close_early: bool
) -> None:
    # With its input closed at once the session still waits for its command, and the
    # command's end still gets its turn, as the CLI taskloom follows does; then it ends.
    gate = Gate(tmp_path)
    call = {"name": "Bash", "input": {"command": gate.command, "run_in_background": True}}
    proc = start(tmp_path, [{"tool_calls": [call]}, {"text": "started"}, {"text": "finished"}])
    assert proc.stdin is not None
    proc.stdin.write(user("start it"))
    proc.stdin.flush()
    if close_early:
        proc.stdin.close()
    first = read_until_result(proc)
    assert first[0]["subtype"] == "init" and first[-1]["result"] == "started"
    assert not [e for e in first if e.get("subtype") == "task_notification"]
    assert proc.poll() is None  # waiting for its command, whatever the input
    gate.release()
    second = read_until_result(proc)
    gate.released()
    kinds = [e["subtype"] if e["type"] == "system" else e["type"] for e in second]
    # The end is printed as it happens, then the turn it starts: init, the notification,
    # the message delivering it, the answer, the result.
    assert kinds == [
        "task_updated",
        "init",
        "task_notification",
        "user",
        "assistant",
        "result",
    ], kinds
    assert second[0]["patch"]["status"] == "completed"
    assert second[-1]["result"] == "finished" and second[-1]["subtype"] == "success"
    assert second[-1]["session_id"] == first[-1]["session_id"]
    out = finish(proc)
    assert out == ""  # nothing after the last turn's result


def test_one_shot_print_runs_still_wait_for_their_tasks_in_one_result(tmp_path: Path) -> None:
    call = {"name": "Bash", "input": {"command": "echo quick", "run_in_background": True}}
    script = tmp_path / "turns.yaml"
    turns = [{"tool_calls": [call]}, {"text": "started"}, {"text": "finished"}]
    script.write_text(yaml.safe_dump({"turns": turns}))
    argv = [sys.executable, "-m", "taskloom", "-p", "go", "--output-format", "stream-json"]
    argv += ["--model", f"scripted:{script}", "--dangerously-skip-permissions"]
    proc = subprocess.run(
        argv,
        cwd=tmp_path,
        env=clean_env(TASKLOOM_HOME=str(tmp_path / "home")),
        capture_output=True,
        text=True,
        timeout=60 * TIME_FACTOR,
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    (result,) = [e for e in events if e["type"] == "result"]
    assert result["result"] == "finished" and events[-1] is result
    assert [e["subtype"] for e in events if e["type"] == "system"].count("init") == 1


def state(event: dict[str, Any]) -> str | None:
    """The state a ``session_state_changed`` line reports (None for any other line)."""
    if event.get("subtype") != "session_state_changed":
        return None
    assert event["sdk_host_only"] is True  # for the SDK, which keeps it from the program
    return str(event["state"])


def test_the_session_says_idle_once_no_turn_is_owed_while_a_command_runs(
    tmp_path: Path,
) -> None:
    # As the CLI taskloom follows: a background command owes no turn while the input is open
    # (the program may close it, then the session waits for the command all the same).
    gate = Gate(tmp_path)
    call = {"name": "Bash", "input": {"command": gate.command, "run_in_background": True}}
    turns = [{"tool_calls": [call]}, {"text": "started"}, {"text": "finished"}]
    proc = start(tmp_path, turns, CLAUDE_CODE_SDK_READS_SESSION_STATE="1")
    assert proc.stdin is not None
    proc.stdin.write(user("start it"))
    proc.stdin.flush()
    first = read_until_result(proc)
    assert [state(e) for e in first[:2]] == ["running", None] and first[1]["subtype"] == "init"
    assert state(next_event(proc)) == "idle"
    gate.release()
    second = read_until_result(proc)
    gate.released()
    assert [state(e) for e in second].count("running") == 1
    assert state(second[1]) == "running" and second[2]["subtype"] == "init"
    assert second[-1]["result"] == "finished"
    assert state(next_event(proc)) == "idle"
    assert finish(proc) == ""


def test_the_session_stays_running_while_a_background_agent_works(tmp_path: Path) -> None:
    # Its end will start a turn: the SDK must keep the program's input open for it.
    gate = Gate(tmp_path)
    spawn = {
        "name": "Agent",
        "input": {"description": "gated", "prompt": "wait", "run_in_background": True},
    }
    agent = [{"tool_calls": [{"name": "Bash", "input": {"command": gate.command}}]}, "done"]
    turns = [{"tool_calls": [spawn]}, {"text": "it works"}, {"text": "it is done"}]
    proc = start(
        tmp_path, turns, {"general-purpose": agent}, CLAUDE_CODE_SDK_READS_SESSION_STATE="1"
    )
    assert proc.stdin is not None
    proc.stdin.write(user("start it"))
    proc.stdin.flush()
    first = read_until_result(proc)
    assert state(first[0]) == "running" and first[-1]["result"] == "it works"
    gate.release()
    second = read_until_result(proc)
    gate.released()
    # No idle in between, so no new "running": one working spell from the prompt on.
    assert [state(e) for e in first + second if state(e)] == ["running"]
    assert second[-1]["result"] == "it is done"
    assert any(e.get("subtype") == "task_notification" for e in second)
    assert state(next_event(proc)) == "idle"
    assert finish(proc) == ""


def test_no_session_state_lines_unless_asked_for(tmp_path: Path) -> None:
    proc = start(tmp_path, [{"text": "hello"}])
    assert proc.stdin is not None
    proc.stdin.write(user("hi"))
    proc.stdin.close()
    events = read_until_result(proc)
    assert [e["type"] for e in events] == ["system", "assistant", "result"]
    assert finish(proc) == ""
