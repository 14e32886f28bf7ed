"""The client a workflow script uses to run agents: ``spawn``, ``wait``, ``gather``, ``send``.

A workflow given as a Python script (the Workflow tool's ``script``) runs in a process of its
own; it reaches the session that started it through two pipes the session opened for it and
named in ``TASKLOOM_WORKFLOW_FDS`` (``REQUEST,REPLY``: the descriptor it writes requests to and
the one it reads replies from). Each request and reply is one JSON object on a line. The pipes
are the script's own (no socket, nothing to authenticate) and close when it exits.

Standard library only, and nothing of taskloom is imported: a script starts at once::

    from taskloom.workflow_client import gather, spawn

    handles = [spawn(f"Summarise {name} in one line.") for name in ["a.py", "b.py"]]
    for line in gather(*handles):
        print(line)
"""

from __future__ import annotations

import json
import os
from typing import IO, Any

#: The environment variable naming the pipes: ``REQUEST,REPLY`` descriptor numbers.
FDS_ENV = "TASKLOOM_WORKFLOW_FDS"


class WorkflowError(RuntimeError):
    """The session refused a request (an unknown agent type, over a limit, no such handle)."""


class AgentFailed(WorkflowError):
    """An agent the script waited for did not complete (it failed, or was stopped)."""


class _Channel:
    """The two pipes to the session, opened on first use."""

    def __init__(self) -> None:
        self._out: IO[str] | None = None
        self._in: IO[str] | None = None
        self._next = 0

    def _open(self) -> tuple[IO[str], IO[str]]:
        if self._out is None or self._in is None:
            raw = os.environ.get(FDS_ENV, "")
            try:
                request, reply = (int(fd) for fd in raw.split(","))
                self._out = os.fdopen(request, "w", encoding="utf-8")
                self._in = os.fdopen(reply, "r", encoding="utf-8")
            except (ValueError, OSError) as exc:
                raise WorkflowError(
                    f"not run as a workflow script ({FDS_ENV}={raw!r}: {exc}); run it through "
                    "the Workflow tool's script"
                ) from exc
        return self._out, self._in

    def call(self, op: str, **fields: Any) -> Any:
        """Send one request and return its reply's value.

        Raises:
            WorkflowError: The session refused it, or is gone.
            AgentFailed: The agent waited for did not complete.
        """
        out, back = self._open()
        self._next += 1
        out.write(json.dumps({"id": self._next, "op": op, **fields}) + "\n")
        out.flush()
        line = back.readline()
        if not line:
            raise WorkflowError("the session closed the workflow's pipe (it was stopped)")
        reply = json.loads(line)
        if "failed" in reply:
            raise AgentFailed(reply["failed"])
        if "error" in reply:
            raise WorkflowError(reply["error"])
        return reply.get("value")


_CHANNEL = _Channel()


def spawn(prompt: str, subagent_type: str | None = None) -> int:
    """Start an agent on ``prompt`` (the session's default type unless one is named).

    It runs in the background, under the workflow's concurrency (it may wait for room);
    the handle returned names it to :func:`wait`, :func:`gather` and :func:`send`.

    Raises:
        WorkflowError: Refused: an unknown agent type, or the workflow's agent limit reached.
    """
    handle: int = _CHANNEL.call("spawn", prompt=prompt, subagent_type=subagent_type)
    return handle


def wait(handle: int) -> str:
    """Wait for the agent ``handle`` to end; its answer.

    Raises:
        AgentFailed: It failed or was stopped (the message says why).
        WorkflowError: No such handle.
    """
    answer: str = _CHANNEL.call("wait", handle=handle)
    return answer


def gather(*handles: int) -> list[str]:
    """Wait for every agent of ``handles``; their answers, in that order.

    Raises:
        AgentFailed: One of them failed or was stopped (once all have ended).
        WorkflowError: No such handle.
    """
    answers: list[str] = _CHANNEL.call("gather", handles=list(handles))
    return answers


def send(handle: int, text: str) -> None:
    """Give the agent ``handle`` a message (it reads it at its next step; resumed if ended).

    Raises:
        WorkflowError: No such handle, or the message could not be delivered.
    """
    _CHANNEL.call("send", handle=handle, text=text)


__all__ = ["FDS_ENV", "AgentFailed", "WorkflowError", "gather", "send", "spawn", "wait"]
