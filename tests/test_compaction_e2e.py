"""Compaction end to end: real ``taskloom`` processes against the fake Anthropic server.

The server's responder plays the model by what each request holds: it reports usage that
climbs (``Turn(input_tokens=...)``) so that the window of claude-sonnet-4-5 (200,000 tokens)
passes the clearing threshold (60 %), then the compaction one (85 %); it answers the summary
request (its last user text asks for a ``<summary>``) with a summary, and what comes after a
compaction (its first message says the session is continued) with small usage again.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import tmux_driver
from fake_servers import ErrorReply, FakeAnthropicServer, ToolCall, Turn
from helpers import TIME_FACTOR, clean_env, json_lines, wait_until
from taskloom.context.clearing import STUB_PREFIX
from taskloom.context.compaction import CONTINUED
from test_repl import anthropic_env, enter, leave, start

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60 * TIME_FACTOR)]

MODEL = "claude-sonnet-4-5"
SUMMARY_ASK = "Your task now is to write a detailed summary"
#: What the summary says (the model's answer: its analysis is dropped, its summary kept).
SUMMARY = "1. The user asked for five steps of work. SUMMARY-MARK"
SUMMARY_ANSWER = f"<analysis>went through it</analysis>\n<summary>{SUMMARY}</summary>"
#: The big output of the first step: cleared once the window passes 60 %.
BIG = "seq 1 3000"


def texts(content: Any) -> list[str]:
    """The texts of a message's content, tool results' included."""
    if isinstance(content, str):
        return [content]
    found = []
    for block in content:
        if block.get("type") == "text":
            found.append(block["text"])
        elif block.get("type") == "tool_result":
            found += texts(block.get("content") or "")
    return found


def user_text(body: dict[str, Any]) -> str:
    """Every text of the request's user messages."""
    users = [m for m in body["messages"] if m["role"] == "user"]
    return "\n".join(t for m in users for t in texts(m["content"]))


def commands(body: dict[str, Any]) -> list[str]:
    """The Bash commands the request's assistant messages called, in order."""
    return [
        b["input"]["command"]
        for m in body["messages"]
        if m["role"] == "assistant" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_use" and b["name"] == "Bash"
    ]


def is_summary(body: dict[str, Any]) -> bool:
    return SUMMARY_ASK in "\n".join(texts(body["messages"][-1]["content"]))


def after_compaction(body: dict[str, Any]) -> bool:
    first = texts(body["messages"][0]["content"])
    return bool(first) and first[0].startswith(CONTINUED)


def bash(command: str, **more: Any) -> ToolCall:
    return ToolCall("Bash", {"command": command, **more})


class Filling:
    """The model of a session whose context fills: five steps, each reported fuller.

    Step 1 prints a big output (and, with ``gate``, starts a background command that ends
    once the first request after the compaction arrives); steps 2 to 5 echo. Step 4's answer
    reports 130,000 tokens (past 60 %: the next request clears step 1's result), step 5's
    175,000 (past 85 %: the next request is preceded by a compaction). After it: ``stall``
    holds the next request unanswered (a process to kill), else the model waits for the
    background command and ends.
    """

    #: The usage each step's answer reports (the context its request held).
    USAGE = (2_000, 60_000, 100_000, 130_000, 175_000)

    def __init__(self, gate: Path | None = None, *, stall: bool = False) -> None:
        self.gate = gate
        self.stall = stall
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Turn:
        with self._lock:
            self.requests.append(body)
        if is_summary(body):
            return Turn(text=SUMMARY_ANSWER, input_tokens=175_500, output_tokens=400)
        if after_compaction(body):
            if self.gate is not None:  # the background command ends after the compaction
                self.gate.touch()
            if self.stall:
                return Turn(stall_at=0)
            if "<task-notification>" in user_text(body):
                return Turn(text="All done.", input_tokens=3_000)
            return Turn(text="Waiting for the background command.", input_tokens=2_500)
        step = len(commands(body))
        if step == 0:
            calls = [bash(BIG)]
            if self.gate is not None:
                wait = f"while [ ! -f {self.gate} ]; do sleep 0.05; done; echo bg-done"
                calls.append(bash(wait, run_in_background=True, description="waits"))
            return Turn(text="Step 1.", tool_calls=tuple(calls), input_tokens=self.USAGE[0])
        index = step - (1 if self.gate is not None else 0)  # the background call counts
        return Turn(
            text=f"Step {index + 1}.",
            tool_calls=(bash(f"echo step-{index + 1}"),),
            input_tokens=self.USAGE[min(index, len(self.USAGE) - 1)],
        )

    @property
    def summaries(self) -> list[int]:
        """The indexes of the summary requests."""
        return [i for i, body in enumerate(self.requests) if is_summary(body)]


def argv(prompt: str, *more: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "taskloom",
        "-p",
        prompt,
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        MODEL,
        "--dangerously-skip-permissions",
        *more,
    ]


def env_for(server: FakeAnthropicServer, tmp_path: Path) -> dict[str, str]:
    return clean_env(
        ANTHROPIC_BASE_URL=server.url,
        ANTHROPIC_API_KEY="test",
        TASKLOOM_HOME=str(tmp_path / "home"),
    )


def run(argv_: list[str], server: FakeAnthropicServer, tmp_path: Path) -> list[dict[str, Any]]:
    proc = subprocess.run(
        argv_,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env_for(server, tmp_path),
        timeout=30 * TIME_FACTOR,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json_lines(proc.stdout)


def boundaries(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("type") == "system" and e["subtype"] == "compact_boundary"]


def test_a_filling_context_is_cleared_then_compacted_and_goes_on(tmp_path: Path) -> None:
    script = Filling(tmp_path / "gate")
    with FakeAnthropicServer(responder=script) as server:
        events = run(argv("Do the five steps."), server, tmp_path)
    result = events[-1]
    assert result["type"] == "result" and result["subtype"] == "success", result
    assert result["result"] == "All done."
    # Clearing: the request after step 3 still holds step 1's big output; the one after step
    # 4 (past 60 %) has the stub naming the file that holds it instead.
    requests = script.requests
    before = next(b for b in requests if commands(b)[-1:] == ["echo step-3"])
    assert "\n2999\n3000" in user_text(before)
    cleared = next(b for b in requests if commands(b)[-1:] == ["echo step-4"])
    seen = user_text(cleared)
    assert "\n2999\n3000" not in seen
    assert f"{STUB_PREFIX}the full output of Bash is in " in seen
    stub_path = Path(seen.split(f"{STUB_PREFIX}the full output of Bash is in ")[1].split("]")[0])
    assert stub_path.read_text().rstrip().endswith("2999\n3000")
    # Compaction: one summary request, then a boundary line on the stream.
    [at] = script.summaries
    assert commands(requests[at])[-1] == "echo step-5"
    [boundary] = boundaries(events)
    assert boundary["compact_metadata"]["trigger"] == "auto"
    assert boundary["compact_metadata"]["pre_tokens"] >= 175_000
    # The request after it: the summary, then the last two turns as they were.
    after = requests[at + 1]
    head = texts(after["messages"][0]["content"])
    assert head[0].startswith(CONTINUED) and SUMMARY in head[0] and "went through" not in head[0]
    assert commands(after) == ["echo step-4", "echo step-5"]
    assert BIG not in json.dumps(after["messages"])
    # The background command still running was listed from the runtime, and its end, after
    # the compaction, reached the model as a notification.
    task_ids = [
        e["task_id"] for e in events if e.get("subtype") == "task_started" and e["is_backgrounded"]
    ]
    assert len(task_ids) == 1 and task_ids[0] in "\n".join(head)
    assert not any("<task-notification>" in user_text(b) for b in requests[: at + 1])
    notified = [b for b in requests[at + 1 :] if "<task-notification>" in user_text(b)]
    assert notified and task_ids[0] in user_text(notified[0])
    assert "completed" in user_text(notified[0])


def test_resume_after_a_sigkill_goes_on_from_the_boundary(tmp_path: Path) -> None:
    script = Filling(stall=True)
    with FakeAnthropicServer(responder=script) as server:
        with (tmp_path / "stderr").open("w") as stderr:
            proc = subprocess.Popen(
                argv("Do the five steps."),
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                cwd=tmp_path,
                env=env_for(server, tmp_path),
            )
        try:
            # The request after the compaction is held unanswered: killed in the middle.
            _wait(
                lambda: bool(script.requests) and after_compaction(script.requests[-1]),
                "the request after the compaction",
            )
            proc.send_signal(signal.SIGKILL)
            out, _ = proc.communicate(timeout=10 * TIME_FACTOR)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == -signal.SIGKILL
        lines = json_lines(out)
        assert len(boundaries(lines)) == 1 and len(script.summaries) == 1
        session_id = lines[0]["session_id"]
        old = len(script.requests)
        script.stall = False
        events = run(argv("Carry on.", "--resume", session_id), server, tmp_path)
    assert events[-1]["subtype"] == "success" and events[-1]["session_id"] == session_id
    first = script.requests[old]
    head = texts(first["messages"][0]["content"])
    assert head[0].startswith(CONTINUED) and SUMMARY in head[0]
    # From the boundary: the kept turns, not the old ones; the new prompt at the end.
    assert commands(first) == ["echo step-4", "echo step-5"]
    assert BIG not in json.dumps(first["messages"])
    assert "Carry on." in "\n".join(texts(first["messages"][-1]["content"]))


def test_a_prompt_too_long_is_compacted_once_and_retried(tmp_path: Path) -> None:
    too_long = ErrorReply(
        400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"
    )
    with FakeAnthropicServer() as server:
        server.add_turn(text="Looking.", tool_calls=[bash("echo looked")], input_tokens=5_000)
        server.add(too_long)
        server.add(Turn(text=SUMMARY_ANSWER))
        server.add_turn(text="Done after the retry.", input_tokens=4_000)
        events = run(argv("Look around."), server, tmp_path)
        bodies = [r.body for r in server.requests]
    assert events[-1]["subtype"] == "success", events[-1]
    assert events[-1]["result"] == "Done after the retry."
    assert len(bodies) == 4 and is_summary(bodies[2])
    [boundary] = boundaries(events)
    assert boundary["compact_metadata"]["trigger"] == "auto"
    # The refused request and the retry: the same turn, the retry from the summary.
    assert commands(bodies[1]) == ["echo looked"] and not after_compaction(bodies[1])
    assert after_compaction(bodies[3]) and SUMMARY in texts(bodies[3]["messages"][0]["content"])[0]
    assert commands(bodies[3]) == ["echo looked"]  # the last turns are kept


def test_a_second_prompt_too_long_is_the_run_s_error_not_a_loop(tmp_path: Path) -> None:
    too_long = ErrorReply(
        400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"
    )
    with FakeAnthropicServer() as server:
        server.add_turn(text="Looking.", tool_calls=[bash("echo looked")], input_tokens=5_000)
        server.add(too_long, Turn(text=SUMMARY_ANSWER), too_long)
        proc = subprocess.run(
            argv("Look around."),
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env_for(server, tmp_path),
            timeout=30 * TIME_FACTOR,
        )
        assert server.pending == 0 and len(server.requests) == 4
    result = json_lines(proc.stdout)[-1]
    assert proc.returncode == 1 and result["subtype"] == "error_during_execution"
    assert "prompt is too long" in " ".join(result["errors"])


def _wait(cond: Any, what: str) -> None:
    """Wait (bounded) from a sync test for ``cond()``."""
    import asyncio

    asyncio.run(wait_until(cond, 10, what))


class LeadFilling:
    """A lead whose context fills while its teammate alice works, and her message to it.

    The lead spawns alice, then runs a command whose answer reports 180,000 tokens: its next
    request is preceded by a compaction. Alice waits (a command) for ``gate``, which the lead's
    summary request makes, then sends the lead her report: it arrives while the lead compacts
    (the summary is streamed slowly) or just after. The lead ends once it has her report.
    """

    REPORT = "alice: the parser is fixed. ALICE-MARK"

    def __init__(self, gate: Path) -> None:
        self.gate = gate
        self.lead: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Turn:
        system = body.get("system")
        system_text = system if isinstance(system, str) else json.dumps(system)
        with self._lock:
            if "You are alice, a member of the agent team" in system_text:
                return self._alice(body)
            self.lead.append(body)
        if is_summary(body):
            self.gate.touch()
            return Turn(text=SUMMARY_ANSWER, input_tokens=180_500, delay=0.1 * TIME_FACTOR)
        if after_compaction(body):
            if "ALICE-MARK" in user_text(body):
                return Turn(text="Alice reported.", input_tokens=3_000)
            return Turn(text="Waiting for alice.", input_tokens=2_500)
        calls = [b for m in body["messages"] if m["role"] == "assistant" for b in m["content"]]
        if not any(b.get("type") == "tool_use" for b in calls):
            spawn = {"description": "a", "prompt": "Fix the parser.", "name": "alice"}
            spawn["team_name"] = "alpha"
            return Turn(tool_calls=(ToolCall("Agent", spawn),), input_tokens=2_000)
        return Turn(tool_calls=(bash("echo lead-work"),), input_tokens=180_000)

    def _alice(self, body: dict[str, Any]) -> Turn:
        names = [
            b["name"]
            for m in body["messages"]
            if m["role"] == "assistant"
            for b in m["content"]
            if b.get("type") == "tool_use"
        ]
        if not names:
            return Turn(tool_calls=(bash(f"while [ ! -f {self.gate} ]; do sleep 0.05; done"),))
        if "SendMessage" not in names:
            report = {"to": "team-lead", "message": self.REPORT, "summary": "parser fixed"}
            return Turn(tool_calls=(ToolCall("SendMessage", report),))
        return Turn(text="alice idle")


def test_a_teammate_s_message_sent_while_the_lead_compacts_is_delivered(tmp_path: Path) -> None:
    script = LeadFilling(tmp_path / "gate")
    with FakeAnthropicServer(responder=script) as server:
        events = run(argv("Split the work.", "--teams"), server, tmp_path)
    assert events[-1]["subtype"] == "success" and events[-1]["result"] == "Alice reported."
    assert len(boundaries(events)) == 1
    [at] = [i for i, body in enumerate(script.lead) if is_summary(body)]
    # Sent once the summary was asked for: no request before holds it, one after does.
    assert not any("ALICE-MARK" in user_text(b) for b in script.lead[: at + 1])
    delivered = [b for b in script.lead[at + 1 :] if "ALICE-MARK" in user_text(b)]
    assert delivered and after_compaction(delivered[0])
    assert user_text(delivered[0]).count("ALICE-MARK") == 1
    # The summary told the lead its teammate still runs (from the runtime, not the model).
    head = texts(script.lead[at + 1]["messages"][0]["content"])
    assert any("alice" in t and "still has these teammates" in t for t in head)


def pre_compact(command: str, matcher: str = "") -> dict[str, Any]:
    """Settings with one PreCompact command hook."""
    entry = {"type": "command", "command": command}
    return {"hooks": {"PreCompact": [{"matcher": matcher, "hooks": [entry]}]}}


def test_the_repl_s_compact_command_says_what_happened(
    tmux: tmux_driver.TmuxServer, tmp_path: Path
) -> None:
    refuse = "if grep -q never; then echo 'not while I watch' >&2; exit 2; fi"
    (tmp_path / "settings.json").write_text(json.dumps(pre_compact(refuse, "manual")))

    def respond(body: dict[str, Any]) -> Turn:
        if is_summary(body):
            return Turn(text=SUMMARY_ANSWER)
        if after_compaction(body):
            return Turn(text="Still here.", input_tokens=900)
        return Turn(text="Hi there.", input_tokens=12_345)

    with FakeAnthropicServer(responder=respond) as server:
        pane = start(
            tmux,
            tmp_path,
            "--model",
            MODEL,
            "--settings",
            str(tmp_path / "settings.json"),
            **anthropic_env(server),
        )
        enter(pane, "/compact")  # nothing to compact yet
        pane.wait_for("Error: Not enough messages to compact.")
        enter(pane, "/help")
        pane.wait_for(re.compile(r"/compact \[TEXT\] +summarize the conversation"))
        enter(pane, "hello")
        pane.wait_for("Hi there.")
        # Tab completes the command's name; its instructions reach the summary request.
        pane.type("/comp")
        pane.send_keys("Tab")
        pane.wait_for(re.compile(r"^> /compact\n .* · default · ", re.M))
        enter(pane, "keep the greetings")
        # The last request's 12,345 tokens, and what was added after it (estimated).
        pane.wait_for(re.compile(r"Conversation compacted \(12,3[4-9]\d tokens before\)"))
        enter(pane, "and now?")
        pane.wait_for("Still here.")
        # A PreCompact hook that exits 2 refuses it, saying why; the model is not asked.
        asked = len(server.requests)
        enter(pane, "/compact never")
        screen = pane.wait_for("Compaction blocked by a PreCompact hook: not while I watch")
        assert len(server.requests) == asked
        leave(pane)
    bodies = [r.body for r in server.requests]
    [summary] = [b for b in bodies if is_summary(b)]
    assert "keep the greetings" in "\n".join(texts(summary["messages"][-1]["content"]))
    after = bodies[-1]
    assert after_compaction(after) and SUMMARY in texts(after["messages"][0]["content"])[0]
    assert "and now?" in "\n".join(texts(after["messages"][-1]["content"]))
    assert screen.count("Conversation compacted") == 1
