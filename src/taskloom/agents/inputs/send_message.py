"""Input models of :mod:`taskloom.agents.send_message` (imported on first use)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from taskloom.tools.inputs import ToolInput

#: What ``to`` may be (written out again in the tool's static schema: tests check they agree).
TO_DESCRIPTION = (
    'The recipient: an agent\'s id or the name it was given; "*" for every running agent '
    "you may message; the session id, for the main session (from an agent); or "
    '"uds:<socket path>" for another taskloom session on this machine, or '
    '"bridge:<session id>" for one on the Ray cluster (text only; see ListPeers).'
)
#: What ``message`` may be.
MESSAGE_DESCRIPTION = (
    'Text, or a structured object: {"type": "shutdown_request", "reason"?}, '
    '{"type": "shutdown_response", "request_id", "approve": bool, "reason"?} or '
    '{"type": "plan_approval_response", "request_id", "approve": bool, '
    '"feedback"?}.'
)


class SendMessageInput(ToolInput):
    """Input of :class:`SendMessageTool`."""

    to: str = Field(description=TO_DESCRIPTION)
    message: str | dict[str, Any] = Field(description=MESSAGE_DESCRIPTION)
    summary: str | None = Field(default=None, description="A 5-10 word preview.")


#: What ``notify_when_idle`` does (the team lead's SendMessage only).
NOTIFY_DESCRIPTION = (
    "Teammates only: wake me with their next idle notice (else it comes with my next turn)."
)


class LeadSendMessageInput(SendMessageInput):
    """Input of :class:`LeadSendMessageTool`."""

    notify_when_idle: bool = Field(default=False, description=NOTIFY_DESCRIPTION)
