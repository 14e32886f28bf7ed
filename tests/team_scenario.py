"""The team scenario, as the model plays it: for the end-to-end test and the bench.

``TeamScript`` answers :class:`fake_servers.FakeAnthropicServer` requests from what each
conversation shows (the lead's system prompt has no team section; a teammate's names it):

1. The lead spawns alice (with ``team_name``) and bob (without) in one message.
2. Each teammate reports to ``team-lead`` with SendMessage and a summary, then ends its turn
   (it goes idle).
3. Once the lead has both reports, it sends each a ``shutdown_request`` (unless
   ``shut_down`` is False: then it just ends its turn with both idle).
4. Each teammate approves with a ``shutdown_response`` carrying the request id it was sent.
5. Once the lead has both ``shutdown_approved``, it answers ``Team done.``
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from coordinator_scenario import system_text, texts
from fake_servers import ToolCall, Turn

TEAM = "alpha"
FINAL = "Team done."
_REQUEST = re.compile(r'"requestId": ?"(shutdown-\d+@\w+)"')


def _all_text(messages: list[dict[str, Any]]) -> str:
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
class TeamScript:
    """Answers the lead's and the teammates' requests (see the module docstring)."""

    shut_down: bool = True
    lead_requests: list[dict[str, Any]] = field(default_factory=list)
    teammate_requests: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict[str, Any]) -> Turn:
        """The next answer to ``body``."""
        system = system_text(body)
        with self._lock:
            for name in ("alice", "bob"):
                if f"You are {name}, a member of the agent team" in system:
                    self.teammate_requests.setdefault(name, []).append(body)
                    return self._teammate(name, body["messages"])
            self.lead_requests.append(body)
            return self._lead(body["messages"])

    def _lead(self, messages: list[dict[str, Any]]) -> Turn:
        seen, calls = _all_text(messages), _calls(messages)
        if not calls:
            spawn = (
                ToolCall(
                    "Agent",
                    {"description": "a", "prompt": "Check module A.", "name": "alice",
                     "team_name": TEAM},
                ),
                ToolCall("Agent", {"description": "b", "prompt": "Check module B.", "name": "bob"}),
            )  # fmt: skip
            return Turn(text="Spawning the team.", tool_calls=spawn)
        reports = sum(f"report from {n}" in seen for n in ("alice", "bob"))
        reports = min(reports, seen.count("idle_notification"))  # and both went idle
        approved = seen.count('"type": "shutdown_approved"') + seen.count(
            '"type":"shutdown_approved"'
        )
        asked = [c for c in calls if c["name"] == "SendMessage"]
        if approved >= 2:
            return Turn(text=FINAL)
        if reports >= 2 and not asked:
            if not self.shut_down:
                return Turn(text="Both reported; leaving them idle.")
            stop = tuple(
                ToolCall("SendMessage", {"to": n, "message": {"type": "shutdown_request",
                                                              "reason": "done"}})
                for n in ("alice", "bob")
            )  # fmt: skip
            return Turn(tool_calls=stop)
        return Turn(text="Waiting for the team.")

    def _teammate(self, name: str, messages: list[dict[str, Any]]) -> Turn:
        seen, calls = _all_text(messages), _calls(messages)
        requests = _REQUEST.findall(seen)
        if requests and not any(
            c["name"] == "SendMessage" and isinstance(c["input"].get("message"), dict)
            for c in calls
        ):
            answer = {"type": "shutdown_response", "request_id": requests[-1], "approve": True}
            return Turn(
                tool_calls=(ToolCall("SendMessage", {"to": "team-lead", "message": answer}),)
            )
        if not calls:
            report = {"to": "team-lead", "message": f"report from {name}", "summary": f"{name} ok"}
            return Turn(tool_calls=(ToolCall("SendMessage", report),))
        return Turn(text=f"{name} idle")


def team_argv(prompt: str = "Split the work.") -> list[str]:
    """The print-mode arguments of the scenario (after ``taskloom``)."""
    return [
        "-p",
        prompt,
        "--teams",
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        "claude-sonnet-4-5",
        "--dangerously-skip-permissions",
    ]


def events_of(stdout: str) -> list[dict[str, Any]]:
    """The stream-json events printed."""
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]
