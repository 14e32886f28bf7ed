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
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from taskloom.messages import Message
from taskloom.quoting import attribute, quote
from taskloom.session import LEAD_CLOSING, LEAD_PREAMBLE, lead_batch

#: The lead's name in its team (its agent id is ``team-lead@<team>``).
LEAD_NAME = "team-lead"
#: The longest last answer (``result``) an idle notification carries (the rest is cut).
SUMMARY_LIMIT = 200
#: The longest summary of one peer message an idle notification carries.
PEER_SUMMARY_LIMIT = 60
#: The most peer messages an idle notification summarises (the others are counted).
PEER_LIMIT = 5
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


def idle_notification(
    name: str,
    result: str,
    *,
    peers: Sequence[tuple[str, str]] = (),
    failure: str | None = None,
    at: float | None = None,
) -> str:
    """A teammate's turn is over: it is available, or its turn failed (``failure``).

    Args:
        name: The teammate.
        result: Its last answer (``result``, cut to :data:`SUMMARY_LIMIT` characters).
        peers: The messages it sent its teammates since its last notice, as (to whom, their
            summary): ``summary`` says ``[to bob] …; [to carol] …`` (left out when none).
        failure: Why its turn failed (``idleReason`` is then ``failed``).
        at: When (epoch seconds; default now).
    """
    data: dict[str, Any] = {
        "type": "idle_notification",
        "from": name,
        "timestamp": timestamp(at),
        "idleReason": "available" if failure is None else "failed",
    }
    if peers:
        data["summary"] = peer_summary(peers)
    if failure is not None:
        data["failureReason"] = _cut(failure, SUMMARY_LIMIT)
    elif result:
        data["result"] = _cut(result, SUMMARY_LIMIT)
    return _dump(data)


def peer_summary(peers: Sequence[tuple[str, str]]) -> str:
    """``[to bob] …; [to carol] …``: each summary cut, at most :data:`PEER_LIMIT` of them."""
    said = [f"[to {to}] {_cut(' '.join(text.split()), PEER_SUMMARY_LIMIT)}" for to, text in peers]
    if len(said) > PEER_LIMIT:
        said = [*said[:PEER_LIMIT], f"+{len(said) - PEER_LIMIT} more"]
    return "; ".join(said)


def peer_messages(messages: Sequence[Message], team: str) -> list[tuple[str, str]]:
    """The messages a member sent its teammates in ``messages``: (to whom, their summary).

    Its SendMessage calls to one teammate by name (not to the lead, who has them, nor to
    ``*``): their ``summary``, else the text itself (a structured message: its type).
    """
    lead = {LEAD_NAME, agent_id(LEAD_NAME, team)}
    found = []
    for message in messages:
        if message.role != "assistant":
            continue
        for call in message.tool_uses():
            to = call.input.get("to")
            if call.name != "SendMessage" or not isinstance(to, str) or to in lead or to == "*":
                continue
            body = call.input.get("message")
            said = call.input.get("summary") or body
            if isinstance(said, dict):
                said = said.get("type", "")
            found.append((to.removesuffix(f"@{team}"), str(said)))
    return found


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
    "PEER_LIMIT",
    "PEER_SUMMARY_LIMIT",
    "SUMMARY_LIMIT",
    "TMUX",
    "agent_id",
    "idle_notification",
    "lead_batch",
    "message_type",
    "peer_messages",
    "peer_summary",
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
