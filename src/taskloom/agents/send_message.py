"""SendMessage: steer running agents, resume a stopped one, or write to another session."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from taskloom.errors import TaskError, ToolError
from taskloom.tools.base import Tool, ToolContext, ToolInput, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.agents.service import AgentService


#: What ``to`` may be (the same text in the model and in :data:`INPUT_SCHEMA`).
TO_DESCRIPTION = (
    'The recipient: an agent\'s id or the name it was given; "*" for every running agent '
    "you may message; the session id, for the main session (from an agent); or "
    '"uds:<socket path>" for another taskloom session on this machine (text only).'
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


#: :class:`SendMessageInput`'s closed schema written out (see ``Tool.static_schema``), so that
#: offering the tool does not build the model; tests check it is the generated one.
INPUT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`SendMessageTool`.",
    "properties": {
        "to": {"description": TO_DESCRIPTION, "type": "string"},
        "message": {
            "anyOf": [{"type": "string"}, {"additionalProperties": True, "type": "object"}],
            "description": MESSAGE_DESCRIPTION,
        },
        "summary": {"type": "string", "description": "A 5-10 word preview."},
    },
    "required": ["to", "message"],
    "type": "object",
}


class SendMessageTool(Tool[SendMessageInput]):
    """Messages between agents, and to other sessions."""

    name = "SendMessage"
    description = (
        "Send a message to an agent, by its id or name. A running agent sees it at its next "
        "tool boundary, with who sent it; a finished one is resumed in the background with "
        'it, keeping its context, and you are notified again when it finishes. to="*" '
        "reaches every running agent you may message; an agent can write to the main session "
        'by its session id; to="uds:<socket path>" hands text to another taskloom session on '
        "this machine. message is text, or a structured object (shutdown_request, "
        "shutdown_response, plan_approval_response); a shutdown_request gets a request_id, "
        "which the result tells you."
    )
    Input = SendMessageInput
    static_schema = (SendMessageInput, INPUT_SCHEMA)
    kind = "other"

    def __init__(self, service: AgentService) -> None:
        """Deliver through ``service``."""
        self.service = service

    async def call(self, params: SendMessageInput, ctx: ToolContext) -> ToolResult:
        """Queue, broadcast, resume or hand over."""
        try:
            delivery = await self.service.deliver(
                params.to, params.message, ctx, summary=params.summary
            )
        except (ToolError, TaskError) as exc:
            return tool_error(str(exc))
        return ToolResult(delivery.text, data=delivery.data)
