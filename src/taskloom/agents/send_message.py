"""SendMessage: steer running agents, resume a stopped one, or write to another session."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from taskloom.errors import TaskError, ToolError
from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.agents.inputs.send_message import SendMessageInput
    from taskloom.agents.service import AgentService


#: :class:`SendMessageInput`'s closed schema written out (see ``Tool.static_schema``), so that
#: offering the tool does not build the model; tests check it is the generated one.
INPUT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`SendMessageTool`.",
    "properties": {
        "to": {
            "description": 'The recipient: an agent\'s id or the name it was given; "*" for every '
            "running agent you may message; the session id, for the main session (from an "
            'agent); or "uds:<socket path>" for another taskloom session on this machine, or '
            '"bridge:<session id>" for one on the Ray cluster (text only; see ListPeers).',
            "type": "string",
        },
        "message": {
            "anyOf": [{"type": "string"}, {"additionalProperties": True, "type": "object"}],
            "description": 'Text, or a structured object: {"type": "shutdown_request", '
            '"reason"?}, {"type": "shutdown_response", "request_id", "approve": bool, '
            '"reason"?} or {"type": "plan_approval_response", "request_id", "approve": bool, '
            '"feedback"?}.',
        },
        "summary": {"type": "string", "description": "A 5-10 word preview."},
    },
    "required": ["to", "message"],
    "type": "object",
}


#: :class:`LeadSendMessageInput`'s closed schema written out (see :data:`INPUT_SCHEMA`).
LEAD_INPUT_SCHEMA: dict[str, Any] = {
    **INPUT_SCHEMA,
    "description": "Input of :class:`LeadSendMessageTool`.",
    "properties": {
        **INPUT_SCHEMA["properties"],
        "notify_when_idle": {
            "default": False,
            "description": "Teammates only: wake me with their next idle notice (else it comes "
            "with my next turn).",
            "type": "boolean",
        },
    },
}


class SendMessageTool(Tool["SendMessageInput"]):
    """Messages between agents, and to other sessions."""

    name = "SendMessage"
    description = (
        "Send a message to an agent, by its id or name. A running agent sees it at its next "
        "tool boundary, with who sent it; a finished one is resumed in the background with "
        'it, keeping its context, and you are notified again when it finishes. to="*" '
        "reaches every running agent you may message; an agent can write to the main session "
        'by its session id; to="uds:<socket path>" hands text to another taskloom session on '
        'this machine, to="bridge:<session id>" to one on the Ray cluster (main session only). '
        "message is text, or a structured object (shutdown_request, "
        "shutdown_response, plan_approval_response); a shutdown_request gets a request_id, "
        "which the result tells you."
    )
    input_model = "taskloom.agents.inputs.send_message:SendMessageInput"
    static_schema = (input_model, INPUT_SCHEMA)
    kind = "other"

    def __init__(self, service: AgentService) -> None:
        """Deliver through ``service``."""
        self.service = service

    async def call(self, params: SendMessageInput, ctx: ToolContext) -> ToolResult:
        """Queue, broadcast, resume or hand over."""
        # The lead's own variant may ask for the recipients' next idle notices to wake it.
        from taskloom.agents.inputs.send_message import LeadSendMessageInput

        notify = isinstance(params, LeadSendMessageInput) and params.notify_when_idle
        try:
            delivery = await self.service.deliver(
                params.to, params.message, ctx, summary=params.summary, notify_when_idle=notify
            )
        except (ToolError, TaskError) as exc:
            return tool_error(str(exc))
        return ToolResult(delivery.text, data=delivery.data)


class LeadSendMessageTool(SendMessageTool):
    """SendMessage for a team lead: it may ask to be woken by a teammate's next idle notice."""

    input_model = "taskloom.agents.inputs.send_message:LeadSendMessageInput"
    static_schema = (input_model, LEAD_INPUT_SCHEMA)
