"""A long scripted session for prompt caching: the e2e test's and ``bench/long_session.py``'s.

``taskloom -p`` runs against ``FakeAnthropicServer(caching=True)``. The main thread makes 30
requests: it starts two background agents (A and B), a background shell, calls Bash, Read,
Glob and Grep, forks itself once (forks on, an Agent call without ``subagent_type``) and
answers; any request after its script (a notification) gets a short answer. Each agent makes
12 requests (tool calls, then its report); the fork reads a file and reports. Who asks is
told from the request: the fork by its directive, an agent by its first message.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fake_cache import block_tokens, request_blocks
from fake_servers import FakeAnthropicServer

MODEL = "claude-sonnet-4-5"
MAIN_TURNS = 30
AGENT_TURNS = 12
FORK_AT = 12  # the main thread's answer that forks it
FORK_MARK = "<fork_directive>"
PROMPT = "Survey the project: read its notes, run its checks, and report."


def _tool(step: int, who: str) -> tuple[str, dict[str, Any]]:
    """The tool call of ``who``'s answer number ``step``: a cycle of the core tools."""
    kind = step % 4
    if kind == 0:
        return "Bash", {"command": f"echo {who} step {step}", "description": f"step {step}"}
    if kind == 1:
        return "Read", {"file_path": f"notes/{step % 3}.md"}
    if kind == 2:
        return "Glob", {"pattern": "notes/*.md"}
    return "Grep", {"pattern": "line", "path": "notes", "output_mode": "count"}


def _main_answer(step: int) -> dict[str, Any]:
    if step == 0:
        return {
            "text": "Starting two helpers.",
            "tool_calls": [
                ("Agent", {"description": f"job {n}", "prompt": f"job {n}: survey part {n}",
                           "subagent_type": "general-purpose", "run_in_background": True})
                for n in ("A", "B")
            ],
        }  # fmt: skip
    if step == 1:
        command = {"command": "sleep 0.3; echo checks passed", "run_in_background": True}
        return {"text": "Running the checks.", "tool_calls": [("Bash", command)]}
    if step == FORK_AT:
        call = {"description": "fork", "prompt": "Read notes/0.md and report its first line."}
        return {"text": "Forking a reader.", "tool_calls": [("Agent", call)]}
    if step >= MAIN_TURNS - 1:
        return {"text": "All done." if step == MAIN_TURNS - 1 else "Noted."}
    return {"text": f"Step {step}.", "tool_calls": [_tool(step, "main")]}


def _agent_answer(step: int, who: str) -> dict[str, Any]:
    if step >= AGENT_TURNS - 1:
        return {"text": f"{who} report: surveyed."}
    return {"text": "", "tool_calls": [_tool(step, who)]}


def _text(body: dict[str, Any], index: int) -> str:
    messages = body.get("messages") or []
    return json.dumps(messages[index]["content"]) if messages else ""


def who_asks(body: dict[str, Any]) -> str:
    """``main``, ``A``, ``B`` or ``fork``: who made this request."""
    messages = body.get("messages") or []
    if any(m.get("role") == "user" and FORK_MARK in json.dumps(m["content"]) for m in messages):
        return "fork"
    first = _text(body, 0)
    for name in ("A", "B"):
        if f"job {name}: survey part {name}" in first:
            return name
    return "main"


@dataclass
class Responder:
    """Answers each request by who asks and how many answers they already had."""

    asked: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        who = who_asks(body)
        with self.lock:
            self.asked.setdefault(who, []).append(body)
        step = sum(1 for m in body.get("messages") or [] if m.get("role") == "assistant")
        if who == "main":
            return _main_answer(step)
        if who == "fork":
            return {"text": "Scope: notes/0.md\nResult: line 0 of notes 0"}
        return _agent_answer(step, who)


@dataclass
class Run:
    """One run of the session: the process, its result line, each request with its usage."""

    proc: subprocess.CompletedProcess[str]
    result: dict[str, Any]
    served: list[tuple[dict[str, Any], dict[str, Any]]]

    def by_who(self) -> dict[str, list[tuple[dict[str, Any], dict[str, Any]]]]:
        """The requests of each asker, in the order they came."""
        out: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
        for body, usage in self.served:
            out.setdefault(who_asks(body), []).append((body, usage))
        return out


def workspace(root: Path) -> Path:
    """A project directory with a few notes to read."""
    work = root / "project"
    (work / "notes").mkdir(parents=True, exist_ok=True)
    for n in range(3):
        lines = "".join(f"line {i} of notes {n}\n" for i in range(40))
        (work / "notes" / f"{n}.md").write_text(lines)
    return work


def run_session(
    root: Path, env: Callable[[str], dict[str, str]], *, cached: bool = True, timeout: float = 180
) -> Run:
    """Run the session once under ``root``; ``env(url)`` gives the process environment."""
    work = workspace(root)
    with FakeAnthropicServer(responder=Responder(), caching=True) as server:
        environ = env(server.url)
        environ |= {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-test"}
        environ |= {"TASKLOOM_HOME": str(root / "home"), "TASKLOOM_FORK_SUBAGENT": "1"}
        if not cached:
            environ["DISABLE_PROMPT_CACHING"] = "1"
        proc = subprocess.run(
            [sys.executable, "-m", "taskloom", "-p", PROMPT, "--output-format", "stream-json",
             "--verbose", "--model", MODEL, "--dangerously-skip-permissions"],
            capture_output=True, text=True, timeout=timeout, cwd=work, env=environ,
        )  # fmt: skip
        served = list(server.served)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    result = lines[-1] if lines else {}
    return Run(proc, result, served)


def read_share(usage: dict[str, Any]) -> float:
    """The share of a request's input read from the cache."""
    read = usage["cache_read_input_tokens"]
    whole = read + usage["cache_creation_input_tokens"] + usage["input_tokens"]
    return read / whole if whole else 0.0


def prefix_tokens(body: dict[str, Any], messages: int) -> int:
    """The tokens of a request's tools, system and first ``messages`` messages."""
    cut = {**body, "messages": (body.get("messages") or [])[:messages]}
    return sum(block_tokens(b) for _, b in request_blocks(cut))
