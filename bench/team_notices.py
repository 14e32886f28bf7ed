"""What idle and protocol notices cost a team lead: their share of its input tokens.

The scenario (``taskloom -p --teams`` against the fake Anthropic server, the real SSE wire
format): the lead creates 10 tasks and spawns alice, bob and carol in one message, then gives
each free teammate the next task (TaskUpdate ``owner``) whenever one reports; a teammate
completes its task, tells the next teammate about every other one (a peer message, which
wakes that teammate), reports ``done #N`` to the lead and ends its turn; once all 10 are
reported the lead asks each to shut down, and answers once all three approved.

It runs twice per round, with the same build: **before**, with the setting
``teammateIdleNotices: "each"``, which restores the old delivery (every idle notice and
shutdown approval a protocol row that starts a lead turn of its own, unfolded: as at
815cf13), and **after**, with the default (held for the lead's next turn, one teammate's
idle notices folded into one).

Over every request of the lead, tokens are estimated as the characters of its system prompt,
tools and messages / 4. The notices' share: a request the notices alone caused (its last user
message holds notices and nothing else) counts whole, unless it is the lead's last (its final
answer, which every run makes; where notices started it, their text counts); in any other
request, the text of the notices it holds counts. Notices: ``idle_notification``,
``shutdown_approved``, ``shutdown_rejected``, ``plan_approval_request``,
``permission_request``. Target: after <= 5 %.
``.venv/bin/python bench/team.py --notices --runs 3``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import child_env, child_max_rss_mib
from coordinator import _exe, _verdict

from coordinator_scenario import system_text, texts
from fake_servers import FakeAnthropicServer, ToolCall, Turn

SHARE_TARGET = 0.05
TASKS = 10
NAMES = ("alice", "bob", "carol")
FINAL = "All ten tasks are done; the team has shut down."
NOTICE_TYPES = (
    "idle_notification",
    "shutdown_approved",
    "shutdown_rejected",
    "plan_approval_request",
    "permission_request",
)
_ELEMENT = re.compile(r"<teammate-message [^>]*>\n(.*?)\n</teammate-message>", re.S)
_TYPE = re.compile(r'^\{"type": "(\w+)"')
_CREATED = re.compile(r"Task #(\d+) created successfully")
_ASSIGNED = re.compile(r'"type": "task_assignment", "taskId": "(\d+)"')
_REPORTED = re.compile(r"done #(\d+)")


def _seen(messages: list[dict[str, Any]]) -> str:
    return "\n".join(t for m in messages if m["role"] == "user" for t in texts(m["content"]))


def _calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        b
        for m in messages
        if m["role"] == "assistant"
        for b in m["content"]
        if b.get("type") == "tool_use"
    ]


@dataclass
class NoticeScript:
    """The lead's and the three teammates' answers (see the module docstring)."""

    lead_bodies: list[dict[str, Any]] = field(default_factory=list)
    finished: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict[str, Any]) -> Turn:
        """The next answer to ``body``."""
        system = system_text(body)
        with self._lock:
            for name in NAMES:
                if f"You are {name}, a member of the agent team" in system:
                    return _teammate(name, body["messages"])
            self.lead_bodies.append(body)
            turn = _lead(body["messages"])
            self.finished = self.finished or turn.text == FINAL
            return turn


def _lead(messages: list[dict[str, Any]]) -> Turn:
    seen, calls = _seen(messages), _calls(messages)
    if not calls:
        creates = tuple(
            ToolCall("TaskCreate", {"subject": f"task {i}", "description": f"part {i} of 10"})
            for i in range(1, TASKS + 1)
        )
        spawns = tuple(
            ToolCall("Agent", {"description": n, "name": n, "prompt": "Work the tasks I give you."})
            for n in NAMES
        )
        return Turn(text="Ten tasks, three teammates.", tool_calls=creates + spawns)
    approved = sum(t == "shutdown_approved" for t in _types(seen))
    if approved >= len(NAMES):
        return Turn(text=FINAL)
    tasks = _CREATED.findall(seen)
    reported = set(_REPORTED.findall(seen))
    if len(reported) >= TASKS:
        if any(isinstance(c["input"].get("message"), dict) for c in calls):
            return Turn(text="Waiting for the shutdowns.")
        stop = tuple(
            ToolCall("SendMessage", {"to": n, "message": {"type": "shutdown_request"}})
            for n in NAMES
        )
        return Turn(tool_calls=stop)
    owners = {
        str(c["input"]["taskId"]): c["input"]["owner"]
        for c in calls
        if c["name"] == "TaskUpdate" and "owner" in c["input"]
    }
    free = [n for n in NAMES if all(t in reported for t, o in owners.items() if o == n)]
    todo = [t for t in tasks if t not in owners]
    assign = tuple(
        ToolCall("TaskUpdate", {"taskId": t, "owner": n}) for n, t in zip(free, todo, strict=False)
    )
    if assign:
        return Turn(text="Next tasks.", tool_calls=assign)
    return Turn(text="Waiting for the team.")


def _teammate(name: str, messages: list[dict[str, Any]]) -> Turn:
    seen, calls = _seen(messages), _calls(messages)
    request = re.findall(r'"requestId": "(shutdown-\d+@\w+)"', seen)
    answered = any(isinstance(c["input"].get("message"), dict) for c in calls)
    if request and not answered:
        answer = {"type": "shutdown_response", "request_id": request[-1], "approve": True}
        return Turn(tool_calls=(ToolCall("SendMessage", {"to": "team-lead", "message": answer}),))
    if answered:
        return Turn(text="Shutting down.")
    done = {
        str(c["input"]["taskId"])
        for c in calls
        if c["name"] == "TaskUpdate" and c["input"].get("status") == "completed"
    }
    open_tasks = [t for t in _ASSIGNED.findall(seen) if t not in done]
    if not open_tasks:
        return Turn(text=f"{name}: finished #{max(done, key=int)}." if done else "Ready.")
    task = open_tasks[0]
    todo = [
        ToolCall("TaskUpdate", {"taskId": task, "status": "completed"}),
        ToolCall(
            "SendMessage",
            {"to": "team-lead", "message": f"done #{task}", "summary": f"#{task} done"},
        ),
    ]
    if int(task) % 2 == 0:  # every other task touches what the next teammate works on
        peer = NAMES[(NAMES.index(name) + 1) % len(NAMES)]
        note = {"to": peer, "message": f"#{task} changed the shared config.", "summary": "config"}
        todo.append(ToolCall("SendMessage", note))
    return Turn(tool_calls=tuple(todo))


def _types(text: str) -> list[str]:
    """The structured types of the teammate messages in ``text``."""
    return [m.group(1) for e in _ELEMENT.findall(text) if (m := _TYPE.match(e))]


def _notice_chars(text: str) -> tuple[int, int]:
    """(characters of the notices in ``text``, characters of the other teammate messages)."""
    notices = others = 0
    for element in _ELEMENT.finditer(text):
        found = _TYPE.match(element.group(1))
        if found is not None and found.group(1) in NOTICE_TYPES:
            notices += len(element.group(0))
        else:
            others += len(element.group(0))
    return notices, others


@dataclass
class Share:
    """One run's figures."""

    requests: int
    alone: int
    tokens: int
    notice_tokens: int
    notices: int
    wall: float
    finished: bool

    @property
    def share(self) -> float:
        """The notices' share of the lead's input tokens."""
        return self.notice_tokens / self.tokens if self.tokens else 0.0


def measure(bodies: list[dict[str, Any]]) -> tuple[int, int, int, int]:
    """(input tokens, notice tokens, requests the notices alone caused, notices delivered)."""
    tokens = notice_tokens = alone = delivered = 0
    for i, body in enumerate(bodies):
        messages = body["messages"]
        size = len(json.dumps(body.get("system", ""))) + len(json.dumps(body.get("tools", [])))
        size += len(json.dumps(messages))
        tokens += size // 4
        last = messages[-1]
        blocks = last["content"] if isinstance(last["content"], list) else []
        new = "\n".join(t for t in texts(last["content"]))
        notices, others = _notice_chars(new)
        delivered += sum(t in NOTICE_TYPES for t in _types(new))
        results = any(b.get("type") == "tool_result" for b in blocks)
        final = i == len(bodies) - 1  # the run's answer: every run makes that request
        if notices and not others and not results and not final:
            alone += 1
            notice_tokens += size // 4
        else:
            notice_tokens += _notice_chars(_seen(messages))[0] // 4
    return tokens, notice_tokens, alone, delivered


def notice_run(server: FakeAnthropicServer, env: dict[str, str], workdir: str, each: bool) -> Share:
    """One run of the scenario, with the old delivery (``each``) or the new one."""
    script = NoticeScript()
    server.responder = script
    argv = [_exe(), "-p", "Split the ten tasks.", "--teams", "--output-format", "stream-json"]
    argv += ["--verbose", "--model", "claude-sonnet-4-5", "--dangerously-skip-permissions"]
    if each:
        argv += ["--settings", json.dumps({"teammateIdleNotices": "each"})]
    wall, _ = child_max_rss_mib(argv, env, workdir)
    tokens, notice_tokens, alone, delivered = measure(script.lead_bodies)
    return Share(
        len(script.lead_bodies), alone, tokens, notice_tokens, delivered, wall, script.finished
    )


def main(runs: int, *, bytecode_cache: bool = True) -> int:
    """Run both deliveries ``runs`` times each (interleaved); print the figures."""
    scratch = tempfile.mkdtemp(prefix="taskloom-bench-")
    home, workdir = os.path.join(scratch, "home"), os.path.join(scratch, "cwd")
    os.makedirs(workdir)
    pycache = os.path.join(scratch, "pycache") if bytecode_cache else None
    before: list[Share] = []
    after: list[Share] = []
    try:
        with FakeAnthropicServer() as server:
            env = child_env(
                pycache,
                ANTHROPIC_BASE_URL=server.url,
                ANTHROPIC_API_KEY="bench",
                TASKLOOM_HOME=home,
            )
            notice_run(server, env, workdir, each=False)  # warm-up: caches, bytecode
            for _ in range(runs):
                before.append(notice_run(server, env, workdir, each=True))
                after.append(notice_run(server, env, workdir, each=False))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"lead notices: {runs} runs each (lead + alice, bob, carol; 10 tasks; shutdown)")
    for label, shares in (("before (teammateIdleNotices: each)", before), ("after", after)):
        print(f"  {label}:")
        print(f"    lead_requests_per_run: {', '.join(str(s.requests) for s in shares)}")
        print(f"    caused_by_notices_alone: {', '.join(str(s.alone) for s in shares)}")
        print(f"    notices_delivered: {', '.join(str(s.notices) for s in shares)}")
        print(f"    lead_input_tokens: {', '.join(str(s.tokens) for s in shares)}")
        print(f"    notice_tokens: {', '.join(str(s.notice_tokens) for s in shares)}")
        print(f"    notice_share: {', '.join(f'{s.share:.1%}' for s in shares)}")
        print(f"    wall_s_median: {statistics.median(s.wall for s in shares):.3f}")
        print(f"    finished_runs: {sum(s.finished for s in shares)}/{len(shares)}")
    worst = max(s.share for s in after)
    print(
        f"{_verdict(worst <= SHARE_TARGET)}: notices take at most {worst:.1%} of the lead's "
        f"input tokens (before: {statistics.median(s.share for s in before):.1%} median; "
        f"target <= {SHARE_TARGET:.0%})"
    )
    return 0 if all(s.finished for s in before + after) else 1
