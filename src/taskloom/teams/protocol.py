"""What the members of a team say to each other: wrapped messages and structured bodies.

Every message a member receives from another member is wrapped in a ``<teammate-message>``
element naming its sender (:func:`wrap`), so the model can tell it from its user's words; the
body is quoted (:func:`taskloom.quoting.quote`) so that it can neither end that element nor
start another, and the attributes are escaped. Structured messages (idle notifications,
shutdown and plan approval exchanges, task assignments, permission relays) are JSON objects
with a string ``type``, made by the builders here. Only the code that sends protocol posts
one, as a mailbox row of its own kind with the object as its payload (the model is shown it
wrapped): code reads a protocol message from that payload, never from a body, so text that
merely looks like one stays text. Timestamps are ISO 8601 UTC with milliseconds and ``Z``.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from taskloom.quoting import attribute, quote
from taskloom.session import LEAD_CLOSING, LEAD_PREAMBLE, lead_batch

#: The lead's name in its team (its agent id is ``team-lead@<team>``).
LEAD_NAME = "team-lead"
#: The longest summary an idle notification carries (the rest of the answer is cut).
SUMMARY_LIMIT = 200
#: What an in-process teammate says it runs in (``paneId`` and ``backendType``).
IN_PROCESS = "in-process"
#: What a teammate in a tmux pane says it runs in (``backendType``).
TMUX = "tmux"


def agent_id(name: str, team: str) -> str:
    """A member's agent id (and, for a teammate, its mailbox address): ``<name>@<team>``."""
    return f"{name}@{team}"


def wrap(body: str, *, sender: str, color: str | None = None, summary: str | None = None) -> str:
    """``body`` as a member receives it from ``sender`` (a name, e.g. ``team-lead``).

    The body is quoted: it cannot close the element nor open another (a tag of ours in it
    reads ``&lt;/teammate-message>``); it is otherwise as written. Attributes are escaped.

    Args:
        body: The message (text, or a structured message's JSON).
        sender: The sending member's name.
        color: The sender's colour, when it has one.
        summary: A short preview, when there is one.
    """
    attributes = [f'teammate_id="{attribute(sender)}"']
    if color:
        attributes.append(f'color="{attribute(color)}"')
    if summary:
        attributes.append(f'summary="{attribute(summary)}"')
    return f"<teammate-message {' '.join(attributes)}>\n{quote(body)}\n</teammate-message>"


def message_type(payload: str) -> str:
    """The ``type`` of a structured message built here (its topic in the mailbox)."""
    data = structured(payload)
    if data is None:
        raise ValueError("not a structured message")
    return str(data["type"])


def structured(body: str) -> dict[str, Any] | None:
    """The JSON object with a string ``type`` that ``body`` is; else None.

    For what code built (a payload, a scripted model reading its request): a message's text
    is never read as protocol.
    """
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to read
        return None
    if isinstance(data, dict) and isinstance(data.get("type"), str):
        return data
    return None


def timestamp(at: float | None = None) -> str:
    """``at`` (epoch seconds; default now) as ISO 8601 UTC with milliseconds and ``Z``."""
    moment = datetime.fromtimestamp(time.time() if at is None else at, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def request_id(prefix: str, name: str, at: float | None = None) -> str:
    """A request's id: ``<prefix>-<epoch ms>@<name>`` (``shutdown-…``, ``plan-…``)."""
    millis = int((time.time() if at is None else at) * 1000)
    return f"{prefix}-{millis}@{name}"


def _dump(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False)


def idle_notification(name: str, summary: str, *, at: float | None = None) -> str:
    """A teammate's turn is over: it is available (``summary`` is cut to 200 characters)."""
    return _dump(
        {
            "type": "idle_notification",
            "from": name,
            "timestamp": timestamp(at),
            "idleReason": "available",
            "summary": summary[:SUMMARY_LIMIT],
        }
    )


def shutdown_request(request: str, *, reason: str | None, at: float | None = None) -> str:
    """The lead asks a teammate to shut down (``request`` from :func:`request_id`)."""
    return _dump(
        {
            "type": "shutdown_request",
            "requestId": request,
            "from": LEAD_NAME,
            "reason": reason,
            "timestamp": timestamp(at),
        }
    )


def shutdown_approved(
    request: str,
    *,
    name: str,
    at: float | None = None,
    pane_id: str = IN_PROCESS,
    backend: str = IN_PROCESS,
) -> str:
    """Teammate ``name`` agreed to shut down, and did (in its pane ``pane_id``, if any)."""
    return _dump(
        {
            "type": "shutdown_approved",
            "requestId": request,
            "from": name,
            "timestamp": timestamp(at),
            "paneId": pane_id,
            "backendType": backend,
        }
    )


def shutdown_rejected(request: str, *, name: str, reason: str, at: float | None = None) -> str:
    """Teammate ``name`` refused to shut down, saying why."""
    return _dump(
        {
            "type": "shutdown_rejected",
            "requestId": request,
            "from": name,
            "reason": reason,
            "timestamp": timestamp(at),
        }
    )


def plan_approval_request(request: str, *, name: str, plan: str, at: float | None = None) -> str:
    """Teammate ``name`` (in plan mode) asks the lead to approve ``plan``."""
    return _dump(
        {
            "type": "plan_approval_request",
            "requestId": request,
            "from": name,
            "plan": plan,
            "timestamp": timestamp(at),
        }
    )


def plan_approval_response(request: str, *, approve: bool, feedback: str | None = None) -> str:
    """The lead's answer to a plan approval request (``feedback`` only when given)."""
    data: dict[str, Any] = {
        "type": "plan_approval_response",
        "request_id": request,
        "approve": approve,
    }
    if feedback is not None:
        data["feedback"] = feedback
    return _dump(data)


def permission_request(
    request: str,
    *,
    name: str,
    tool_name: str,
    tool_input: dict[str, Any],
    tool_use_id: str,
    reason: str,
    kind: str = "other",
    target: str | None = None,
    cwd: str = "",
    at: float | None = None,
) -> str:
    """Teammate ``name`` (in a process of its own) asks its lead whether a call may run.

    ``kind``, ``target`` and ``cwd`` are the request's as the teammate's policy saw it.
    """
    return _dump(
        {
            "type": "permission_request",
            "requestId": request,
            "from": name,
            "toolName": tool_name,
            "input": tool_input,
            "toolUseId": tool_use_id,
            "reason": reason,
            "kind": kind,
            "target": target,
            "cwd": cwd,
            "timestamp": timestamp(at),
        }
    )


def permission_response(
    request: str,
    *,
    allow: bool,
    message: str = "",
    updated_input: dict[str, Any] | None = None,
    interrupt: bool = False,
) -> str:
    """The lead's answer to a :func:`permission_request`."""
    data: dict[str, Any] = {
        "type": "permission_response",
        "requestId": request,
        "approve": allow,
        "message": message,
        "interrupt": interrupt,
    }
    if updated_input is not None:
        data["updatedInput"] = updated_input
    return _dump(data)


__all__ = [
    "IN_PROCESS",
    "LEAD_CLOSING",
    "LEAD_NAME",
    "LEAD_PREAMBLE",
    "SUMMARY_LIMIT",
    "TMUX",
    "agent_id",
    "idle_notification",
    "lead_batch",
    "message_type",
    "permission_request",
    "permission_response",
    "plan_approval_request",
    "plan_approval_response",
    "request_id",
    "shutdown_approved",
    "shutdown_rejected",
    "shutdown_request",
    "structured",
    "timestamp",
    "wrap",
]
