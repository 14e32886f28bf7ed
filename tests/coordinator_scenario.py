"""The coordinator scenario, as the model plays it: for the end-to-end test and the bench.

``CoordinatorScript`` is a responder for :class:`fake_servers.FakeAnthropicServer`: it reads
each request (whose system prompt says whether it is the coordinator or a worker) and answers
from what the conversation shows so far, so the order in which notifications arrive does not
matter:

1. The coordinator starts two workers, without ``run_in_background``: a fast one that answers
   at once, and a slow one that runs ``sleep 30`` in the foreground.
2. When the fast one's first notification arrives, it sends it a follow-up (SendMessage); the
   finished worker is resumed under the same id.
3. When the fast one's second notification arrives, it stops the slow one (TaskStop).
4. When the slow one's ``killed`` notification arrives, it answers ``All done.``
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from fake_servers import ToolCall, Turn
from helpers import TIME_FACTOR

FAST_PROMPT = "FAST: say what you found."
SLOW_PROMPT = "SLOW: run the long command."
FOLLOW_UP = "Follow-up: check the tests too."
FAST_RESULT = "fast result: found 3 call sites"
FOLLOW_UP_RESULT = "follow-up done: tests pass"
SLOW_COMMAND = "sleep 30"
FINAL = "All done."

_NOTE = re.compile(
    r"<task-notification>.*?<task-id>(\w+)</task-id>.*?<status>(\w+)</status>.*?"
    r"</task-notification>",
    re.S,
)
_LAUNCHED = re.compile(r"agentId: (\w+)")


def texts(content: Any) -> list[str]:
    """Every text in a message's content (text blocks and tool results alike)."""
    if isinstance(content, str):
        return [content]
    found: list[str] = []
    for block in content:
        if block.get("type") == "text":
            found.append(block["text"])
        elif block.get("type") == "tool_result":
            found += texts(block.get("content") or [])
    return found


def system_text(body: dict[str, Any]) -> str:
    """The request's system prompt as one string."""
    system = body.get("system") or ""
    return system if isinstance(system, str) else "".join(b.get("text", "") for b in system)


@dataclass
class CoordinatorScript:
    """Answers the coordinator's and the workers' requests (see the module docstring)."""

    #: Every coordinator request body, in order.
    coordinator_requests: list[dict[str, Any]] = field(default_factory=list)
    #: Every worker request body, in order.
    worker_requests: list[dict[str, Any]] = field(default_factory=list)
    #: The ``sleep 30`` processes alive when the coordinator was told TaskStop's answer
    #: (None until then): the stop is verified before it answers, so none.
    left_after_stop: list[int] | None = None
    #: Those alive when it decided to stop the slow worker (its command was running).
    alive_before_stop: list[int] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict[str, Any]) -> Turn | Awaitable[Turn]:
        """The next answer to ``body``."""
        with self._lock:
            if "coordinator mode" in system_text(body):
                self.coordinator_requests.append(body)
                return self._coordinator(body["messages"])
            self.worker_requests.append(body)
            return self._worker(body["messages"])

    def _worker(self, messages: list[dict[str, Any]]) -> Turn:
        first = " ".join(texts(messages[0]["content"]))
        last = " ".join(texts(messages[-1]["content"]))
        if FAST_PROMPT in first:
            return Turn(text=FOLLOW_UP_RESULT if FOLLOW_UP in last else FAST_RESULT)
        if SLOW_PROMPT in first and len(messages) == 1:
            return Turn(tool_calls=(ToolCall("Bash", {"command": SLOW_COMMAND}),))
        return Turn(text="slow finished")

    def _coordinator(self, messages: list[dict[str, Any]]) -> Turn | Awaitable[Turn]:
        ids: list[str] = []
        notes: list[tuple[str, str]] = []
        called: set[str] = set()
        for message in messages:
            if message["role"] == "assistant":
                called |= {b["name"] for b in message["content"] if b.get("type") == "tool_use"}
                continue
            for text in texts(message["content"]):
                ids += _LAUNCHED.findall(text)
                notes += _NOTE.findall(text)
                if text.startswith("Successfully stopped task:") and self.left_after_stop is None:
                    self.left_after_stop = _running(SLOW_COMMAND)
        if not ids:
            spawn = [
                ToolCall("Agent", {"description": "fast research", "prompt": FAST_PROMPT}),
                ToolCall(
                    "Agent",
                    {"description": "slow job", "prompt": SLOW_PROMPT, "subagent_type": "worker"},
                ),
            ]
            return Turn(text="Starting two workers.", tool_calls=tuple(spawn))
        fast, slow = ids[0], ids[1]
        fast_done = sum(1 for task, status in notes if task == fast and status == "completed")
        if (slow, "killed") in notes:
            return Turn(text=FINAL)
        if fast_done >= 2 and "TaskStop" not in called:
            return self._stop_once_running(slow)
        if fast_done >= 1 and "SendMessage" not in called:
            return Turn(tool_calls=(ToolCall("SendMessage", {"to": fast, "message": FOLLOW_UP}),))
        return Turn(text="Waiting for the workers.")

    async def _stop_once_running(self, slow: str) -> Turn:
        """TaskStop of the slow worker, once its command runs (a loaded machine may be late
        starting it): the server answers the others meanwhile. Bounded: it stops anyway."""
        deadline = time.monotonic() + 10 * TIME_FACTOR
        while not (alive := _running(SLOW_COMMAND)) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # a process has no event to wait on: polled
        self.alive_before_stop = alive
        return Turn(tool_calls=(ToolCall("TaskStop", {"task_id": slow}),))


def _running(command: str) -> list[int]:
    """The pids of live processes of this test run whose command line is ``command``.

    Of this run: they carry its mark (``TASKLOOM_TEST_RUN``, inherited from the test), so that
    another run's scenario on the same machine (pytest-xdist, ``.ci/twice``) does not count.
    """
    import os

    import psutil

    mark = os.environ.get("TASKLOOM_TEST_RUN")
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["cmdline"] != command.split() or proc.info["status"] == "zombie":
            continue
        try:
            theirs = proc.environ().get("TASKLOOM_TEST_RUN")
        except psutil.Error:
            continue
        if theirs == mark:
            found.append(proc.pid)
    return found


def coordinator_argv(*extra: str) -> list[str]:
    """The print-mode arguments of the scenario (after ``taskloom``)."""
    return [
        "-p",
        "Investigate and fix the bug.",
        "--coordinator",
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        "claude-sonnet-4-5",
        "--dangerously-skip-permissions",
        *extra,
    ]


def parse_events(stdout: str) -> list[dict[str, Any]]:
    """The stream-json events printed."""
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]
