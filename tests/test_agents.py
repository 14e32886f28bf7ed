"""Subagents end to end: fan-out, auto-background, tool filtering, SendMessage, cancellation."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import clean_env, harness, main_context, scripted_argv, wait_until
from taskloom.agents.service import SpawnRequest
from taskloom.engine import Finished
from taskloom.messages import TextBlock, ToolResultBlock
from taskloom.models.base import ModelRequest
from taskloom.tasks.types import AgentTaskState
from taskloom.testing import FunctionModel, ToolCall, Turn
from taskloom.transcript import sidechain_dir, transcript_path


def run_cli(tmp_path: Path, script: dict[str, Any], *args: str, **env: str) -> list[dict[str, Any]]:
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(script))
    proc = subprocess.run(
        scripted_argv(tmp_path / "s.yaml", "--verbose", "--dangerously-skip-permissions", *args),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=clean_env(**env),
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


@pytest.mark.e2e
def test_ten_background_agents_are_notified_in_batches(tmp_path: Path) -> None:
    calls = [
        {
            "name": "Agent",
            "input": {
                "description": f"job {i}",
                "prompt": f"do job {i}",
                "run_in_background": True,
            },
        }
        for i in range(10)
    ]
    events = run_cli(
        tmp_path,
        {
            "turns": [
                {"text": "Fanning out.", "tool_calls": calls},
                {"text": "Waiting for them."},
                {"text": "All ten reported."},
            ],
            "subagents": {"general-purpose": {"text": "job done"}},
        },
    )
    result = events[-1]
    assert result["subtype"] == "success"
    assert result["num_turns"] <= 3
    notes = [e for e in events if e.get("subtype") == "task_notification"]
    assert len(notes) == 10 and len({n["task_id"] for n in notes}) == 10
    delivered = [
        block["text"]
        for e in events
        if e["type"] == "user"
        for block in e["message"]["content"]
        if block.get("type") == "text"
    ]
    blob = "\n".join(delivered)
    assert blob.count("<task-notification>") == 10
    assert blob.count("<result>job done</result>") == 10
    assert blob.count("<usage><total_tokens>") == 10


@pytest.mark.e2e
def test_a_stalled_foreground_agent_moves_to_the_background(tmp_path: Path, home: Path) -> None:
    events = run_cli(
        tmp_path,
        {
            "turns": [
                {
                    "tool_calls": [
                        {
                            "name": "Agent",
                            "input": {"description": "slow one", "prompt": "take your time"},
                        }
                    ]
                },
                {"text": "It went to the background; waiting."},
                {"text": "Got its answer."},
            ],
            "subagents": {"general-purpose": {"text": "the late answer", "delay": 0.8}},
        },
        TASKLOOM_AUTO_BACKGROUND_MS="200",
    )
    first_user = next(e for e in events if e["type"] == "user" and not e["parent_tool_use_id"])
    tool_result = first_user["message"]["content"][0]["content"]
    assert "Async agent launched" in tool_result
    agent_id = tool_result.split("agentId: ")[1].split()[0]
    notes = [e for e in events if e.get("subtype") == "task_notification"]
    assert [n["task_id"] for n in notes] == [agent_id]
    texts = json.dumps([e["message"] for e in events if e["type"] == "user"])
    assert "<result>the late answer</result>" in texts
    main = transcript_path(events[-1]["session_id"], home, cwd=tmp_path)
    sidechain = sidechain_dir(main) / f"agent-{agent_id}.jsonl"
    lines = [json.loads(x) for x in sidechain.read_text().splitlines()]
    assert lines[-1]["type"] == "assistant"
    assert lines[-1]["message"]["content"][0]["text"] == "the late answer"


def test_explore_and_custom_agents_get_only_their_tools(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "userhome"))
    agents = tmp_path / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "reader.md").write_text(
        "---\nname: reader\ndescription: reads things\ntools: Read, Grep\n---\nYou read.\n"
    )
    seen: dict[str, set[str]] = {}

    def respond(request: ModelRequest) -> Turn | str:
        kind = request.metadata.get("agent_type")
        if kind is None:
            if len(request.messages) == 1:
                return Turn(
                    tool_calls=(
                        ToolCall(
                            "Agent",
                            {"description": "look", "prompt": "x", "subagent_type": "Explore"},
                        ),
                        ToolCall(
                            "Agent",
                            {"description": "read", "prompt": "y", "subagent_type": "reader"},
                        ),
                    )
                )
            return "done"
        seen[kind] = {t.name for t in request.tools}
        if kind == "Explore" and len(request.messages) == 1:
            return Turn(
                tool_calls=(ToolCall("Write", {"file_path": str(tmp_path / "x"), "content": "no"}),)
            )
        return "ok"

    async def main() -> list[Any]:
        async with harness(tmp_path, FunctionModel(respond)) as h:
            events = [e async for e in h.run("go")]
            runs = h.agents.runs
            explore = runs[
                next(
                    i
                    for i, r in runs.items()
                    if r.engine.config.metadata["agent_type"] == "Explore"
                )
            ]
            refused = [
                b
                for m in explore.engine.messages
                for b in m.content
                if isinstance(b, ToolResultBlock)
            ]
            return [events, refused]

    events, refused = asyncio.run(main())
    assert isinstance(events[-1], Finished)
    assert {"Write", "Edit", "Agent", "TaskOutput", "TaskStop"}.isdisjoint(seen["Explore"])
    assert {"Read", "Grep", "Glob", "Bash"} <= seen["Explore"]
    assert seen["reader"] == {"Read", "Grep"}
    assert refused and refused[0].is_error and "No such tool available: Write" in refused[0].text()
    assert not (tmp_path / "x").exists()


async def test_send_message_steers_a_running_agent_and_resumes_a_finished_one(
    tmp_path: Path,
) -> None:
    started = asyncio.Event()

    def respond(request: ModelRequest) -> Turn | str:
        last = request.messages[-1]
        texts = " ".join(b.text for b in last.content if isinstance(b, TextBlock))
        if len(request.messages) == 1:
            started.set()
            return Turn(tool_calls=(ToolCall("Bash", {"command": "sleep 0.5"}),))
        if "steer left" in texts:
            return "turned left"
        if "and now right" in texts:
            return "turned right"
        return "no message seen"

    async with harness(tmp_path, FunctionModel(respond)) as h:
        service, rt, ctx = h.agents, h.runtime, main_context(h)
        launched = await service.spawn(
            SpawnRequest(
                description="walker", prompt="walk", run_in_background=True, name="walker"
            ),
            ctx,
        )
        await asyncio.wait_for(started.wait(), 10)
        reply = await service.send("walker", "steer left", ctx)
        assert "queued" in reply
        first = await rt.wait(launched.agent_id, timeout=20)
        assert isinstance(first, AgentTaskState) and first.result == "turned left"
        notes = rt.drain()
        assert len(notes) == 1 and "<result>turned left</result>" in notes[0].text
        rt.ack(notes)
        reply = await service.send(launched.agent_id, "and now right", ctx)
        assert "resumed" in reply
        await wait_until(lambda: rt.get(launched.agent_id).terminal, what="resumed run")  # type: ignore[union-attr]
        again = rt.get(launched.agent_id)
        assert isinstance(again, AgentTaskState) and again.result == "turned right"
        second = rt.drain()
        assert [n.task_id for n in second] == [launched.agent_id]
        assert "<result>turned right</result>" in second[0].text
        send = next(t for t in h.tools if t.name == "SendMessage")
        unknown = await send.call(send.validate({"to": "nobody", "message": "hi"}), ctx)  # type: ignore[arg-type]
        assert unknown.is_error and "walker" in unknown.content


@pytest.mark.e2e
def test_terminating_the_parent_stops_every_child_agent_and_their_shells(tmp_path: Path) -> None:
    script = {
        "turns": [
            {
                "tool_calls": [
                    {
                        "name": "Agent",
                        "input": {"description": "bg", "prompt": "a", "run_in_background": True},
                    },
                    {"name": "Agent", "input": {"description": "fg", "prompt": "b"}},
                ]
            },
            {"text": "never"},
        ],
        "subagents": {
            "general-purpose": {"tool_calls": [{"name": "Bash", "input": {"command": "sleep 300"}}]}
        },
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(script))
    proc = subprocess.Popen(
        scripted_argv(tmp_path / "s.yaml", "--dangerously-skip-permissions"),
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=clean_env(),
    )
    assert proc.stdout is not None
    shells = 0
    session = None
    for line in proc.stdout:
        event = json.loads(line)
        session = event["session_id"]
        if event.get("subtype") == "task_started" and event["task_type"] == "local_bash":
            shells += 1
            if shells == 2:
                break
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    proc.stdout.close()
    listed = subprocess.run(
        [sys.executable, "-m", "taskloom", "tasks", "--session", str(session), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )
    rows = json.loads(listed.stdout)
    assert len(rows) == 4
    assert {r["status"] for r in rows} == {"killed"}
    # The autouse fixture fails the test if a sleep survived.


@pytest.mark.e2e
def test_agent_permission_rule_refuses_a_type_with_claude_codes_wording(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        yaml.safe_dump(
            {
                "turns": [
                    {
                        "tool_calls": [
                            {
                                "name": "Agent",
                                "input": {
                                    "description": "look",
                                    "prompt": "x",
                                    "subagent_type": "Explore",
                                },
                            }
                        ]
                    },
                    {"text": "ok"},
                ],
            }
        )
    )
    proc = subprocess.run(
        scripted_argv(tmp_path / "s.yaml", "--disallowedTools", "Agent(Explore)"),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    result = next(e for e in events if e["type"] == "user")["message"]["content"][0]
    assert result["is_error"] is True
    assert result["content"] == (
        "<tool_use_error>Agent type 'Explore' has been denied by permission rule "
        "'Agent(Explore)' from settings.</tool_use_error>"
    )


@pytest.mark.e2e
def test_agents_flag_and_background_disabled(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        yaml.safe_dump(
            {
                "turns": [
                    {
                        "tool_calls": [
                            {
                                "name": "Agent",
                                "input": {
                                    "description": "x",
                                    "prompt": "x",
                                    "subagent_type": "shouter",
                                    "run_in_background": True,
                                },
                            }
                        ]
                    },
                    {
                        "tool_calls": [
                            {
                                "name": "Agent",
                                "input": {
                                    "description": "x",
                                    "prompt": "x",
                                    "subagent_type": "shouter",
                                },
                            }
                        ]
                    },
                    {"text": "ok"},
                ],
                "subagents": {"shouter": {"text": "HELLO"}},
            }
        )
    )
    agents = json.dumps({"shouter": {"description": "shouts", "prompt": "Shout."}})
    proc = subprocess.run(
        scripted_argv(tmp_path / "s.yaml", "--agents", agents),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**clean_env(), "TASKLOOM_DISABLE_BACKGROUND_TASKS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert "shouter" in events[0]["agents"]
    results = [
        b
        for e in events
        if e["type"] == "user" and not e["parent_tool_use_id"]  # the main thread's
        for b in e["message"]["content"]
    ]
    assert results[0]["is_error"] and "run_in_background: not available" in results[0]["content"]
    assert results[1]["content"].startswith("HELLO")


async def test_an_agents_background_shells_end_with_it(tmp_path: Path) -> None:
    def respond(request: ModelRequest) -> Turn | str:
        if request.metadata.get("agent_type") and len(request.messages) == 1:
            return Turn(
                tool_calls=(ToolCall("Bash", {"command": "sleep 300", "run_in_background": True}),)
            )
        return "done"

    async with harness(tmp_path, FunctionModel(respond)) as h:
        rt = h.runtime
        result = await h.agents.spawn(SpawnRequest(description="d", prompt="p"), main_context(h))
        assert result.status == "completed"
        shells = [s for s in rt.subtree(result.agent_id) if s.type == "local_bash"]
        assert len(shells) == 1 and shells[0].status == "killed"
        # The main thread is not told (the shell was not its own); the agent's mailbox keeps
        # the notice, which it receives if it is resumed.
        assert rt.drain(owner=rt.session_id) == []
        kept = rt.mailbox.parked(result.agent_id)
        assert [n.sender for n in kept] == [shells[0].id] and "was stopped" in kept[0].body


async def test_models_made_for_agent_aliases_are_closed_with_the_builder() -> None:
    from taskloom.agents.builder import AgentBuilder
    from taskloom.agents.loader import AgentCatalog

    closed: list[str] = []

    class Closing(FunctionModel):
        async def aclose(self) -> None:
            closed.append(self.name)

    parent = Closing(lambda request: Turn(text="parent"), name="parent")
    builder = AgentBuilder(
        None,  # type: ignore[arg-type]  # models only: no engine is configured here
        catalog=AgentCatalog({}),
        model=parent,
        model_name=parent.name,
        tools=list,
        settings={},
        policy=None,
        resolve_model=lambda spec: parent if spec == "same" else Closing(lambda r: "x", name=spec),
    )
    made = [builder._model_for(spec)[0] for spec in ("haiku", "haiku", "opus", "same", None)]
    assert [m.name for m in made] == ["haiku", "haiku", "opus", "parent", "parent"]
    await builder.aclose()
    # Each alias's model once; never the parent's, which its owner (the Harness) closes.
    assert sorted(closed) == ["haiku", "opus"]


async def test_a_call_named_task_spawns_an_agent(tmp_path: Path) -> None:
    # Models trained before the Agent tool was renamed still call it `Task`; it is never
    # offered under that name, but a call by it runs the Agent tool (and a rule on `Task`
    # is a rule on Agent, see tests/test_permissions.py).
    answers: list[str] = []

    def respond(request: ModelRequest) -> Any:
        if request.agent_id is not None:
            return "sub found it"
        if len(request.messages) == 1:
            call = {"description": "look", "prompt": "find it", "subagent_type": "Explore"}
            return Turn(tool_calls=(ToolCall("Task", call),))
        results = [b for b in request.messages[-1].content if isinstance(b, ToolResultBlock)]
        answers.extend(r.text() for r in results if not r.is_error)
        return "done"

    async with harness(tmp_path, FunctionModel(respond)) as h:
        assert "Task" not in [t.name for t in h.tools]
        events = [e async for e in h.run("go")]
    assert isinstance(events[-1], Finished)
    assert len(answers) == 1 and "sub found it" in answers[0]
