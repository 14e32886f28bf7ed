"""Custom slash commands: ``/cmd args`` expanded in a real session, in -p, and listed.

Only the model is scripted (a FunctionModel sees each request); the command files, the
session, the permission policy and Bash are real.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import taskloom
from helpers import clean_env
from taskloom.messages import Message, TextBlock
from taskloom.models.base import ModelRequest
from taskloom.testing import FunctionModel, ToolCall, Turn

REVIEW = """\
---
description: Review a file for bugs
argument-hint: [file] [focus]
allowed-tools: Bash(touch:*)
---
Review $0 with a focus on $1. Then run `touch reviewed.txt`.
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    commands = root / ".claude" / "commands"
    (commands / "git").mkdir(parents=True)
    (commands / "review.md").write_text(REVIEW)
    (commands / "git" / "log.md").write_text("Summarize the log of $ARGUMENTS.\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def texts(message: Message) -> list[str]:
    return [b.text for b in message.content if isinstance(b, TextBlock)]


async def test_a_command_expands_and_its_allowed_tools_hold_for_its_turn(project: Path) -> None:
    seen: list[ModelRequest] = []

    def respond(request: ModelRequest) -> Any:
        seen.append(request)
        if len(seen) == 1:
            return Turn(tool_calls=[ToolCall("Bash", {"command": "touch reviewed.txt"})])
        if len(seen) == 3:
            return Turn(tool_calls=[ToolCall("Bash", {"command": "touch again.txt"})])
        return "done"

    async with taskloom.Harness(model=FunctionModel(respond), cwd=project) as h:
        events = [e async for e in h.run("/review app.py 'error handling'")]
        # The next turn: the command's tools are asked about again (and denied: headless).
        later = [e async for e in h.run("touch again")]
        await h.end()
    first = texts(seen[0].messages[0])
    assert first[0] == (
        "<command-message>review is running…</command-message>\n"
        "<command-name>/review</command-name>\n"
        "<command-args>app.py 'error handling'</command-args>"
    )
    assert first[1] == (
        "Review app.py with a focus on error handling. Then run `touch reviewed.txt`."
    )
    ran = [e.result for e in events if isinstance(e, taskloom.ToolDone)]
    assert [r.is_error for r in ran] == [False]
    assert (project / "reviewed.txt").exists()
    denied = [e.result for e in later if isinstance(e, taskloom.ToolDone)]
    assert [r.is_error for r in denied] == [True] and not (project / "again.txt").exists()


async def test_namespaced_and_unknown_commands(project: Path) -> None:
    seen: list[ModelRequest] = []

    def respond(request: ModelRequest) -> str:
        seen.append(request)
        return "ok"

    async with taskloom.Harness(model=FunctionModel(respond), cwd=project) as h:
        [e async for e in h.run("/git:log main")]
        [e async for e in h.run("/nosuch thing")]
        await h.end()
    assert texts(seen[0].messages[0])[1] == "Summarize the log of main."
    # Not a command: the model gets the prompt as it is.
    assert texts(seen[1].messages[-1]) == ["/nosuch thing"]


@pytest.mark.e2e
def test_print_mode_runs_a_command_and_lists_commands_and_skills(
    project: Path, tmp_path: Path
) -> None:
    skill = project / ".claude" / "skills" / "notes" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\ndescription: How we write notes\n---\nWrite notes in NOTES.md.\n")
    turns = tmp_path / "turns.yaml"
    turns.write_text(
        json.dumps(
            [
                {"tool_calls": [{"name": "Bash", "input": {"command": "touch reviewed.txt"}}]},
                "Reviewed.",
            ]
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "taskloom", "-p", "/review app.py style",
         "--model", f"scripted:{turns}", "--output-format", "stream-json", "--verbose"],
        cwd=project, env=clean_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    init = lines[0]
    assert init["subtype"] == "init"
    assert init["skills"] == ["notes"]
    assert init["slash_commands"] == ["compact", "git:log", "notes", "review"]
    assert "Skill" in init["tools"]
    # The model was given the command's instructions (its transcript records the prompt).
    (transcript,) = (tmp_path / "claude" / "projects").rglob(f"{init['session_id']}.jsonl")
    first = json.loads(transcript.read_text().splitlines()[0])
    assert "<command-name>/review</command-name>" in json.dumps(first)
    assert "Review app.py with a focus on style." in json.dumps(first)
    # Its allowed-tools held: Bash ran with no rule allowing it, headless.
    assert (project / "reviewed.txt").exists()
    assert lines[-1]["result"] == "Reviewed."


async def test_the_initialize_answer_lists_commands_and_skills(project: Path) -> None:
    from taskloom.cli.stream_init import initialize_answer
    from taskloom.session import COMPACT_COMMAND

    async with taskloom.Harness(model=FunctionModel(lambda r: "ok"), cwd=project) as h:
        answer = initialize_answer(h, None)
        await h.end()
    assert answer["commands"] == [
        COMPACT_COMMAND,
        {"name": "git:log", "description": "Summarize the log of $ARGUMENTS.", "argumentHint": ""},
        {
            "name": "review",
            "description": "Review a file for bugs",
            "argumentHint": "[file] [focus]",
        },
    ]


def test_tab_completes_custom_command_names() -> None:
    from taskloom.repl.commands import complete

    custom = ["review", "git:log", "git:diff"]
    assert complete("/rev", custom) == ("/review ", ["review"])
    assert complete("/git", custom) == ("/git:", ["git:log", "git:diff"])
    assert complete("/re", custom) == ("/re", ["resume", "review"])


class Host:
    """The REPL's side of a command, as a test's: what it says and queues."""

    def __init__(self, harness: Any) -> None:
        self.harness = harness
        self.busy = False
        self.said: list[tuple[str, str]] = []
        self.queued: list[str] = []

    def say(self, text: str, style: str = "info") -> None:
        self.said.append((text, style))

    def exit(self, code: int = 0) -> None:
        raise AssertionError("not expected")

    async def switch(self, resume: str | None) -> None:
        raise AssertionError("not expected")

    def model_changed(self) -> None:
        raise AssertionError("not expected")

    def queue(self, prompt: str) -> None:
        self.queued.append(prompt)


async def test_the_repl_sends_a_custom_command_as_a_turn_and_lists_it(project: Path) -> None:
    from taskloom.repl.commands import run_command

    async with taskloom.Harness(model=FunctionModel(lambda r: "ok"), cwd=project) as h:
        host = Host(h)
        await run_command(host, "/review app.py")
        await run_command(host, "/help")
        await run_command(host, "/nosuch")
        await h.end()
    assert host.queued == ["/review app.py"]
    (help_text, _), (unknown, style) = host.said
    assert "/review [file] [focus] Review a file for bugs (project)" in help_text
    assert style == "error" and "/git:log, /review" in unknown
