"""Hooks in real runs: PreToolUse blocking, subagent start/stop, a hanging hook."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import TIME_FACTOR, clean_env, scripted_argv

pytestmark = pytest.mark.e2e


def run(tmp_path: Path, script: dict[str, Any], settings: dict[str, Any]) -> list[dict[str, Any]]:
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(script))
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    proc = subprocess.run(
        scripted_argv(
            tmp_path / "s.yaml",
            "--dangerously-skip-permissions",
            "--settings",
            str(tmp_path / "settings.json"),
        ),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def hook(command: str, matcher: str = "", timeout: float | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "command", "command": command}
    if timeout is not None:
        entry["timeout"] = timeout
    return {"matcher": matcher, "hooks": [entry]}


def tool_results(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        b
        for e in events
        if e["type"] == "user"
        for b in e["message"]["content"]
        if b.get("type") == "tool_result"
    ]


def test_pre_tool_use_exit_2_blocks_and_its_stderr_reaches_the_model(tmp_path: Path) -> None:
    events = run(
        tmp_path,
        {
            "turns": [
                {"tool_calls": [{"name": "Bash", "input": {"command": "touch made"}}]},
                {"text": "ok"},
            ]
        },
        {"hooks": {"PreToolUse": [hook("echo 'no touching here' >&2; exit 2", "Bash")]}},
    )
    result = tool_results(events)[0]
    assert result["is_error"] is True
    assert "no touching here" in result["content"]
    assert not (tmp_path / "made").exists()


def test_subagent_start_and_stop_hooks_get_the_agent_id_and_type(tmp_path: Path) -> None:
    log = tmp_path / "hook.log"
    record = f"cat >> {log}; echo >> {log}"
    events = run(
        tmp_path,
        {
            "turns": [
                {
                    "tool_calls": [
                        {
                            "name": "Agent",
                            "input": {
                                "description": "look",
                                "prompt": "look",
                                "subagent_type": "Explore",
                            },
                        }
                    ]
                },
                {"text": "done"},
            ],
            "subagents": {"Explore": {"text": "found it"}},
        },
        {"hooks": {"SubagentStart": [hook(record)], "SubagentStop": [hook(record)]}},
    )
    assert events[-1]["subtype"] == "success"
    payloads = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert [p["hook_event_name"] for p in payloads] == ["SubagentStart", "SubagentStop"]
    agent_id = payloads[0]["agent_id"]
    assert agent_id.startswith("a") and len(agent_id) == 9
    assert all(p["agent_id"] == agent_id and p["agent_type"] == "Explore" for p in payloads)
    assert payloads[1]["agent_transcript_path"].endswith(f"agent-{agent_id}.jsonl")


def test_subagent_stop_exit_2_keeps_the_agent_going(tmp_path: Path) -> None:
    flag = tmp_path / "once"
    events = run(
        tmp_path,
        {
            "turns": [
                {"tool_calls": [{"name": "Agent", "input": {"description": "w", "prompt": "w"}}]},
                {"text": "done"},
            ],
            "subagents": {"general-purpose": ["first answer", "second answer after the hook"]},
        },
        {
            "hooks": {
                "SubagentStop": [
                    hook(
                        f"if [ ! -e {flag} ]; then touch {flag}; "
                        "echo 'also check the tests' >&2; exit 2; fi"
                    )
                ]
            }
        },
    )
    agent_result = tool_results(events)[0]["content"]
    assert agent_result.startswith("second answer after the hook")


def test_a_hanging_hook_is_killed_at_its_timeout(tmp_path: Path) -> None:
    started = time.monotonic()
    events = run(
        tmp_path,
        {"turns": [{"tool_calls": [{"name": "Glob", "input": {"pattern": "*"}}]}, {"text": "ok"}]},
        {"hooks": {"PreToolUse": [hook("trap '' TERM; sleep 300", "Glob", timeout=0.5)]}},
    )
    assert time.monotonic() - started < 20 * TIME_FACTOR
    assert tool_results(events)[0]["is_error"] is False  # a timeout is a non-blocking error
    # The autouse fixture fails the test if the hook's sleep survived.
