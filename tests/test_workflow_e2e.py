"""Workflows through ``taskloom -p``: the acceptance of issue 32's first item.

A workflow of 50 items at concurrency 8 with the scripted model runs 50 agents, never more than
8 at once (from their start and end times in the store), and its owner hears of it once, with
every result; TaskStop on a workflow mid-run leaves none of its agents nor their processes; a
workflow of 2,000 items is refused, naming the limit.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from coordinator_scenario import texts
from fake_servers import FakeAnthropicServer
from helpers import TIME_FACTOR, alive, clean_env, json_lines, run_processes, scripted_argv
from taskloom.settings import db_path
from taskloom.store import Store

pytestmark = pytest.mark.e2e

NOTIFICATION = "<task-notification>"


def _run_scripted(tmp_path: Path, turns: list[Any], subagents: dict[str, Any]) -> list[Any]:
    script = tmp_path / "turns.yaml"
    script.write_text(yaml.safe_dump({"turns": turns, "subagents": subagents}))
    env = clean_env(TASKLOOM_HOME=str(tmp_path / "home"))
    argv = [*scripted_argv(script, "--verbose", "--dangerously-skip-permissions")]
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=120 * TIME_FACTOR, cwd=tmp_path, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json_lines(proc.stdout)


def _stored(tmp_path: Path, session_id: str) -> list[dict[str, Any]]:
    store = Store(db_path(tmp_path / "home"))
    try:
        return store.list_tasks(session_id)
    finally:
        store.close()


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most spans open at one time (an end at the same time as a start comes first)."""
    marks = sorted([(end, -1) for _, end in spans] + [(start, 1) for start, _ in spans])
    most = now = 0
    for _, step in marks:
        now += step
        most = max(most, now)
    return most


def _notifications(events: list[Any]) -> list[str]:
    """Every <task-notification> the main thread was given (the user messages' texts)."""
    found = []
    for event in events:
        if event.get("type") == "user":
            found += [t for t in texts(event["message"]["content"]) if NOTIFICATION in t]
    return found


def test_fifty_items_at_concurrency_eight(tmp_path: Path) -> None:
    items = [f"item-{n}" for n in range(1, 51)]
    call = {
        "description": "fifty items",
        "items": items,
        "prompt": "Handle {item} ({index} of {total}).",
        "concurrency": 8,
    }
    turns = [
        {"tool_calls": [{"name": "Workflow", "input": call}]},
        {"text": "Waiting for the workflow."},
        {"text": "All fifty reported."},
    ]
    # Each agent takes a while, so that eight of them run together.
    events = _run_scripted(
        tmp_path, turns, {"general-purpose": {"text": "handled it", "delay": 0.05}}
    )
    session_id = events[0]["session_id"]
    tasks = _stored(tmp_path, session_id)
    (flow,) = [t for t in tasks if t["type"] == "local_workflow"]
    agents = [t for t in tasks if t["owner"] == flow["id"]]
    assert len(agents) == 50
    assert all(a["status"] == "completed" and a["type"] == "local_agent" for a in agents)
    spans = [(a["start_time"], a["end_time"]) for a in agents]
    assert 1 < _most_at_once(spans) <= 8
    assert flow["status"] == "completed" and (flow["done"], flow["total"]) == (50, 50)
    # One notification: the workflow's, with every agent's result and where its output is.
    (note,) = _notifications(events)
    assert f"<task-id>{flow['id']}</task-id>" in note
    assert "50 of 50 items ran, 50 completed, 0 failed (concurrency 8)" in note
    for number, agent in enumerate(sorted(agents, key=_index), 1):
        assert f"[{number}] item-{number} · completed · {agent['id']}: handled it" in note
    assert f"{Path(agents[0]['output_file']).parent}/ID.output, ID its agent id below" in note
    assert events[-1]["type"] == "result" and events[-1]["result"] == "All fifty reported."


def _index(agent: dict[str, Any]) -> int:
    """An agent's item number, from its description (``fifty items #12``)."""
    return int(agent["description"].rsplit("#", 1)[1])


def test_two_thousand_items_are_refused(tmp_path: Path) -> None:
    call = {"description": "too many", "items": list(range(2000)), "prompt": "{item}"}
    turns = [{"tool_calls": [{"name": "Workflow", "input": call}]}, {"text": "Refused."}]
    events = _run_scripted(tmp_path, turns, {})
    results = [
        b
        for e in events
        if e.get("type") == "user"
        for b in e["message"]["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]
    (refusal,) = results
    assert refusal["is_error"]
    text = " ".join(texts([refusal]))
    assert "2000 agents" in text and "1000 one workflow may run" in text
    assert "workflowMaxAgents" in text
    tasks = _stored(tmp_path, events[0]["session_id"])
    assert tasks == []  # nothing started


class StopMidRun:
    """The main thread starts a workflow whose agents each run ``sleep``, then stops it."""

    def __init__(self) -> None:
        self.workflow = ""
        self.sleeps: list[int] = []
        self.alive_after_stop: list[int] = []
        self.stop_result = ""
        self.stopped_at = 0.0

    async def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        if "You are a subagent" in json.dumps(body.get("system", "")):
            if len(body["messages"]) == 1:
                return {"tool_calls": [("Bash", {"command": "sleep 300", "timeout": 600000})]}
            return {"text": "slept"}
        seen = "\n".join(t for m in body["messages"][1:] for t in texts(m["content"]))
        if len(body["messages"]) == 1:
            call = {"description": "sleepers", "items": list(range(20)), "prompt": "{item}"}
            call["concurrency"] = 4
            return {"tool_calls": [("Workflow", call)]}
        if not self.workflow:
            found = re.search(r"task_id: (w\w+)", seen)
            assert found, seen
            self.workflow = found.group(1)
            self.sleeps = await self._sleeping(4)
            return {"tool_calls": [("TaskStop", {"task_id": self.workflow})]}
        if not self.stopped_at:
            self.stopped_at = time.time()
            self.stop_result = texts(body["messages"][-1]["content"])[-1]
            self.alive_after_stop = [pid for pid in self.sleeps if alive(pid)]
            return {"text": "Stopped it."}
        return {"text": "Noted."}

    async def _sleeping(self, count: int) -> list[int]:
        """The pids of the agents' ``sleep`` commands, once ``count`` of them run."""
        deadline = time.monotonic() + 60 * TIME_FACTOR
        while time.monotonic() < deadline:
            found = run_processes(lambda p: (p.info.get("cmdline") or [])[:2] == ["sleep", "300"])
            if len(found) >= count:
                return [p.pid for p in found]
            await asyncio.sleep(0.05)
        raise AssertionError(f"fewer than {count} agents ran their command")


def test_task_stop_mid_run_leaves_no_agent_nor_process(tmp_path: Path) -> None:
    scenario = StopMidRun()
    with FakeAnthropicServer(responder=scenario.respond) as server:
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="sk-test")
        env["TASKLOOM_HOME"] = str(tmp_path / "home")
        argv = [sys.executable, "-m", "taskloom", "-p", "go", "--output-format", "stream-json"]
        argv += ["--verbose", "--model", "claude-sonnet-4-5", "--dangerously-skip-permissions"]
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=120 * TIME_FACTOR, cwd=tmp_path, env=env
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(scenario.sleeps) == 4
    # TaskStop returned once every agent's command was gone, while the session ran on.
    assert scenario.alive_after_stop == []
    assert "stopped" in scenario.stop_result.lower()
    events = json_lines(proc.stdout)
    tasks = _stored(tmp_path, events[0]["session_id"])
    (flow,) = [t for t in tasks if t["id"] == scenario.workflow]
    assert flow["status"] == "killed"
    agents = [t for t in tasks if t["owner"] == scenario.workflow]
    # Only the four that were running had started; each ended before TaskStop answered.
    assert len(agents) == 4
    for agent in agents:
        assert agent["status"] == "killed"
        assert agent["end_time"] <= scenario.stopped_at
    shells = [t for t in tasks if t["type"] == "local_bash"]
    assert all(s["status"] != "running" for s in shells)
