"""A workflow given as a script, through ``taskloom -p``.

A script that spawns three agents, gathers them and prints a summary ends the workflow with
that summary and every agent's outcome, in one notification; a script that exits 1 fails the
workflow with its stderr; TaskStop while the script waits for its agents leaves neither the
script nor any agent's command running.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import textwrap
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

GATHER_THREE = textwrap.dedent(
    """
    from taskloom.workflow_client import gather, spawn

    handles = [spawn(f"Look at part {n}.") for n in (1, 2, 3)]
    answers = gather(*handles)
    print(f"summary: {len(answers)} answers:", " | ".join(answers))
    """
)


def _run(tmp_path: Path, turns: list[Any], subagents: dict[str, Any]) -> list[Any]:
    script = tmp_path / "turns.yaml"
    script.write_text(yaml.safe_dump({"turns": turns, "subagents": subagents}))
    env = clean_env(TASKLOOM_HOME=str(tmp_path / "home"))
    argv = scripted_argv(script, "--verbose", "--dangerously-skip-permissions")
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


def _notifications(events: list[Any]) -> list[str]:
    found = []
    for event in events:
        if event.get("type") == "user":
            found += [t for t in texts(event["message"]["content"]) if NOTIFICATION in t]
    return found


def _script_turns(script: str) -> list[dict[str, Any]]:
    call = {"description": "scripted flow", "script": script}
    return [
        {"tool_calls": [{"name": "Workflow", "input": call}]},
        {"text": "Waiting for the workflow."},
        {"text": "Heard from it."},
    ]


def test_script_spawns_three_agents_and_prints_a_summary(tmp_path: Path) -> None:
    events = _run(tmp_path, _script_turns(GATHER_THREE), {"general-purpose": {"text": "fine"}})
    tasks = _stored(tmp_path, events[0]["session_id"])
    (flow,) = [t for t in tasks if t["type"] == "local_workflow"]
    agents = [t for t in tasks if t["owner"] == flow["id"] and t["type"] == "local_agent"]
    (shell,) = [t for t in tasks if t["owner"] == flow["id"] and t["type"] == "local_bash"]
    assert len(agents) == 3 and all(a["status"] == "completed" for a in agents)
    assert shell["status"] == "completed" and shell["exit_code"] == 0
    assert flow["status"] == "completed" and (flow["done"], flow["total"]) == (3, 3)
    (note,) = _notifications(events)
    assert f"<task-id>{flow['id']}</task-id>" in note
    assert "<status>completed</status>" in note
    assert "summary: 3 answers: fine | fine | fine" in note
    for agent in agents:
        assert f"· completed · {agent['id']}: fine" in note
    assert "Look at part 2." in note  # each agent is named by its prompt's first line
    assert events[-1]["type"] == "result" and events[-1]["result"] == "Heard from it."


def test_script_exiting_one_fails_the_workflow_with_its_stderr(tmp_path: Path) -> None:
    script = (
        "import sys\nprint('partial')\nsys.stderr.write('boom: no such input\\n')\nsys.exit(1)\n"
    )
    events = _run(tmp_path, _script_turns(script), {})
    tasks = _stored(tmp_path, events[0]["session_id"])
    (flow,) = [t for t in tasks if t["type"] == "local_workflow"]
    assert flow["status"] == "failed"
    (note,) = _notifications(events)
    assert "<status>failed</status>" in note
    assert "Workflow script failed (exit code 1)" in note
    assert "boom: no such input" in note


class StopMidScript:
    """The script starts two agents that each run ``sleep``, then waits; the lead stops it."""

    SCRIPT = textwrap.dedent(
        """
        from taskloom.workflow_client import gather, spawn

        print(gather(spawn("sleep a"), spawn("sleep b")))
        """
    )

    def __init__(self) -> None:
        self.workflow = ""
        self.pids: list[int] = []
        self.alive_after_stop: list[int] = []
        self.stop_result = ""

    async def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        if "You are a subagent" in json.dumps(body.get("system", "")):
            if len(body["messages"]) == 1:
                return {"tool_calls": [("Bash", {"command": "sleep 300", "timeout": 600000})]}
            return {"text": "slept"}
        seen = "\n".join(t for m in body["messages"][1:] for t in texts(m["content"]))
        if len(body["messages"]) == 1:
            call = {"description": "sleepers", "script": self.SCRIPT}
            return {"tool_calls": [("Workflow", call)]}
        if not self.workflow:
            found = re.search(r"task_id: (w\w+)", seen)
            assert found, seen
            self.workflow = found.group(1)
            self.pids = await self._running()
            return {"tool_calls": [("TaskStop", {"task_id": self.workflow})]}
        if not self.stop_result:
            self.stop_result = texts(body["messages"][-1]["content"])[-1]
            self.alive_after_stop = [pid for pid in self.pids if alive(pid)]
            return {"text": "Stopped it."}
        return {"text": "Noted."}

    async def _running(self) -> list[int]:
        """The pids of the script and of both agents' ``sleep``, once all three run."""
        deadline = time.monotonic() + 60 * TIME_FACTOR
        while time.monotonic() < deadline:
            sleeps = run_processes(lambda p: (p.info.get("cmdline") or [])[:2] == ["sleep", "300"])
            scripts = run_processes(lambda p: _is_script(p.info.get("cmdline") or []))
            if len(sleeps) == 2 and len(scripts) == 1:
                return [p.pid for p in sleeps + scripts]
            await asyncio.sleep(0.05)
        raise AssertionError("the script and its two agents' commands did not all run")


def _is_script(cmdline: list[str]) -> bool:
    return len(cmdline) >= 2 and re.search(r"/w\w+\.py$", cmdline[1]) is not None


def test_task_stop_mid_script_leaves_no_process(tmp_path: Path) -> None:
    scenario = StopMidScript()
    with FakeAnthropicServer(responder=scenario.respond) as server:
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="sk-test")
        env["TASKLOOM_HOME"] = str(tmp_path / "home")
        argv = [sys.executable, "-m", "taskloom", "-p", "go", "--output-format", "stream-json"]
        argv += ["--verbose", "--model", "claude-sonnet-4-5", "--dangerously-skip-permissions"]
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=120 * TIME_FACTOR, cwd=tmp_path, env=env
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(scenario.pids) == 3
    assert scenario.alive_after_stop == []  # gone before TaskStop answered
    assert "stopped" in scenario.stop_result.lower()
    tasks = _stored(tmp_path, json_lines(proc.stdout)[0]["session_id"])
    (flow,) = [t for t in tasks if t["id"] == scenario.workflow]
    assert flow["status"] == "killed"
    owned = [t for t in tasks if t["owner"] == scenario.workflow]
    assert {t["type"] for t in owned} == {"local_agent", "local_bash"} and len(owned) == 3
    assert all(t["status"] == "killed" for t in owned)
