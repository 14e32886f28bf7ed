"""What command hooks in settings read on stdin: Claude Code's fields, each tool's own shape.

One ``taskloom -p`` run against the fake Anthropic server calls every core tool once or more,
with a hook on every event that appends its stdin to a log; the tests then check each event's
fields and each tool's ``tool_response`` against the shapes the reference CLI gives (2.1.x,
captured with the same hook and script).
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fake_servers import FakeAnthropicServer, ToolCall, Turn
from helpers import TIME_FACTOR, clean_env

pytestmark = pytest.mark.e2e

EVENTS = [
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "Stop",
    "SubagentStart",
    "SubagentStop",
    "SessionEnd",
]
#: A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)

#: taskloom as the tests run it: on the fake server's model, every call allowed.
TASKLOOM = [sys.executable, "-m", "taskloom", "--model", "claude-sonnet-4-5"]
TASKLOOM += ["--dangerously-skip-permissions"]

Step = Callable[[list[dict[str, Any]]], ToolCall]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if block.get("type") == "text":
            parts.append(block["text"])
        elif block.get("type") == "tool_result":
            parts.append(_text(block.get("content") or ""))
    return "\n".join(parts)


def _task_ids(messages: list[dict[str, Any]]) -> list[str]:
    """The background task ids taskloom's Bash results name, in order."""
    said = "\n".join(_text(m["content"]) for m in messages if m["role"] == "user")
    return re.findall(r"in background with ID: (\S+?)\.", said)


def _steps(work: Path) -> list[Step]:
    a, g = str(work / "a.txt"), str(work / "g")

    def call(name: str, **tool_input: Any) -> Step:
        return lambda _messages: ToolCall(name, tool_input)

    return [
        call("Bash", command="echo hello; echo err >&2", description="say hello"),
        call("Bash", command="echo out; exit 3", description="fail"),
        call("Bash", command="sleep 0.2; echo bg", run_in_background=True, description="bg"),
        call("Write", file_path=a, content="one\ntwo\n"),
        call("Read", file_path=a),
        call("Edit", file_path=a, old_string="two", new_string="three"),
        call("Write", file_path=a, content="x\n"),
        call("Glob", pattern="*.txt", path=str(work)),
        call("Grep", pattern="o", path=g),
        call("Grep", pattern="o", path=g, output_mode="content", **{"-n": True}),
        call("Grep", pattern="o", path=g, output_mode="count"),
        lambda m: ToolCall("TaskOutput", {"task_id": _task_ids(m)[0], "timeout": 20000}),
        call("Bash", command="sleep 30", run_in_background=True, description="long"),
        lambda m: ToolCall("TaskStop", {"task_id": _task_ids(m)[-1]}),
        call("Agent", description="sub", prompt="SUBTASK please", subagent_type="general-purpose"),
        call("Read", file_path=str(work / "missing.txt")),
        call("Read", file_path=str(work / "img.png")),
    ]


def _responder(steps: list[Step]) -> Callable[[dict[str, Any]], Turn]:
    def answer(body: dict[str, Any]) -> Turn:
        messages = body["messages"]
        done = sum(1 for m in messages if m["role"] == "assistant")
        if "SUBTASK" in _text(messages[0]["content"]):  # the subagent: one command, an answer
            if done == 0:
                return Turn(tool_calls=(ToolCall("Bash", {"command": "echo sub"}),))
            return Turn(text="sub done")
        if done < len(steps):
            return Turn(text="step", tool_calls=(steps[done](messages),))
        return Turn(text="all done")

    return answer


@pytest.fixture(scope="module")
def payloads(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Every hook input of the run, in the order the hooks ran."""
    root = tmp_path_factory.mktemp("payloads")
    work = root / "work"
    (work / "g").mkdir(parents=True)
    (work / "g" / "b.txt").write_text("fox\nbar\nbox\n")
    (work / "g" / "c.txt").write_text("cow\n")
    (work / "img.png").write_bytes(PNG)
    log = root / "hooks.jsonl"
    record = {"type": "command", "command": f"cat >> {log}; echo >> {log}"}
    settings = {"hooks": {e: [{"matcher": "", "hooks": [record]}] for e in EVENTS}}
    (root / "settings.json").write_text(json.dumps(settings))
    settings_file = root / "settings.json"
    with FakeAnthropicServer(_responder(_steps(work))) as server:
        env = clean_env(
            ANTHROPIC_BASE_URL=server.url,
            ANTHROPIC_API_KEY="test",
            TASKLOOM_HOME=str(root / "home"),
        )
        proc = subprocess.run(
            [
                *TASKLOOM,
                "-p",
                "MAIN go",
                "--output-format",
                "json",
                "--settings",
                str(settings_file),
            ],
            capture_output=True,
            text=True,
            timeout=120 * TIME_FACTOR,
            cwd=work,
            env=env,
        )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["result"] == "all done"
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _of(
    payloads: list[dict[str, Any]], event: str, tool: str | None = None
) -> list[dict[str, Any]]:
    return [
        p
        for p in payloads
        if p["hook_event_name"] == event and (tool is None or p.get("tool_name") == tool)
    ]


def _responses(payloads: list[dict[str, Any]], tool: str) -> list[Any]:
    """The main thread's ``tool_response``s of ``tool``, in order."""
    return [p["tool_response"] for p in _of(payloads, "PostToolUse", tool) if "agent_id" not in p]


COMMON = {"session_id", "transcript_path", "cwd", "hook_event_name"}


def test_session_and_prompt_events_carry_claude_codes_fields(
    payloads: list[dict[str, Any]],
) -> None:
    (start,) = _of(payloads, "SessionStart")
    assert set(start) == COMMON | {"source", "model"} and start["source"] == "startup"
    assert start["model"] == "claude-sonnet-4-5"
    (prompt,) = _of(payloads, "UserPromptSubmit")
    assert set(prompt) == COMMON | {"permission_mode", "prompt"}
    assert (prompt["prompt"], prompt["permission_mode"]) == ("MAIN go", "bypassPermissions")
    assert Path(prompt["cwd"]).name == "work"
    assert len({p["session_id"] for p in payloads}) == 1
    (stop,) = _of(payloads, "Stop")
    assert stop["last_assistant_message"] == "all done" and stop["stop_hook_active"] is False
    (end,) = _of(payloads, "SessionEnd")
    assert set(end) == COMMON | {"reason"}


def test_tool_events_name_the_call_and_the_main_thread_names_no_agent(
    payloads: list[dict[str, Any]],
) -> None:
    pre = _of(payloads, "PreToolUse", "Bash")[0]
    assert set(pre) == COMMON | {"permission_mode", "tool_name", "tool_input", "tool_use_id"}
    assert pre["tool_input"] == {"command": "echo hello; echo err >&2", "description": "say hello"}
    post = _of(payloads, "PostToolUse", "Bash")[0]
    assert post["tool_use_id"] == pre["tool_use_id"]
    assert set(post) == set(pre) | {"tool_response", "duration_ms"}
    assert isinstance(post["duration_ms"], int) and post["duration_ms"] >= 0
    failed = _of(payloads, "PostToolUseFailure", "Bash")
    assert [f["tool_input"]["command"] for f in failed] == ["echo out; exit 3"]
    assert set(failed[0]) == set(pre) | {"error", "is_interrupt", "duration_ms"}
    assert "Exit code 3" in failed[0]["error"] and "out" in failed[0]["error"]
    assert failed[0]["is_interrupt"] is False
    (missing,) = _of(payloads, "PostToolUseFailure", "Read")
    assert "missing.txt" in missing["error"]


def test_bash_response_has_stdout_stderr_interrupted_and_its_background_task(
    payloads: list[dict[str, Any]],
) -> None:
    hello, background, long = _responses(payloads, "Bash")
    assert hello == {
        "stdout": "hello\nerr",
        "stderr": "",
        "interrupted": False,
        "isImage": False,
        "noOutputExpected": False,
    }
    assert {k: v for k, v in background.items() if k != "backgroundTaskId"} == {
        "stdout": "",
        "stderr": "",
        "interrupted": False,
        "isImage": False,
        "noOutputExpected": False,
    }
    assert background["backgroundTaskId"] != long["backgroundTaskId"]
    (stop,) = _responses(payloads, "TaskStop")
    assert stop == {
        "message": f"Successfully stopped task: {long['backgroundTaskId']} (sleep 30)",
        "task_id": long["backgroundTaskId"],
        "task_type": "local_bash",
        "command": "sleep 30",
    }
    (output,) = _responses(payloads, "TaskOutput")
    assert output["retrieval_status"] == "success"
    task = output["task"]
    assert (task["task_id"], task["task_type"]) == (background["backgroundTaskId"], "local_bash")
    assert (task["status"], task["exitCode"], task["output"].strip()) == ("completed", 0, "bg")


def test_file_tools_give_claude_codes_shapes(payloads: list[dict[str, Any]]) -> None:
    path = _of(payloads, "PreToolUse", "Write")[0]["tool_input"]["file_path"]
    created, updated = _responses(payloads, "Write")
    assert created == {
        "type": "create",
        "filePath": path,
        "content": "one\ntwo\n",
        "structuredPatch": [],
        "originalFile": None,
        "userModified": False,
    }
    text, image = _responses(payloads, "Read")
    assert text == {
        "type": "text",
        "file": {
            "filePath": path,
            "content": "one\ntwo",
            "numLines": 2,
            "startLine": 1,
            "totalLines": 2,
        },
    }
    (edit,) = _responses(payloads, "Edit")
    assert edit == {
        "filePath": path,
        "oldString": "two",
        "newString": "three",
        "originalFile": "one\ntwo\n",
        "structuredPatch": [
            {"oldStart": 1, "oldLines": 2, "newStart": 1, "newLines": 2,
             "lines": [" one", "-two", "+three"]},
        ],
        "userModified": False,
        "replaceAll": False,
    }  # fmt: skip
    assert updated["type"] == "update" and updated["originalFile"] == "one\nthree\n"
    assert updated["structuredPatch"] == [
        {"oldStart": 1, "oldLines": 2, "newStart": 1, "newLines": 1,
         "lines": ["-one", "-three", "+x"]},
    ]  # fmt: skip
    assert image["type"] == "image"
    assert base64.b64decode(image["file"]["base64"]) == PNG
    assert image["file"]["type"] == "image/png" and image["file"]["originalSize"] == len(PNG)
    assert image["file"]["dimensions"] == {
        "originalWidth": 1,
        "originalHeight": 1,
        "displayWidth": 1,
        "displayHeight": 1,
    }


def test_search_tools_give_claude_codes_shapes(payloads: list[dict[str, Any]]) -> None:
    (glob,) = _responses(payloads, "Glob")
    assert sorted(glob.pop("filenames")) == ["a.txt", "g/b.txt", "g/c.txt"]  # relative to cwd
    assert isinstance(glob.pop("durationMs"), int)
    assert glob == {"numFiles": 3, "truncated": False, "totalMatches": 3, "countIsComplete": True}
    files, content, count = _responses(payloads, "Grep")
    assert files["mode"] == "files_with_matches"
    assert sorted(files.pop("filenames")) == ["g/b.txt", "g/c.txt"]
    assert files == {"mode": "files_with_matches", "numFiles": 2, "totalFiles": 2}
    lines = sorted(content.pop("content").splitlines())
    assert lines == ["g/b.txt:1:fox", "g/b.txt:3:box", "g/c.txt:1:cow"]
    assert content == {
        "mode": "content",
        "numFiles": 0,
        "filenames": [],
        "numLines": 3,
        "totalLines": 3,
    }
    assert sorted(count.pop("content").splitlines()) == ["g/b.txt:2", "g/c.txt:1"]
    assert count == {"mode": "count", "numFiles": 2, "filenames": [], "numMatches": 3}


def test_subagent_events_and_the_agent_response(payloads: list[dict[str, Any]]) -> None:
    (start,) = _of(payloads, "SubagentStart")
    assert set(start) == COMMON | {"agent_id", "agent_type"}
    # transcript_path is the session's; the agent's own is agent_transcript_path.
    (main,) = _of(payloads, "SessionStart")
    assert start["transcript_path"] == main["transcript_path"]
    assert start["agent_type"] == "general-purpose"
    (stop,) = _of(payloads, "SubagentStop")
    assert (stop["agent_id"], stop["agent_type"]) == (start["agent_id"], "general-purpose")
    assert stop["last_assistant_message"] == "sub done" and stop["stop_hook_active"] is False
    assert Path(stop["agent_transcript_path"]).is_file()
    assert stop["transcript_path"] == main["transcript_path"] != stop["agent_transcript_path"]
    (inside,) = [p for p in _of(payloads, "PostToolUse", "Bash") if "agent_id" in p]
    assert (inside["agent_id"], inside["agent_type"]) == (start["agent_id"], "general-purpose")
    assert inside["tool_response"]["stdout"] == "sub"
    (agent,) = _responses(payloads, "Agent")
    assert agent["status"] == "completed" and agent["agentId"] == start["agent_id"]
    assert (agent["agentType"], agent["prompt"]) == ("general-purpose", "SUBTASK please")
    assert agent["content"] == [{"type": "text", "text": "sub done"}]
    assert agent["totalToolUseCount"] == 1 and agent["totalTokens"] > 0
    assert agent["resolvedModel"] == "claude-sonnet-4-5"
    # Its latest response's usage, as the reference gives it (that response's tokens only).
    usage = agent["usage"]
    counts = ["input_tokens", "output_tokens", "cache_creation_input_tokens"]
    counts.append("cache_read_input_tokens")
    assert set(usage) == {*counts, "server_tool_use", "service_tier", "cache_creation"}
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert sum(usage[k] for k in counts) <= agent["totalTokens"]


def test_a_jq_hook_reads_the_bash_output(tmp_path: Path) -> None:
    assert shutil.which("jq"), "jq is needed (the CI installs it)"
    seen = tmp_path / "seen.txt"
    hook = {"type": "command", "command": f"jq -r .tool_response.stdout > {seen}"}
    settings = {"hooks": {"PostToolUse": [{"matcher": "Bash", "hooks": [hook]}]}}
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("Bash", {"command": "echo from-the-command"})])
        server.add_turn(text="done")
        env = clean_env(
            ANTHROPIC_BASE_URL=server.url,
            ANTHROPIC_API_KEY="test",
            TASKLOOM_HOME=str(tmp_path / "home"),
        )
        proc = subprocess.run(
            [*TASKLOOM, "-p", "go", "--settings", str(tmp_path / "settings.json")],
            capture_output=True,
            text=True,
            timeout=60 * TIME_FACTOR,
            cwd=tmp_path,
            env=env,
        )
    assert proc.returncode == 0, proc.stderr
    assert seen.read_text() == "from-the-command\n"
