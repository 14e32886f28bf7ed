"""Usage per agent in the result: a run with three background agents, through ``taskloom -p``."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from coordinator_scenario import texts
from fake_servers import FakeAnthropicServer, ToolCall, Turn
from helpers import clean_env
from team_scenario import events_of

pytestmark = pytest.mark.e2e


class Three:
    """The lead starts three background agents; each runs one command and answers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Turn:
        with self._lock:
            first = " ".join(texts(body["messages"][0]["content"]))
            turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
            for n in (1, 2, 3):
                if f"job {n}." in first:
                    if turns == 0:
                        cmd = ToolCall("Bash", {"command": f"echo {n}"})
                        return Turn(tool_calls=(cmd,), input_tokens=1000 * n, output_tokens=10)
                    return Turn(text=f"done {n}", input_tokens=1100 * n, output_tokens=20 * n,
                                cache_read_input_tokens=50 * n)  # fmt: skip
            seen = " ".join(t for m in body["messages"] if m["role"] == "user"
                            for t in texts(m["content"]))  # fmt: skip
            if turns == 0:
                spawn = tuple(
                    ToolCall("Agent", {"description": f"agent {n}", "prompt": f"job {n}.",
                                       "run_in_background": True})
                    for n in (1, 2, 3)
                )  # fmt: skip
                return Turn(tool_calls=spawn, input_tokens=500, output_tokens=30)
            if seen.count("<task-notification>") >= 3:
                return Turn(text="All done.", input_tokens=900, output_tokens=5)
            return Turn(text="Waiting.", input_tokens=700, output_tokens=5)


def test_the_result_has_each_agent_s_usage_and_they_add_up(tmp_path: Path) -> None:
    with FakeAnthropicServer(responder=Three()) as server:
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="sk-test")
        env["TASKLOOM_HOME"] = str(tmp_path / "home")
        proc = subprocess.run(
            [sys.executable, "-m", "taskloom", "-p", "Fan out.", "--output-format",
             "stream-json", "--verbose", "--model", "claude-sonnet-4-5",
             "--dangerously-skip-permissions"],
            capture_output=True, text=True, timeout=90, cwd=tmp_path, env=env,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = events_of(proc.stdout)[-1]
    assert result["type"] == "result" and result["result"] == "All done.", result
    usage = result["agentUsage"]
    agents = {k: v for k, v in usage.items() if k != "main"}
    assert len(agents) == 3 and "main" in usage
    for entry in agents.values():
        n = int(entry["description"].split()[-1])
        # Its own two responses: the figures the model server sent.
        assert entry["inputTokens"] == 1000 * n + 1100 * n
        assert entry["outputTokens"] == 10 + 20 * n
        assert entry["toolUses"] == 1 and entry["status"] == "completed"
        assert entry["parentAgentId"] is None and entry["agentType"] == "general-purpose"
        assert entry["subtree"]["costUSD"] == pytest.approx(entry["costUSD"])
        assert entry["costUSD"] > 0
    # They add up: to the models' totals, and to the session's cost.
    (model,) = result["modelUsage"].values()
    for name in ("inputTokens", "outputTokens", "cacheReadInputTokens"):
        assert sum(e[name] for e in usage.values()) == model[name], name
    assert sum(e["costUSD"] for e in usage.values()) == pytest.approx(result["total_cost_usd"])
    json.dumps(result)  # plain JSON
    # Live, in each agent's task events: cache tokens, duration and cost so far; the last
    # one's figures are the result's.
    updates: dict[str, dict[str, Any]] = {}
    for event in events_of(proc.stdout):
        if event.get("subtype") == "task_updated" and event["task_id"] in agents:
            updates[event["task_id"]] = event["progress"]
    assert set(updates) == set(agents)
    for agent_id, progress in updates.items():
        n = int(agents[agent_id]["description"].split()[-1])
        assert progress["cache_read_input_tokens"] == 50 * n
        assert progress["cost_usd"] == pytest.approx(agents[agent_id]["costUSD"])
        assert progress["subtree_cost_usd"] == pytest.approx(agents[agent_id]["costUSD"])
        assert 0 <= progress["duration_ms"] == agents[agent_id]["durationMs"]
    # And in taskloom tasks: each agent's tokens, tool calls and cost.
    wide = clean_env(TASKLOOM_HOME=env["TASKLOOM_HOME"], COLUMNS="200")
    listed = subprocess.run(
        [sys.executable, "-m", "taskloom", "tasks", "--session", result["session_id"]],
        capture_output=True, text=True, timeout=60, env=wide,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    for entry in agents.values():
        assert f"${entry['costUSD']:.4f}" in listed.stdout, listed.stdout


class Nested:
    """The lead starts a boss; the boss starts a worker; the worker runs a command."""

    def __call__(self, body: dict[str, Any]) -> Turn:
        first = " ".join(texts(body["messages"][0]["content"]))
        turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if "worker job." in first:
            if turns == 0:
                cmd = ToolCall("Bash", {"command": "echo work"})
                return Turn(tool_calls=(cmd,), input_tokens=3000, output_tokens=30,
                            cache_read_input_tokens=300)  # fmt: skip
            return Turn(text="worked", input_tokens=3100, output_tokens=40)
        if "boss job." in first:
            if turns == 0:
                spawn = ToolCall("Agent", {"description": "worker", "prompt": "worker job."})
                return Turn(tool_calls=(spawn,), input_tokens=2000, output_tokens=20)
            return Turn(text="bossed", input_tokens=2100, output_tokens=25,
                        cache_read_input_tokens=200)  # fmt: skip
        if turns == 0:
            spawn = ToolCall("Agent", {"description": "boss", "prompt": "boss job."})
            return Turn(tool_calls=(spawn,), input_tokens=500, output_tokens=5)
        return Turn(text="All done.", input_tokens=600, output_tokens=6)


def test_agent_usage_task_progress_and_the_listing_agree_for_nested_agents(
    tmp_path: Path,
) -> None:
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text('{"allowNestedAgents": true}')
    with FakeAnthropicServer(responder=Nested()) as server:
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="sk-test")
        env["TASKLOOM_HOME"] = str(tmp_path / "home")
        proc = subprocess.run(
            [sys.executable, "-m", "taskloom", "-p", "Nest.", "--output-format",
             "stream-json", "--verbose", "--model", "claude-sonnet-4-5",
             "--dangerously-skip-permissions"],
            capture_output=True, text=True, timeout=90, cwd=tmp_path, env=env,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = events_of(proc.stdout)
    result = events[-1]
    assert result["result"] == "All done.", result
    usage = result["agentUsage"]
    by_name = {e["description"]: (k, e) for k, e in usage.items() if k != "main"}
    (boss_id, boss), (worker_id, worker) = by_name["boss"], by_name["worker"]
    assert worker["parentAgentId"] == boss_id and boss["parentAgentId"] is None
    tokens = ("inputTokens", "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens")
    for name in (*tokens, "costUSD"):  # the boss's subtree: its own and its worker's
        assert boss["subtree"][name] == pytest.approx(boss[name] + worker[name]), name
    assert boss["inputTokens"] == 4100 and worker["inputTokens"] == 6100
    # The last task event of each agent says what agentUsage says.
    progress: dict[str, dict[str, Any]] = {}
    for event in events:
        if event.get("subtype") == "task_updated" and event["task_id"] in (boss_id, worker_id):
            progress[event["task_id"]] = event["progress"]
    for agent_id, entry in ((boss_id, boss), (worker_id, worker)):
        seen = progress[agent_id]
        assert seen["tool_use_count"] == entry["toolUses"]
        assert seen["output_tokens"] == entry["outputTokens"]
        assert seen["cache_read_input_tokens"] == entry["cacheReadInputTokens"]
        assert seen["cost_usd"] == pytest.approx(entry["costUSD"])
        assert seen["subtree_cost_usd"] == pytest.approx(entry["subtree"]["costUSD"])
        assert seen["subtree_tokens"] == sum(entry["subtree"][name] for name in tokens)
    # And taskloom tasks lists the same figures.
    home = clean_env(TASKLOOM_HOME=env["TASKLOOM_HOME"])
    listed = subprocess.run(
        [sys.executable, "-m", "taskloom", "tasks", "--session", result["session_id"], "--json"],
        capture_output=True, text=True, timeout=60, env=home,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    rows = {row["id"]: row for row in json.loads(listed.stdout)}
    for agent_id, entry in ((boss_id, boss), (worker_id, worker)):
        row = rows[agent_id]
        assert row["tool_uses"] == entry["toolUses"]
        assert row["cost_usd"] == pytest.approx(entry["costUSD"])
        assert row["subtree_cost_usd"] == pytest.approx(entry["subtree"]["costUSD"])
        assert row["subtree_tokens"] == sum(entry["subtree"][name] for name in tokens)
    assert rows[boss_id]["subtree_tool_uses"] == boss["toolUses"] + worker["toolUses"]
